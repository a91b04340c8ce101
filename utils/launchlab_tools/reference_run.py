"""The reference run: execute notebooks and solutions in place, strictly, and write reports/gpu/<gpu>.json.

Usage: python -m launchlab_tools.reference_run [NOTEBOOK ...]   (default: every notebook and solution with a GPU
cell this machine can run)
This is the notebook half of the GPU tier (`make test-gpu`): every cell runs once, under LAUNCHLAB_STRICT=1,
so a claim that does not hold or a checker that fails its solution fails the cell; each solution's checkers
judge it 5 times (LAUNCHLAB_CHECK_TRIALS), and every run must pass. Cells tagged for more GPUs
than this machine has keep their stored outputs and count as skipped. Entries for notebooks not run this time
are kept from the existing report of the same GPU, so a chapter can be re-run alone. It writes only the report
(and the notebooks it ran): `make reference` then regenerates the start page, which shows the run times.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from launchlab import course
from launchlab.checking import FAIL_MARK, PASS_MARK
from launchlab.claims import NARROW_MARGIN
from launchlab.env import (
    TESTED_VERSIONS_FILE,
    environment,
    gpu_count,
    gpu_slug,
    repo_root,
    version_differences,
)
from launchlab.report import Report, report_path

from . import slides
from .notebooks import course_notebooks, needs_gpus, runs_gpu_cells, source_sha256

SOLUTION_TRIALS = 5


def verdicts(run: dict, rel: str) -> dict[str, str]:
    """{exercise heading: PASS or FAIL} that the checkers of a solution's chapter recorded in the run."""
    chapter = course.chapter_of_path(rel)
    if chapter is None or not rel.startswith("solutions/"):
        return {}
    recorded = run.get("verdicts", {}).get(chapter.number, {})
    return {chapter.exercise(int(n)).heading: PASS_MARK if v.get("passed") else FAIL_MARK
            for n, v in sorted(recorded.items(), key=lambda item: int(item[0]))}


def execute_in_place(path: Path, env_vars: dict[str, str], cell_timeout: int = 600) -> dict:
    """Run every cell this machine can run, keep outputs, save; return cells, failed, skipped and seconds."""
    nb = nbformat.read(path, as_version=4)
    have = gpu_count()
    cells = failed = skipped = 0
    start = time.perf_counter()
    # shutdown_kernel="immediate": nothing is measured while a finished notebook's kernel goes away. The kernel
    # gets this process's environment with env_vars on top (never by changing this process's own).
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel(env={**os.environ, **env_vars}):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            cells += 1
            if needs_gpus(cell) > have:
                skipped += 1
                continue
            try:
                client.execute_cell(cell, index)
            except (CellExecutionError, CellTimeoutError) as exc:
                failed += 1
                first = str(exc).strip().splitlines()[-1:] or [""]
                print(f"  {path.name} cell {index} failed: {first[0][:200]}", file=sys.stderr)
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return {"cells": cells, "failed": failed, "skipped": skipped, "seconds": round(seconds, 1)}


def _untimed_solution(root: Path, path: Path) -> bool:
    """A solution whose checkers time nothing (so it may share the GPU)."""
    rel = path.relative_to(root).as_posix()
    chapter = course.chapter_of_path(rel)
    return rel.startswith("solutions/") and chapter is not None and not chapter.solution_timed


def _run_one(root: Path, path: Path, env_vars: dict[str, str], results_dir: str) -> tuple[str, dict, dict]:
    """Execute one notebook with a results folder of its own: (its path, its entry, the run it recorded)."""
    rel = path.relative_to(root).as_posix()
    own_dir = Path(results_dir) / path.stem / rel.split("/")[0]
    own_dir.mkdir(parents=True, exist_ok=True)
    print(f"running {rel}", flush=True)
    # A solution's checkers judge it SOLUTION_TRIALS times: a right answer must pass every run, not most.
    trials = SOLUTION_TRIALS if rel.startswith("solutions/") else 1
    try:
        entry = execute_in_place(path, {**env_vars, "LAUNCHLAB_CHECK_TRIALS": str(trials),
                                        "LAUNCHLAB_RESULTS_DIR": str(own_dir)})
    except Exception as exc:  # a dead kernel, an unreadable notebook: this notebook failed, the run goes on
        print(f"  {rel} could not run: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr, flush=True)
        entry = {"cells": 0, "failed": 1, "skipped": 0, "seconds": 0.0}
    if trials > 1:
        entry["check_trials"] = trials
    print(f"  {rel}: {entry}", flush=True)
    run_file = own_dir / f"{gpu_slug()}.json"
    own = json.loads(run_file.read_text(encoding="utf-8")) if run_file.exists() else {}
    entry["metrics"], entry["claims"] = sorted(own.get("metrics", {})), sorted(own.get("claims", {}))
    traces = own_dir / "traces"   # the profiler traces the notebook saved, kept under its own name
    if traces.is_dir():
        shutil.copytree(traces, root / "runs" / "reference" / "traces" / rel.replace("/", "_").removesuffix(".ipynb"),
                        dirs_exist_ok=True)
    return rel, entry, own


def _merge_run(run: dict, own: dict) -> None:
    """Add one notebook's recorded figures, units, claims and verdicts to the whole run."""
    for key in ("metrics", "units", "claims"):
        run.setdefault(key, {}).update(own.get(key, {}))
    for chapter, verdicts_ in own.get("verdicts", {}).items():
        run.setdefault("verdicts", {}).setdefault(chapter, {}).update(verdicts_)


def main(argv: list[str] | None = None) -> int:
    """Execute, write the report; exit 1 if a cell failed, a claim did not hold or a checker failed its solution."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to run (default: all)")
    args = parser.parse_args(argv)
    root = repo_root()
    if not environment().has_gpu:
        print(f"make reference needs a CUDA GPU: {environment().problem}", file=sys.stderr)
        return 2
    differ = version_differences(environment())
    if differ:  # the reports describe the tested releases: another release's run would mix two in one file
        print("make reference writes the course's reports on the tested versions only; here "
              + ", ".join(differ) + f". Use `make lab` in a fresh .venv, or change {TESTED_VERSIONS_FILE.name} "
              "and re-run every GPU's report.", file=sys.stderr)
        return 2
    paths = [p.resolve() for p in args.paths]
    if not paths:  # every notebook with a GPU cell this machine can run; the CPU tier runs the rest
        for path in course_notebooks(root):
            if runs_gpu_cells(nbformat.read(path, as_version=4), gpu_count()):
                paths.append(path)
            else:
                print(f"not run here: {path.relative_to(root).as_posix()} (its GPU cells need more GPUs than "
                      f"this machine's {gpu_count()}; the CPU tier runs its other cells)", flush=True)
    entries: dict[str, dict] = {}
    run: dict = {}
    path = report_path(root)
    old = Report.load(path) if path.exists() else Report(gpu=environment().gpu_name)
    declared = {f.name for ch in course.chapters() for f in ch.figures} | {
        c.name for ch in course.chapters() for c in ch.claims}
    known = {rel for ch in course.chapters() for rel in (ch.lecture(), ch.solution())}

    def write_report() -> Report:
        """The report with every notebook run so far: written after each one, so a run stopped midway keeps
        what it measured."""
        for rel, entry in entries.items():
            entry["source_sha256"] = source_sha256(root / rel)
            found = verdicts(run, rel)
            if found:
                entry["verdicts"] = found
        merged = old.merged({rel: dict(sorted(e.items())) for rel, e in entries.items()}, run, declared, known)
        merged.write(path)
        return merged

    with tempfile.TemporaryDirectory() as results_dir:
        env_vars = {"LAUNCHLAB_STRICT": "1", "LAUNCHLAB_RESULTS_DIR": results_dir, "LAUNCHLAB_ROOT": str(root),
                    "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        untimed = [p for p in paths if _untimed_solution(root, p)]
        if untimed:  # first, side by side: nothing they do is timed, and nothing timed runs beside them
            print(f"running {len(untimed)} solutions whose checkers time nothing, side by side", flush=True)
            # Each in a process of its own (a notebook client per process), all at once.
            spawn = multiprocessing.get_context("spawn")   # a fresh interpreter: this one has initialised CUDA
            with concurrent.futures.ProcessPoolExecutor(max_workers=len(untimed), mp_context=spawn) as pool:
                for rel, entry, own in pool.map(_run_one, [root] * len(untimed), untimed, [env_vars] * len(untimed),
                                                [results_dir] * len(untimed)):
                    entries[rel] = entry
                    _merge_run(run, own)
            write_report()
        for notebook in (p for p in paths if p not in untimed):
            rel, entries[rel], own = _run_one(root, notebook, env_vars, results_dir)
            _merge_run(run, own)
            write_report()
    report = write_report()
    # New stored outputs can move a lecture's slide breaks (the rule reads their sizes): keep the decks' metadata
    # in step, as `slides --check` in the CPU tier requires.
    for moved in slides.write(root):
        print(f"slide metadata rewritten for its new outputs: {moved.relative_to(root).as_posix()}")
    failed = sum(r["failed"] for r in entries.values())
    ran = Report(gpu=report.gpu, claims=run.get("claims", {}))
    bad_claims = ran.failed_claims()
    narrow = ran.narrow_claims(NARROW_MARGIN)
    failed_checks = [f"{rel}: {name}" for rel, r in entries.items() for name, mark in r.get("verdicts", {}).items()
                     if mark != PASS_MARK]
    print("seconds per notebook, slowest first:")
    for rel, r in sorted(entries.items(), key=lambda item: -item[1]["seconds"]):
        print(f"  {r['seconds']:7.1f}  {rel}")
    print(f"  {sum(r['seconds'] for r in entries.values()):7.1f}  in all")
    print(f"wrote {path.relative_to(root)}: {len(paths)} notebooks, {failed} failed cells, "
          f"{len(run.get('metrics', {}))} metrics, claims not held: {bad_claims or 'none'}, "
          f"checks failed: {failed_checks or 'none'}")
    print(f"claims held by under {NARROW_MARGIN:.0%}: "
          + (", ".join(f"{name} ({m:.0%})" for name, m in narrow.items()) or "none"))
    return 1 if failed or bad_claims or failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
