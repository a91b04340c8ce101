"""The reference run: execute notebooks and solutions in place and write reports/gpu/<gpu>.json.

Usage: python -m launchlab.reference_run [NOTEBOOK ...]   (default: every notebook and solution)
Cells tagged for more GPUs than this machine has keep their stored outputs and count as skipped. Entries
for notebooks not run this time are kept from the existing report of the same GPU, so a chapter can be
re-run alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from . import labs, syllabus
from .env import environment, gpu_count, gpu_slug, library_version, repo_root
from .notebooks import code_sources, course_notebooks, needs_gpus, source_sha256


def execute_in_place(path: Path, env_vars: dict[str, str], cell_timeout: int = 600) -> dict:
    """Run every cell this machine can run, keep outputs, save; return cells, failed, skipped, seconds."""
    nb = nbformat.read(path, as_version=4)
    have = gpu_count()
    old = {k: os.environ.get(k) for k in env_vars}
    os.environ.update(env_vars)  # the kernel inherits the environment of this process
    cells = failed = skipped = 0
    start = time.perf_counter()
    try:
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
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
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return {"cells": cells, "failed": failed, "skipped": skipped, "seconds": round(seconds, 1)}


def write_report(root: Path, paths: list[Path], results: dict[str, dict], run: dict) -> Path:
    """Merge this run into reports/gpu/<gpu>.json in the format of GUIDE section 7."""
    env = environment()
    report_path = root / "reports" / "gpu" / f"{gpu_slug()}.json"
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    notebooks = report.get("notebooks", {})
    for path in paths:
        rel = path.relative_to(root).as_posix()
        notebooks[rel] = {"source_sha256": source_sha256(path), **results[rel]}
    metrics = {**report.get("metrics", {}), **run.get("metrics", {})}
    claims = {**report.get("claims", {}), **run.get("claims", {})}
    report = {
        "gpu": env.gpu_name, "driver": env.driver, "cuda_runtime": env.cuda_runtime,
        "torch": library_version("torch"), "cupy": library_version("cupy"),
        "python": env.python, "date": dt.date.today().isoformat(),
        "notebooks": dict(sorted(notebooks.items())),
        "metrics": dict(sorted(metrics.items())), "claims": dict(sorted(claims.items())),
    }
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report_path


def collect_run(results_dir: Path, keep_dir: Path) -> dict:
    """The run file the notebooks wrote (metrics, claims); other folders there (traces) are copied to keep_dir."""
    run_file = results_dir / f"{gpu_slug()}.json"
    run = json.loads(run_file.read_text(encoding="utf-8")) if run_file.exists() else {}
    for item in results_dir.iterdir():
        if item.is_dir():
            shutil.copytree(item, keep_dir / item.name, dirs_exist_ok=True)
    return run


def main(argv: list[str] | None = None) -> int:
    """Execute, regenerate labs, write the report; exit 1 if a cell failed or a claim did not hold."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to run (default: all)")
    args = parser.parse_args(argv)
    root = repo_root()
    if not environment().has_gpu:
        print(f"make reference needs a CUDA GPU: {environment().problem}", file=sys.stderr)
        return 2
    paths = [p.resolve() for p in args.paths] or course_notebooks(root)
    with tempfile.TemporaryDirectory() as results_dir:
        env_vars = {"LAUNCHLAB_STRICT": "1", "LAUNCHLAB_RESULTS_DIR": results_dir, "LAUNCHLAB_ROOT": str(root),
                    "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        results = {}
        for path in paths:
            rel = path.relative_to(root).as_posix()
            print(f"running {rel} ({len(code_sources(nbformat.read(path, as_version=4)))} code cells)", flush=True)
            results[rel] = execute_in_place(path, env_vars)
            print(f"  {results[rel]}", flush=True)
        run = collect_run(Path(results_dir), root / "runs" / "reference")
    report_path = write_report(root, paths, results, run)
    labs.generate(root)
    syllabus.generate(root)  # the start page shows each chapter's run time from the report
    failed = sum(r["failed"] for r in results.values())
    bad_claims = [k for k, v in run.get("claims", {}).items() if not v]
    print(f"wrote {report_path.relative_to(root)}: {len(paths)} notebooks, {failed} failed cells, "
          f"{len(run.get('metrics', {}))} metrics, claims not held: {bad_claims or 'none'}")
    return 1 if failed or bad_claims else 0


if __name__ == "__main__":
    sys.exit(main())
