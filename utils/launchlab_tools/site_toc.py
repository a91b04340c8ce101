"""The reading site's table of contents, written from the notebooks on disk so it cannot drift from them.

`python -m launchlab.site_toc PATH` writes it (make site does, into _build/); lectures, solutions, then the
page of every figure across GPUs when across_gpus/ holds it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from launchlab.env import repo_root
from .notebooks import course_notebooks

# The page of every figure across GPUs, as launchlab.figures writes it (a name here, not an import of that
# module, so the table of contents never loads matplotlib).
ACROSS_GPUS = "across_gpus"
INSTRUCTORS = "instructors"


def toc_text(root: Path | None = None) -> str:
    """A jb-book table of contents: the README as the landing page, lectures, solutions, then every figure."""
    root = root or repo_root()
    lines = ["# Written by `python -m launchlab.site_toc` from the notebooks on disk.", "format: jb-book",
             "root: README", "parts:"]
    for folder, caption in (("notebooks", "Lectures"), ("solutions", "Solutions")):
        files = course_notebooks(root, dirs=(folder,))
        if files:
            lines += [f"  - caption: {caption}", "    chapters:"]
            lines += [f"      - file: {folder}/{p.stem}" for p in files]
    # Every figure across GPUs, when `python -m launchlab.figures across_gpus` has written it (make site does).
    if (root / ACROSS_GPUS / "index.md").exists():
        lines += ["  - caption: Across GPUs", "    chapters:", f"      - file: {ACROSS_GPUS}/index"]
    # The instructor's guide, when `python -m launchlab.guide instructors` has written it (make site does).
    guides = sorted(p.stem for p in (root / INSTRUCTORS).glob("[0-9][0-9].md"))
    if guides:
        lines += ["  - caption: For instructors", "    chapters:", f"      - file: {INSTRUCTORS}/index"]
        lines += [f"      - file: {INSTRUCTORS}/{stem}" for stem in guides]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write the table of contents to the path given."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launchlab.site_toc PATH", file=sys.stderr)
        return 2
    path = Path(args[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toc_text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
