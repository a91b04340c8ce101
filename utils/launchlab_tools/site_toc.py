"""The reading site's table of contents, written from the notebooks on disk so it cannot drift from them.

`python -m launchlab_tools.site_toc PATH` writes it (make site does, into _build/): each chapter's lecture and
solution as the course model lists them, then the page of every figure across GPUs when across_gpus/ holds it,
then the instructor's guide.
"""

from __future__ import annotations

import sys
from pathlib import Path

from launchlab import course
from launchlab.env import repo_root

# The page of every figure across GPUs, as launchlab_tools.figures writes it (a name here, not an import of that
# module, so the table of contents never loads matplotlib).
ACROSS_GPUS = "across_gpus"
INSTRUCTORS = "instructors"


def toc_text(root: Path | None = None) -> str:
    """A jb-book table of contents: the README as the landing page, lectures, solutions, then every figure."""
    root = root or repo_root()
    lines = ["# Written by `python -m launchlab_tools.site_toc` from the course model.", "format: jb-book",
             "root: README", "parts:"]
    for caption, which in (("Lectures", course.Chapter.lecture), ("Solutions", course.Chapter.solution)):
        files = [which(ch) for ch in course.chapters() if (root / which(ch)).exists()]
        if files:
            lines += [f"  - caption: {caption}", "    chapters:"]
            lines += [f"      - file: {rel.removesuffix('.ipynb')}" for rel in files]
    # Every figure across GPUs, when `python -m launchlab_tools.figures across_gpus` has written it (make site does).
    if (root / ACROSS_GPUS / "index.md").exists():
        lines += ["  - caption: Across GPUs", "    chapters:", f"      - file: {ACROSS_GPUS}/index"]
    # The instructor's guide, when `python -m launchlab_tools.guide instructors` has written it (make site does).
    guides = sorted(p.stem for p in (root / INSTRUCTORS).glob("[0-9][0-9].md"))
    if guides:
        lines += ["  - caption: For instructors", "    chapters:", f"      - file: {INSTRUCTORS}/index"]
        lines += [f"      - file: {INSTRUCTORS}/{stem}" for stem in guides]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write the table of contents to the path given."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m launchlab_tools.site_toc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", help="the file to write the table of contents to (_toc.yml)")
    path = Path(parser.parse_args(argv).path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toc_text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
