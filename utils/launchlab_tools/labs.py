"""Lab generation: each lab in labs/ is its solution in solutions/ with the solution blocks stubbed out.

Run `python -m launchlab_tools.labs` to regenerate labs/ from solutions/, `--check` to only compare. The checkers the
exercises end with live in `launchlab.checking` (the framework) and `launchlab/chapters/chNN/checkers.py`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from launchlab import course
from launchlab.env import repo_root

from .notebooks import regenerate_main

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
# Where an exercise starts in a solution: its heading. Its number is read here; its title is the model's.
_EXERCISE_HEADING = re.compile(r"^#+\s*Exercise\s+(\d+)\b(.*?)\s*$", re.MULTILINE)


class LabError(ValueError):
    """A solution notebook cannot be turned into a lab."""


STUB_TAIL = ": replace this line with your code"   # what follows the exercise's heading in a stub's message


def stub_line(indent: str, exercise: str) -> str:
    """The line that replaces a solution block: keeps the indentation, names the exercise."""
    return f'{indent}raise NotImplementedError("{exercise}{STUB_TAIL}")'


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


def _heading(chapter: course.Chapter | None, number: str, rest: str, where: str) -> str:
    """The exercise's heading as the model declares it; LabError when the solution's heading disagrees."""
    if chapter is None:  # a notebook of no chapter (a test's): its heading as written
        return f"Exercise {number}{rest}"
    try:
        ex = chapter.exercise(int(number))
    except course.ModelError as exc:
        raise LabError(f"{where}: {exc}") from exc
    if rest.lstrip(": ").strip() != ex.title:
        raise LabError(f"{where}: the heading says 'Exercise {number}{rest}' but chapter {chapter.number} declares "
                       f"'{ex.heading}' (launchlab/chapters/ch{chapter.number}/chapter.toml); make them agree")
    return ex.heading


def make_lab(solution: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The lab for a solution notebook: solution blocks stubbed, outputs and execution counts cleared."""
    lab = nbformat.from_dict(solution)
    chapter = course.chapter_of_path(name)
    exercise = None
    for index, cell in enumerate(lab.cells):
        if cell.cell_type == "markdown":
            headings = _EXERCISE_HEADING.findall(cell.source)
            if headings:
                exercise = _heading(chapter, *headings[-1], f"{name}, cell {index}")
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
    if chapter is not None:
        found = sorted({int(n) for c in lab.cells if c.cell_type == "markdown" for n, _ in
                        _EXERCISE_HEADING.findall(c.source)})
        declared = [ex.number for ex in chapter.exercises]
        if found != declared:
            raise LabError(f"{name}: its exercise headings are {found}, but chapter {chapter.number} declares "
                           f"exercises {declared} (launchlab/chapters/ch{chapter.number}/chapter.toml)")
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


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate the labs, or with --check only compare."""
    return regenerate_main(argv, __doc__, generate, (LabError,), "the labs")


if __name__ == "__main__":
    sys.exit(main())
