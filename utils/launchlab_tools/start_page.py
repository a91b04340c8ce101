"""The course's start page, START_HERE.ipynb, and the README's syllabus table, both written from the course model.

The start page sits beside the README, not in notebooks/: it is not a lecture, has nothing to run, and links to
the lecture, lab and solution of every chapter. The README's syllabus table is the block between its two
`<!-- syllabus -->` markers.

Run `python -m launchlab_tools.start_page` to regenerate both (`make labs` does), `--check` to only compare.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from launchlab import course
from launchlab.env import repo_root
from launchlab.jupyter_hooks import COURSE_KERNELSPEC, COURSE_LANGUAGE_INFO
from launchlab.report import load_all
from launchlab.results import short_gpu

from .notebooks import regenerate_main, source_sha256

START_PAGE = "START_HERE.ipynb"
README = "README.md"
SYLLABUS_MARK = "<!-- syllabus -->"


def _runs(root: Path, ch: course.Chapter) -> str:
    """'H100 14 + 15 s; H200 10 + 12 s': the lecture's and the solution's run time in every report holding them."""
    parts = []
    for report in load_all(root, this_gpu_first=False):
        times, stale = [], False
        for rel in (ch.lecture(), ch.solution()):
            entry = report.notebook(rel)
            if entry is None or not (root / rel).exists():
                continue
            times.append(f"{entry['seconds']:.0f}")
            stale |= not report.is_current(rel, source_sha256(root / rel))
        if times:
            parts.append(f"{short_gpu(report.gpu)} {' + '.join(times)} s" + (" (older code)" if stale else ""))
    return "; ".join(parts) or "not run yet"


def _hours(minutes: int) -> str:
    return f"{minutes / 60:.1f} h".replace(".0 h", " h")


def index_cells(root: Path) -> list[str]:
    """The markdown of the start page: how to work, then one row per chapter."""
    rows = ["| # | chapter | what you measure | needs | study time | GPU run time (lecture + solution) "
            "| lecture | lab | solution |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    total = 0
    for ch in course.chapters():
        total += ch.minutes
        if not (root / ch.lecture()).exists():
            rows.append(f"| {ch.number} | {ch.title} | {ch.measures} | {ch.needs.text} | {_hours(ch.minutes)} | "
                        "not in this checkout yet | | | |")
            continue
        links = [f"[open]({rel})" if (root / rel).exists() else "-" for rel in ch.notebook_paths()]
        rows.append(f"| {ch.number} | {ch.title} | {ch.measures} | {ch.needs.text} | {_hours(ch.minutes)} | "
                    f"{_runs(root, ch)} | " + " | ".join(links) + " |")
    intro = """# LaunchLab: where the time goes between "launch this kernel" and "the GPU did it"

Start here. Each chapter is a **lecture** (read it, run it: every figure is measured on your GPU and shown
beside the course's reference run), a **lab** (exercises, each ending in a checker that measures its own
reference on your machine) and its **solution**. Work through them in order; each builds on the last.

- Run a lecture top to bottom first (Run > Run All Cells). Cells tagged `gpu` need a CUDA GPU: without
  one, each shows its output from the course's reference run instead, under a line naming that GPU, and Run
  All goes on.
- In a lab, replace each `raise NotImplementedError(...)` line with your code, run the cell, then run the
  checker cell below it: it prints `PASS` or `FAIL` with a hint."""
    syllabus = (f"## Syllabus\n\nStudy time: about {_hours(total)} in all, for a first reading with every lab "
                "done. The GPU run time column gives, for each GPU the course has a reference run on "
                "(`reports/gpu/`), how many seconds the lecture and the solution took to run there; "
                "\"(older code)\" marks a run of an earlier version of the notebook.\n\n" + "\n".join(rows))
    after = """## When something disagrees

A `CLAIM DID NOT HOLD` line means your GPU measured something the course did not expect: compare your
figures with the reference column the notebook prints, and note your GPU, driver and what else was running.
`make test` runs the course's own tests; `make reference` re-runs every notebook and writes a report for
your GPU into `reports/gpu/`."""
    return [intro, syllabus, after]


def gpu_tier_cost(root: Path) -> str:
    """What the GPU tier's reference run took on each GPU with a report: the start page's run times, added up."""
    parts = []
    for report in load_all(root, this_gpu_first=False):
        seconds = [entry["seconds"] for ch in course.chapters() for rel in (ch.lecture(), ch.solution())
                   if (root / rel).exists() and (entry := report.notebook(rel)) is not None]
        if seconds:
            parts.append(f"{sum(seconds) / 60:.1f} min on {short_gpu(report.gpu)} ({len(seconds)} notebooks)")
    if not parts:
        return "The GPU tier (`make test-gpu`) has no reference run in `reports/gpu/` yet."
    return ("The GPU tier (`make test-gpu`) runs every lecture and solution once, then the GPU tests and the labs; "
            f"its notebooks took {'; '.join(parts)} of GPU time in the reference runs (the start page's GPU run "
            "times, added up from `reports/gpu/`). Without a GPU, the CPU tier (`make test`) is all you run.")


def readme_syllabus(root: Path | None = None) -> str:
    """The README's syllabus table (a row per chapter, what you leave able to do, the study time), the total and
    what the GPU tier costs."""
    root = root or repo_root()
    rows = ["| # | chapter | you leave able to | study time |", "| --- | --- | --- | --- |"]
    rows += [f"| {ch.number} | {ch.title} | {ch.leaves_able_to} | {_hours(ch.minutes)} |" for ch in course.chapters()]
    total = sum(ch.minutes for ch in course.chapters())
    return ("\n".join(rows) + f"\n\nAbout {_hours(total)} in all, for a first reading with every lab done.\n\n"
            + gpu_tier_cost(root))


def readme_text(root: Path) -> str:
    """The README with its syllabus block rewritten from the model."""
    text = (root / README).read_text(encoding="utf-8")
    pattern = re.compile(re.escape(SYLLABUS_MARK) + r".*?" + re.escape(SYLLABUS_MARK), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{README} has no block between two {SYLLABUS_MARK} lines for the syllabus table")
    return pattern.sub(lambda _: f"{SYLLABUS_MARK}\n{readme_syllabus(root)}\n{SYLLABUS_MARK}", text, count=1)


def index_notebook(root: Path | None = None) -> nbformat.NotebookNode:
    """The start page as a notebook of markdown cells only (nothing to run, so nothing can fail)."""
    root = root or repo_root()
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(COURSE_KERNELSPEC), "language_info": dict(COURSE_LANGUAGE_INFO)}
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in index_cells(root)]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"index-{i}"
    return nb


def generate(root: Path | None = None, check: bool = False) -> list[str]:
    """Write START_HERE.ipynb and the README's syllabus (or, with check, only compare); the files that differed."""
    root = root or repo_root()
    differ = []
    for name, text in ((START_PAGE, nbformat.writes(index_notebook(root), version=4) + "\n"),
                       (README, readme_text(root))):
        path = root / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            differ.append(name)
            if not check:
                path.write_text(text, encoding="utf-8")
    return differ


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate the start page and the README syllabus, or with --check only compare."""
    return regenerate_main(argv, __doc__, generate, (ValueError,), "the start page and the README syllabus")


if __name__ == "__main__":
    sys.exit(main())
