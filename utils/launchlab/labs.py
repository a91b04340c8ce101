"""Labs from solutions, and the checker framework every exercise ends with.

Run `python -m launchlab.labs` to regenerate labs/ from solutions/, `--check` to only compare.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .claims import strict
from .env import repo_root

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_EXERCISE_HEADING = re.compile(r"^#+\s*(Exercise\b.*?)\s*$", re.MULTILINE)


class LabError(ValueError):
    """A solution notebook cannot be turned into a lab."""


def stub_line(indent: str, exercise: str) -> str:
    """The line that replaces a solution block: keeps the indentation, names the exercise."""
    return f'{indent}raise NotImplementedError("{exercise}: replace this line with your code")'


def strip_solutions(source: str, exercise: str, where: str) -> str:
    """Replace each BEGIN/END SOLUTION block in one cell's source by a stub naming the exercise."""
    out: list[str] = []
    inside = False
    begin_line = 0
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise LabError(f"{where}, line {number}: '{BEGIN}' inside another solution block; "
                               f"close the first with '{END}'")
            inside, begin_line = True, number
            out.append(stub_line(line[: len(line) - len(line.lstrip())], exercise))
        elif marker == END:
            if not inside:
                raise LabError(f"{where}, line {number}: '{END}' without a '{BEGIN}' above it")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise LabError(f"{where}, line {begin_line}: '{BEGIN}' has no '{END}'; add it where the solution ends")
    return "\n".join(out)


def make_lab(solution: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The lab for a solution notebook: solution blocks stubbed, outputs and execution counts cleared."""
    lab = nbformat.from_dict(solution)
    exercise = None
    for index, cell in enumerate(lab.cells):
        if cell.cell_type == "markdown":
            headings = _EXERCISE_HEADING.findall(cell.source)
            if headings:
                exercise = headings[-1]
            continue
        if cell.cell_type != "code":
            continue
        if BEGIN in cell.source or END in cell.source:
            where = f"{name}, cell {index}"
            if exercise is None:
                raise LabError(f"{where}: a solution block with no '## Exercise ...' markdown heading above it; "
                               "add one so the stub can name the exercise")
            cell.source = strip_solutions(cell.source, exercise, where)
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    return lab


def lab_text(solution_path: Path) -> str:
    """The exact text of the lab generated from a solution notebook."""
    solution = nbformat.read(solution_path, as_version=4)
    return nbformat.writes(make_lab(solution, solution_path.as_posix()), version=4) + "\n"


def generate(root: Path | None = None, check: bool = False) -> list[str]:
    """Write labs/ from solutions/ (or, with check, list the labs that differ); return the paths concerned."""
    root = root or repo_root()
    concerned = []
    for solution_path in sorted((root / "solutions").glob("*.ipynb")):
        lab_path = root / "labs" / solution_path.name
        text = lab_text(solution_path)
        current = lab_path.read_text(encoding="utf-8") if lab_path.exists() else None
        if current != text:
            concerned.append(lab_path.relative_to(root).as_posix())
            if not check:
                lab_path.parent.mkdir(parents=True, exist_ok=True)
                lab_path.write_text(text, encoding="utf-8")
    stale = {p.name for p in (root / "labs").glob("*.ipynb")} - {p.name for p in (root / "solutions").glob("*.ipynb")}
    concerned += [f"labs/{n} (no solution)" for n in sorted(stale)]
    return concerned


# ---- the checker framework -------------------------------------------------------------------------------

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"


class CheckFailed(AssertionError):
    """Raised by a checker's body to fail with a message; raised to the caller under LAUNCHLAB_STRICT=1."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one checker call."""

    exercise: str
    passed: bool
    detail: str

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """Already printed by the checker; show nothing more in a notebook."""


def exercise(name: str, hint: str) -> Callable[[Callable[..., str]], Callable[..., Verdict]]:
    """Make a checker: its body returns a detail string on success or raises CheckFailed(detail).

    The wrapped checker prints PASS or FAIL with the hint, never a traceback: a stub
    (NotImplementedError) or any error in the learner's code is a FAIL that says what happened.
    """

    def wrap(body: Callable[..., str]) -> Callable[..., Verdict]:
        @functools.wraps(body)
        def checker(*args, **kwargs) -> Verdict:
            try:
                verdict = Verdict(name, True, body(*args, **kwargs) or "")
            except NotImplementedError as exc:
                verdict = Verdict(name, False, f"not implemented yet ({exc})")
            except CheckFailed as exc:
                verdict = Verdict(name, False, str(exc))
            except Exception as exc:  # the learner's code failed: say what, without a traceback
                verdict = Verdict(name, False, f"your code raised {type(exc).__name__}: {exc}")
            if verdict.passed:
                print(f"{PASS_MARK} [{name}] {verdict.detail}")
            else:
                print(f"{FAIL_MARK} [{name}] {verdict.detail}\n  Hint: {hint}")
                if strict():
                    raise CheckFailed(f"{name}: {verdict.detail}")
            return verdict

        checker.exercise_name = name
        return checker

    return wrap


def require_cuda(what: str) -> None:
    """Fail the check with a clear message when this machine has no CUDA GPU for `what`."""
    import torch

    if not torch.cuda.is_available():
        raise CheckFailed(f"{what} needs a CUDA GPU; run this cell on a machine with one")


def graph_and_output(captured: object) -> tuple:
    """Unpack a learner's (torch.cuda.CUDAGraph, output tensor) answer, or fail saying what was expected."""
    import torch

    if not (isinstance(captured, tuple) and len(captured) == 2 and isinstance(captured[0], torch.cuda.CUDAGraph)):
        raise CheckFailed("return (graph, out): the torch.cuda.CUDAGraph and the output tensor that replays write, "
                          f"not {type(captured).__name__}")
    return captured


@contextlib.contextmanager
def counting_graph_calls() -> Iterator[dict[str, int]]:
    """Count CUDAGraph captures and replays made inside the block."""
    import torch

    counts = {"captures": 0, "replays": 0}
    begin, replay = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay

    def counting_begin(self, *args, **kwargs):
        counts["captures"] += 1
        return begin(self, *args, **kwargs)

    def counting_replay(self, *args, **kwargs):
        counts["replays"] += 1
        return replay(self, *args, **kwargs)

    torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay = counting_begin, counting_replay
    try:
        yield counts
    finally:
        torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay = begin, replay


def within(measured: float, expected: float, tolerance: float, what: str) -> str:
    """A detail line if measured is within tolerance (a fraction) of expected, else raise CheckFailed."""
    error = abs(measured - expected) / expected
    line = f"{what}: yours {measured:.4g}, expected {expected:.4g} ({error:.1%} off, {tolerance:.0%} allowed)"
    if error > tolerance:
        raise CheckFailed(line)
    return line


def within_factor(yours: float, expected: float, factor: float, what: str) -> str:
    """A detail line if yours is within `factor` times expected either way, else raise CheckFailed."""
    ratio = yours / expected
    line = f"{what}: yours {yours:,.4g}, the checker's {expected:,.4g} (ratio {ratio:.2f}, {1 / factor:g} to {factor:g} allowed)"
    if not 1 / factor <= ratio <= factor:
        raise CheckFailed(line)
    return line


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate labs/ (default) or check that they are current."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report labs that differ from solutions/")
    args = parser.parse_args(argv)
    try:
        concerned = generate(check=args.check)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check and concerned:
        print("labs out of date (run `make labs`): " + ", ".join(concerned), file=sys.stderr)
        return 1
    print(("regenerated: " + ", ".join(concerned)) if concerned else "labs are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
