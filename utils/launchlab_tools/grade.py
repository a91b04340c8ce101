"""Grade learners' lab notebooks: run each one headless and report a verdict per exercise.

    python -m launchlab.grade labs/09_past_graphs.ipynb                 # one learner's lab
    python -m launchlab.grade class/*/04_*.ipynb --json grades.json     # a class table, and every detail as JSON

Each notebook runs in a child process with a deadline (a kernel that never ends, or a cell that waits forever,
is reported, not fatal); cells tagged for more GPUs than this machine has are left out. A verdict is PASS or
FAIL as the exercise's checker printed it (with its detail and hint), `not attempted` when the checker met the
lab's stub, `error` when the checker cell raised or never printed a verdict, `needs a GPU` when its cell could
not run here, and `timed out` when the notebook's deadline passed first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import nbformat

from launchlab.checking import FAIL_MARK, PASS_MARK
from launchlab.env import gpu_count
from .notebooks import needs_gpus

PASS, FAIL, NOT_ATTEMPTED, ERROR, NEEDS_GPU, TIMED_OUT = (
    "PASS", "FAIL", "not attempted", "error", "needs a GPU", "timed out")
EXERCISE = re.compile(r"^#+\s*(Exercise\b.*?)\s*$", re.MULTILINE)
VERDICT_LINE = re.compile(rf"^({PASS_MARK}|{FAIL_MARK}) \[(Exercise[^\]]*)\] ?(.*)$", re.MULTILINE)
HINT_LINE = re.compile(r"^\s*Hint: (.*)$", re.MULTILINE)
CHECKER_CALL = re.compile(r"\bcheck\.check_\w+\(")   # a checker called, not named in a comment
STUB = ": replace this line with your code"   # what a lab's stub raises (launchlab.labs), after the exercise

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


def exercise_cells(nb: nbformat.NotebookNode) -> dict[str, int]:
    """{exercise name: index of its checker cell}, the exercise named by the last heading above the cell."""
    current, found = None, {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            headings = EXERCISE.findall(cell.source)
            current = headings[-1] if headings else current
        elif current and current not in found and CHECKER_CALL.search(re.sub(r"#.*", "", cell.source)):
            found[current] = index
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


def verdicts_of(nb: nbformat.NotebookNode, have: int, status: str = "finished") -> dict[str, dict]:
    """{exercise: {"verdict", "detail", "hint"}} read from an executed notebook's outputs."""
    graded = {}
    for name, index in exercise_cells(nb).items():
        cell = nb.cells[index]
        if needs_gpus(cell) > have:
            needed = needs_gpus(cell)
            graded[name] = {"verdict": NEEDS_GPU, "detail": f"its checker needs {needed} GPU{'s' * (needed > 1)}; "
                            f"this machine has {have}", "hint": ""}
            continue
        text = _text(cell)
        mine = [m for m in VERDICT_LINE.finditer(text) if m.group(2) == name]
        if mine:
            mark, detail = mine[-1].group(1), mine[-1].group(3)
            hint = HINT_LINE.search(text[mine[-1].end():])
            # only the lab's own stub is "not attempted": a NotImplementedError from a library is a FAIL
            verdict = PASS if mark == PASS_MARK else NOT_ATTEMPTED if f"{name}{STUB}" in detail else FAIL
            graded[name] = {"verdict": verdict, "detail": detail, "hint": hint.group(1) if hint else ""}
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
    for cell in nb.cells:                           # a verdict stored by an earlier run must not count
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    runnable = nbformat.from_dict(nb)
    runnable.cells = [c for c in nb.cells if c.cell_type != "code" or needs_gpus(c) <= have]
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.ipynb", Path(tmp) / "out.ipynb"
        nbformat.write(runnable, source)
        run = child.run([sys.executable, "-c", _EXECUTE, str(source), str(target), str(path.resolve().parent),
                         str(cell_timeout_s)], timeout_s=timeout_s)
        executed = nbformat.read(target, as_version=4) if target.exists() else None
    status = "timed out" if run.timed_out else "finished" if run.returncode == 0 else "crashed"
    if executed is not None:
        _restore(nb, executed, have)
    exercises = verdicts_of(nb, have, status)
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
    """A class table: one row per notebook, one column per exercise (E1, E2, ...), then the run's status."""
    names = list(dict.fromkeys(name for g in grades for name in g["exercises"]))
    short = {name: (re.match(r"Exercise\s+(\w+)", name) or [None, str(i + 1)])[1] for i, name in enumerate(names)}
    width = max([len("notebook")] + [len(g["notebook"]) for g in grades])
    rows = [f"{'notebook':{width}}  " + "  ".join(f"{'E' + short[n]:>14}" for n in names) + "  run"]
    for g in grades:
        cells = [g["exercises"].get(n, {"verdict": "-"})["verdict"] for n in names]
        rows.append(f"{g['notebook']:{width}}  " + "  ".join(f"{c:>14}" for c in cells)
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
            grades.append({"notebook": str(path), "seconds": 0.0, "status": f"unreadable ({type(exc).__name__})",
                           "exercises": {}})
        if args.json:                                 # after every notebook, so a long class run keeps its grades
            args.json.write_text(json.dumps(grades, indent=1) + "\n", encoding="utf-8")
    print(table(grades))
    for g in grades:
        for name, entry in g["exercises"].items():
            if entry["verdict"] in (FAIL, ERROR, TIMED_OUT):
                print(f"\n{g['notebook']}, {name}: {entry['verdict']}: {entry['detail']}"
                      + (f"\n  Hint: {entry['hint']}" if entry["hint"] else ""))
    if args.json:
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
