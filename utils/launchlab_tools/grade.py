"""Grade learners' lab notebooks: run each one headless and report a verdict per exercise.

    python -m launchlab_tools.grade labs/09_past_graphs.ipynb                 # one learner's lab
    python -m launchlab_tools.grade class/*/04_*.ipynb --json grades.json     # a class table, and every detail

Each notebook runs in a child process with a deadline (a kernel that never ends, or a cell that waits forever,
is reported, not fatal); cells tagged for more GPUs than this machine has are left out. The lab's chapter is
found by the notebook's file name and its exercises from the course model. A verdict is the one the exercise's
checker recorded in the run (launchlab.results): PASS, `PASS (CPU part)` when a CPU could judge only part of it,
FAIL (with its detail and hint), `not attempted` when the checker met the lab's stub, `restart` when an earlier
exercise left the GPU broken, `error` when the checker cell raised or recorded no verdict, `needs a GPU` when its
cell could not run here, and `timed out` when the notebook's deadline passed first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import nbformat

from launchlab import course
from launchlab.checking import NEEDS_GPU
from launchlab.env import gpu_count, gpu_slug

from .labs import STUB_TAIL
from .notebooks import needs_gpus

# NEEDS_GPU is the checkers' own wording (launchlab.checking), so a learner and a grader read the same words.
PASS, PARTIAL, FAIL, NOT_ATTEMPTED, RESTART, ERROR, TIMED_OUT = (
    "PASS", "PASS (CPU part)", "FAIL", "not attempted", "restart", "error", "timed out")

# The child executes the notebook (errors allowed, every cell under a deadline) and saves it with its outputs.
_EXECUTE = """
import sys
import nbformat
from nbclient import NotebookClient
source, target, cwd, cell_timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nb = nbformat.read(source, as_version=4)
client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, interrupt_on_timeout=True,
                        kernel_name="python3", resources={"metadata": {"path": cwd}})
try:
    client.execute()
finally:
    nbformat.write(nb, target)
"""


def exercise_cells(nb: nbformat.NotebookNode, chapter: course.Chapter) -> dict[course.Exercise, int]:
    """{exercise: index of the cell that calls its declared checker} (a call, not a name in a comment)."""
    found = {}
    for ex in chapter.exercises:
        call = re.compile(rf"\bcheck\.{re.escape(ex.checker)}\(")
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and call.search(re.sub(r"#.*", "", cell.source)):
                found[ex] = index
                break
    return found


def _text(cell) -> str:
    """Everything a cell printed (streams and rich text)."""
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") if isinstance(out.get("text", ""), str) else "".join(out["text"]))
        if out.get("output_type") in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _error(cell) -> str | None:
    """The error a cell raised, as 'Name: message', if it raised one."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"[:300]
    return None


def lab_chapter(nb: nbformat.NotebookNode, path: Path) -> course.Chapter:
    """The chapter a learner's notebook is the lab of: the one its `for_lab("NN")` cell names (a copy saved as
    09_past_graphs-Copy1.ipynb is still lab 09), else the one its file name starts with."""
    for cell in nb.cells:
        found = re.search(r"""for_lab\(\s*["'](\d\d)["']\s*\)""", cell.source) if cell.cell_type == "code" else None
        if found:
            return course.chapter(found.group(1))
    chapter = course.chapter_of_path(path.name) or next(
        (ch for ch in course.chapters() if path.name.startswith(f"{ch.number}_")), None)
    if chapter is None:
        raise ValueError(f"{path.name} calls no for_lab(\"NN\") and its name starts with no chapter's number: "
                         "is it a lab notebook?")
    return chapter


def _verdict(ex: course.Exercise, recorded: dict) -> str:
    if recorded["passed"]:
        return PARTIAL if recorded.get("partial") else PASS
    if recorded["detail"].startswith("restart the kernel"):
        return RESTART
    # only the lab's own stub is "not attempted": a NotImplementedError from a library is a FAIL
    return NOT_ATTEMPTED if f"{ex.heading}{STUB_TAIL}" in recorded["detail"] else FAIL


def verdicts_of(nb: nbformat.NotebookNode, chapter: course.Chapter, recorded: dict[str, dict], have: int,
                status: str = "finished") -> dict[str, dict]:
    """{exercise heading: {"verdict", "detail", "hint"}}: the verdicts the checkers recorded, else what the
    checker's cell shows (an error, a deadline, a cell that needs more GPUs)."""
    graded = {}
    cells = exercise_cells(nb, chapter)
    for ex in chapter.exercises:
        name = ex.heading
        index = cells.get(ex)
        if index is None:
            graded[name] = {"verdict": ERROR, "detail": f"no cell calls check.{ex.checker}(...)", "hint":
                            "keep the lab's checker cell below your answer"}
            continue
        cell = nb.cells[index]
        if needs_gpus(cell) > have:
            needed = needs_gpus(cell)
            graded[name] = {"verdict": NEEDS_GPU, "detail": f"its checker needs {needed} GPU{'s' * (needed > 1)}; "
                            f"this machine has {have}", "hint": ""}
            continue
        mine = recorded.get(str(ex.number))
        if mine is not None and cell.get("execution_count") is not None:
            graded[name] = {"verdict": _verdict(ex, mine), "detail": mine["detail"], "hint": mine.get("hint", "")}
        elif _error(cell):
            graded[name] = {"verdict": ERROR, "detail": _error(cell), "hint": "the checker cell raised: run the "
                            "cells above it in order and read the error"}
        elif status == "timed out" and cell.get("execution_count") is None:
            graded[name] = {"verdict": TIMED_OUT, "detail": "the notebook's deadline passed before this checker ran",
                            "hint": "an earlier cell never finished: a loop, a wait or a kernel that does not end"}
        elif cell.get("execution_count") is None:
            graded[name] = {"verdict": ERROR, "detail": "the notebook stopped before this checker ran (the kernel "
                            "died?)", "hint": "run the notebook yourself: an earlier cell ends the process"}
        else:
            graded[name] = {"verdict": ERROR, "detail": "the checker cell printed no verdict", "hint": ""}
    return graded


def grade(path: Path, timeout_s: float = 900, cell_timeout_s: int = 300, have: int | None = None) -> dict:
    """Run one notebook headless in a child process and grade it: {"notebook", "seconds", "status", "exercises"}."""
    from launchlab import child

    have = gpu_count() if have is None else have
    nb = nbformat.read(path, as_version=4)
    chapter = lab_chapter(nb, path)
    for cell in nb.cells:                           # a verdict stored by an earlier run must not count
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    runnable = nbformat.from_dict(nb)
    runnable.cells = [c for c in nb.cells if c.cell_type != "code" or needs_gpus(c) <= have]
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.ipynb", Path(tmp) / "out.ipynb"
        nbformat.write(runnable, source)
        # The checkers record their verdicts in the run file of a results folder of this notebook's own.
        env = {"LAUNCHLAB_RESULTS_DIR": str(Path(tmp) / "runs"), "LAUNCHLAB_STRICT": "0"}
        run = child.run([sys.executable, "-c", _EXECUTE, str(source), str(target), str(path.resolve().parent),
                         str(cell_timeout_s)], timeout_s=timeout_s, env=env)
        executed = nbformat.read(target, as_version=4) if target.exists() else None
        run_files = sorted((Path(tmp) / "runs").glob("*.json"))
        preferred = [p for p in run_files if p.stem == gpu_slug()] or run_files
        recorded = (json.loads(preferred[0].read_text(encoding="utf-8")).get("verdicts", {}).get(chapter.number, {})
                    if preferred else {})
    status = "timed out" if run.timed_out else "finished" if run.returncode == 0 else "crashed"
    if executed is not None:
        _restore(nb, executed, have)
    exercises = verdicts_of(nb, chapter, recorded, have, status)
    if executed is None and status == "crashed":
        for entry in exercises.values():
            if entry["verdict"] != NEEDS_GPU:
                entry.update(verdict=ERROR, detail=f"the notebook could not run: {run.last_lines(2)}", hint="")
    return {"notebook": str(path), "seconds": round(run.seconds, 1), "status": status, "exercises": exercises}


def _restore(nb: nbformat.NotebookNode, executed: nbformat.NotebookNode, have: int) -> None:
    """Put the executed cells' outputs back into `nb`, whose cells for more GPUs than `have` were left out."""
    ran = iter(executed.cells)
    for cell in nb.cells:
        if cell.cell_type != "code" or needs_gpus(cell) <= have:
            done = next(ran)
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = done.get("outputs", []), done.get("execution_count")


def table(grades: list[dict]) -> str:
    """A class table: one row per notebook, one column per exercise (E1, E2, ...), then the run's status. Every
    verdict is shown whole (a column as wide as its widest), so `PASS (CPU part)` never reads as PASS."""
    names = list(dict.fromkeys(name for g in grades for name in g["exercises"]))
    short = {name: (re.match(r"Exercise\s+(\w+)", name) or [None, str(i + 1)])[1] for i, name in enumerate(names)}
    width = max([len("notebook")] + [len(g["notebook"]) for g in grades])
    cells = [[g["exercises"].get(n, {"verdict": "-"})["verdict"] for n in names] for g in grades]
    columns = [max([14, len("E" + short[n])] + [len(row[i]) for row in cells]) for i, n in enumerate(names)]
    rows = [f"{'notebook':{width}}  " + "  ".join(f"{'E' + short[n]:>{w}}" for n, w in zip(names, columns, strict=True))
            + "  run"]
    for g, row in zip(grades, cells, strict=True):
        rows.append(f"{g['notebook']:{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, columns, strict=True))
                    + f"  {g['status']}, {g['seconds']:.0f} s")
    legend = [f"E{short[n]}: {n}" for n in names]
    return "\n".join(rows + [""] + legend)


def main(argv: list[str] | None = None) -> int:
    """Command line: grade notebooks, print the table (and the FAIL details), optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path, help="learners' lab notebooks (or solutions)")
    parser.add_argument("--json", type=Path, help="write every verdict with its detail and hint here")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one notebook may run (default 900)")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds one cell may run (default 300)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        print(f"no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.json and not args.json.parent.is_dir():
        print(f"--json {args.json}: no folder {args.json.parent} to write it in", file=sys.stderr)
        return 2
    grades = []
    for path in args.notebooks:
        print(f"grading {path} ...", file=sys.stderr, flush=True)
        try:
            grades.append(grade(path, args.timeout, args.cell_timeout))
        except (OSError, ValueError, nbformat.ValidationError) as exc:   # unreadable: report it, grade the rest
            grades.append({"notebook": str(path), "seconds": 0.0,
                           "status": f"unreadable ({type(exc).__name__}: {str(exc)[:160]})",
                           "exercises": {}})
        if args.json:                                 # after every notebook, so a long class run keeps its grades
            args.json.write_text(json.dumps(grades, indent=1) + "\n", encoding="utf-8")
    print(table(grades))
    for g in grades:
        for name, entry in g["exercises"].items():
            if entry["verdict"] in (FAIL, ERROR, TIMED_OUT):
                print(f"\n{g['notebook']}, {name}: {entry['verdict']}: {entry['detail']}"
                      + (f"\n  Hint: {entry['hint']}" if entry["hint"] else ""))
            elif entry["verdict"] == PARTIAL:
                print(f"\n{g['notebook']}, {name}: {PARTIAL}, not yet a PASS: {entry['detail']}")
    if args.json:
        print(f"\nwrote {args.json}")
    ungraded = [g["notebook"] for g in grades if g["status"].startswith("unreadable")]
    if ungraded:
        print(f"\ncould not grade: {', '.join(ungraded)}", file=sys.stderr)
    return 1 if ungraded else 0


if __name__ == "__main__":
    sys.exit(main())
