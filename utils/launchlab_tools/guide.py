"""The instructor's guide: one page per chapter, from its guide.yml plus what must never be typed by hand.

    python -m launchlab_tools.guide instructors     # writes instructors/NN.md (make site does, into the site)

A chapter's `launchlab/chapters/chNN/guide.yml` (schema in CONTRIBUTING.md) holds what an instructor writes:
goals, a 50-minute plan, the live demos, what to say when a claim does not hold, discussion questions. The page
adds, from the course model, each exercise's title and the mistakes its mutation suite plants, and the figures
each demo should show on every GPU with a reference run (reports/gpu/, through launchlab_tools.figures).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from launchlab import course
from launchlab.env import repo_root

from . import figures

PLAN_MINUTES = 50
KIND_WORDS = {"classic": "the classic mistake", "unit": "a unit slip", "method": "a method slip",
              "hard-coded": "a typed-in answer", "bad value": "a bad value", "structure": "a structural shortcut"}


def guide_file(chapter: course.Chapter) -> Path:
    """The chapter's guide.yml, beside its chapter.toml."""
    import importlib

    return Path(importlib.import_module(f"launchlab.chapters.ch{chapter.number}").__file__).parent / "guide.yml"


def load(path: Path) -> dict:
    """A chapter's guide file, checked against the schema; ValueError naming the file and the problem."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [k for k in ("goals", "plan", "demos", "when_a_claim_fails", "questions") if not data.get(k)]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)} (see CONTRIBUTING.md, the instructor's guide)")
    counts = {"goals": (3, 4), "demos": (2, 3), "questions": (3, 3)}
    for key, (low, high) in counts.items():
        if not isinstance(data[key], list) or not low <= len(data[key]) <= high:
            raise ValueError(f"{path}: {key} should be a list of {low}" + (f" to {high}" if high > low else "")
                             + " entries")
    bad_demo = next((d for d in data["demos"] if not (isinstance(d, dict) and d.get("title") and d.get("cell")
                                                      and d.get("say"))), None)
    if bad_demo is not None:
        raise ValueError(f"{path}: every demo needs a title, a cell and what to say; got {bad_demo!r:.80}")
    if not all(isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) for row in data["plan"]):
        raise ValueError(f"{path}: every plan row is [minutes, \"what happens\"]")
    minutes = sum(int(m) for m, _ in data["plan"])
    if minutes != PLAN_MINUTES:
        raise ValueError(f"{path}: the plan takes {minutes} minutes, not {PLAN_MINUTES}")
    return data


def cell_numbers(nb: nbformat.NotebookNode) -> dict[str, int]:
    """Each cell's id -> the number JupyterLab's status bar shows for it ("Cell 24/38"): its place, from 1."""
    return {c.get("id"): i for i, c in enumerate(nb.cells, 1)}


def section_of(nb: nbformat.NotebookNode, cell_id: str) -> str:
    """The heading of the section a cell sits in (the last markdown heading above it), without its #s."""
    heading = ""
    for c in nb.cells:
        if c.cell_type == "markdown":
            found = [line.lstrip("#").strip() for line in c.source.splitlines() if line.startswith("#")]
            heading = found[-1] if found else heading
        if c.get("id") == cell_id:
            return heading
    return heading


def as_seen(text: str, numbers: dict[str, int]) -> str:
    """`text` with every cell id (c23) written as the cell number JupyterLab shows, lists and ranges joined."""
    ids = "|".join(re.escape(i) for i in sorted((i for i in numbers if i), key=len, reverse=True))
    if not ids:
        return text
    text = re.sub(rf"\b({ids})\b", lambda m: f"cell {numbers[m[1]]}", text)
    text = re.sub(r"cell (\d+)-cell (\d+)", r"cells \1-\2", text)
    # "cell 2, cell 4 and cell 6" -> "cells 2, 4 and 6"; also "to" and "or"
    return re.sub(r"cell (\d+)((?:, cell \d+)*) (and|to|or) cell (\d+)",
                  lambda m: f"cells {m[1]}{m[2].replace('cell ', '')} {m[3]} {m[4]}", text)


def page(root: Path, number: str, data: dict, cols: list[figures.Column]) -> str:
    """The markdown of one chapter's guide."""
    chapter = course.chapter(number)
    title = chapter.title
    path = root / chapter.lecture()
    if not path.exists():
        raise ValueError(f"no lecture {chapter.lecture()} for chapter {number}'s guide")
    nb = nbformat.read(path, as_version=4)
    ids = {c.get("id"): c for c in nb.cells}
    numbers = cell_numbers(nb)
    metrics = {f.name for f in chapter.figures}
    lines = [f"# {number} · {title}: instructor's guide", "",
             f"For the lecture `{path.relative_to(root).as_posix()}` and its lab. Figures below come from the "
             "course's reference runs (`reports/gpu/`); mistakes from the lab's mutation suite. Cells are "
             "numbered as JupyterLab's status bar numbers them (\"Cell 24/38\"), markdown cells included.", "",
             "## Learning goals", ""]
    lines += [f"- {as_seen(g, numbers)}" for g in data["goals"]]
    lines += ["", f"## A {PLAN_MINUTES}-minute session", "", "| from | minutes | what |", "| ---: | ---: | --- |"]
    start = 0
    for minutes, what in data["plan"]:
        lines.append(f"| {start} | {minutes} | {as_seen(what, numbers)} |")
        start += int(minutes)
    lines += ["", "## Live demos", ""]
    for demo in data["demos"]:
        cell = ids.get(demo["cell"])
        if cell is None or cell.cell_type != "code":
            raise ValueError(f"chapter {number}'s guide.yml: demo {demo['title']!r} names cell {demo['cell']!r}, which is no "
                             f"code cell of {path.name}")
        unknown = [f for f in demo.get("figures", []) if f not in metrics]
        if unknown:
            raise ValueError(f"chapter {number}'s guide.yml: demo {demo['title']!r} names {', '.join(unknown)}, "
                             "which the chapter does not declare")
        first_line = cell.source.strip().splitlines()[0][:80]
        lines += [f"### {demo['title']}", "", f"Run cell {numbers[demo['cell']]} (in \"{section_of(nb, demo['cell'])}\"; "
                  f"it starts `{first_line}`). {as_seen(demo['say'], numbers)}", ""]
        if demo.get("figures"):
            lines += ["What to expect, from the reference runs:", "", figures.table(demo["figures"], cols), ""]
            if any(f.host_bound for name in demo["figures"] for f in [course.figure(name)[1]]):
                lines += ["Figures set by the host CPU move with the classroom's machine as much as its GPU; the "
                          "reference hosts: " + "; ".join(f"{c.label}: {c.host or 'not recorded'}" for c in cols)
                          + ".", ""]
    lines += ["## When a claim does not hold on your GPU", "", as_seen(data["when_a_claim_fails"].strip(), numbers), "",
              "## Mistakes learners make", ""]
    for ex in chapter.exercises:
        where = {"gpu": "judged on a GPU", "cpu": "judged on a CPU too",
                 "cpu-partial": "partly judged on a CPU, the rest on a GPU"}[ex.runs_on]
        lines += [f"**{ex.heading}** (`{ex.answer}`, {where}): the checker catches", ""]
        lines += [f"- {m.what} ({KIND_WORDS.get(m.kind, m.kind)}"
                  + ("; found by someone who had not read the checker" if m.found_by != "author" else "") + ")"
                  for m in ex.mistakes]
        if not ex.mistakes:
            raise ValueError(f"chapter {number} exercise {ex.number} declares no mistakes: every exercise has a "
                             "mutation suite")
        lines.append("")
    lines += ["## Discussion questions", ""]
    lines += [f"{i}. {as_seen(q, numbers)}" for i, q in enumerate(data["questions"], 1)]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Every chapter's guide page into out_dir, with an index; the pages written."""
    root = root or repo_root()
    cols = figures.columns(root, [])           # the reference runs only: a guide quotes no learner's run
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("[0-9][0-9].md"):   # a guide removed from guides/ must not keep its page
        stale.unlink()
    written = []
    for chapter in course.chapters():
        if not (root / chapter.lecture()).exists():   # a chapter not in this checkout has no page
            continue
        target = out_dir / f"{chapter.number}.md"
        target.write_text(page(root, chapter.number, load(guide_file(chapter)), cols), encoding="utf-8")
        written.append(target)
    index = ["# For instructors", "",
             "A guide per chapter: goals, a 50-minute plan, the live demos with the figures to expect on each GPU "
             "the course has reference runs for, what to say when a claim does not hold, the mistakes learners "
             "make in each exercise, and questions for discussion. Grading a class: `make grade` (README). Slides: "
             "`make slides`.", ""]
    index += [f"- [{p.stem}]({p.name})" for p in written]
    (out_dir / "index.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: python -m launchlab_tools.guide OUT_DIR."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m launchlab_tools.guide", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write one page per chapter into")
    args = parser.parse_args(argv)
    try:
        pages = write(Path(args.out_dir))
    except ValueError as exc:
        print(f"guide: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(pages)} chapter guides into {args.out_dir}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
