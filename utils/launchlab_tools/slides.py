"""Lectures as slides: slide metadata in every lecture notebook, and a static reveal.js deck per chapter.

    python -m launchlab_tools.slides --write       # give every lecture its slide metadata (make slides does)
    python -m launchlab_tools.slides --check       # fail if a lecture's slide metadata is missing or stale
    python -m launchlab_tools.slides --build DIR   # one deck per lecture, from the stored outputs: DIR/<name>.slides.html
    python -m launchlab_tools.slides --build DIR --reveal DIR/offline     # ...with reveal.js beside them, for offline use

The same metadata drives the live deck in JupyterLab (RISE: `make lab` installs jupyterlab-rise; open a lecture
and press Alt+R) and the static one (nbconvert's reveal.js exporter, which runs nothing). The rule, so that
nobody edits slide types by hand: the title and every `##` section start a slide, every `###` heading a
sub-slide, and the paragraph that reads a measurement (markdown right after a code cell) a sub-slide of its
own; everything else continues the slide above it, which scrolls when it is long.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat

from launchlab.env import repo_root

from .notebooks import course_notebooks

SCROLLING = {"scroll": True, "autolaunch": False}  # RISE's notebook settings: long slides scroll
REVEAL_VERSION = "4.0.2"  # the reveal.js nbconvert's slides template is written for (its default CDN prefix)


def slide_type(cell, previous) -> str:
    """The reveal.js slide type the rule gives a cell, knowing the cell before it (None for the first)."""
    if previous is None:
        return "slide"
    if cell.cell_type == "markdown":
        first = cell.source.lstrip().split("\n", 1)[0]
        if first.startswith("## "):
            return "slide"
        if first.startswith("### "):
            return "subslide"
        if previous.cell_type == "code":
            return "subslide"
    return "-"


def with_slides(nb: nbformat.NotebookNode) -> bool:
    """Give every cell its slide type and the notebook RISE's settings; True if anything changed."""
    changed = nb.metadata.get("rise") != SCROLLING
    nb.metadata["rise"] = dict(SCROLLING)
    previous = None
    for cell in nb.cells:
        wanted = slide_type(cell, previous)
        if cell.metadata.get("slideshow", {}).get("slide_type") != wanted:
            cell.metadata["slideshow"] = {"slide_type": wanted}
            changed = True
        previous = cell
    return changed


def lectures(root: Path | None = None) -> list[Path]:
    """The lecture notebooks, in chapter order."""
    return course_notebooks(root or repo_root(), dirs=("notebooks",))


def write(root: Path | None = None) -> list[Path]:
    """Apply the rule to every lecture (metadata only: sources and outputs stay); the notebooks it changed."""
    changed = []
    for path in lectures(root):
        nb = nbformat.read(path, as_version=4)
        if with_slides(nb):
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def stale(root: Path | None = None) -> list[Path]:
    """The lectures whose slide metadata does not follow the rule."""
    return [p for p in lectures(root) if with_slides(nbformat.read(p, as_version=4))]


# What nbconvert's slides template loads from CDNs, fetched from the npm registry instead: package, and where
# its file lies in the package. reveal.js is the version the template is written for; the template also loads
# require.js (reveal.js starts from it) and jQuery (scrolling slides).
OFFLINE = {"reveal.js": (f"reveal.js@{REVEAL_VERSION}", ""), "require.js": ("requirejs@2.1.10", "require.js"),
           "jquery.min.js": ("jquery@2.1.0", "dist/jquery.min.js")}


def _npm_unpack(spec: str, timeout_s: float) -> tuple[tempfile.TemporaryDirectory, Path]:
    """`npm pack spec`, unpacked: (the temporary folder to clean up, the package's folder in it)."""
    tmp = tempfile.TemporaryDirectory()
    done = subprocess.run(["npm", "pack", spec, "--silent"], cwd=tmp.name, timeout=timeout_s, capture_output=True,
                          text=True)
    packed = sorted(Path(tmp.name).glob("*.tgz"))
    if done.returncode != 0 or not packed:
        tmp.cleanup()
        raise RuntimeError(f"npm pack {spec} failed: {(done.stderr or done.stdout)[-300:]}")
    with tarfile.open(packed[0]) as archive:
        archive.extractall(tmp.name, filter="data")
    return tmp, Path(tmp.name) / "package"


def fetch_reveal(target: Path, timeout_s: float = 120) -> Path:
    """reveal.js, require.js and jQuery in `target` (from the npm registry, once), so decks work offline."""
    if all((target / name).exists() for name in OFFLINE):
        return target
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not on the PATH: install Node.js to fetch reveal.js, or build without --reveal "
                           "(the decks then load reveal.js from its CDN)")
    target.mkdir(parents=True, exist_ok=True)
    for name, (spec, inner) in OFFLINE.items():
        tmp, package = _npm_unpack(spec, timeout_s)
        try:
            if inner:
                shutil.copyfile(package / inner, target / name)
            else:
                shutil.rmtree(target / name, ignore_errors=True)
                shutil.copytree(package, target / name)
        finally:
            tmp.cleanup()
    return target


def build(out_dir: Path, paths: list[Path] | None = None, reveal: Path | None = None) -> list[Path]:
    """One static reveal.js deck per lecture, from its stored outputs (nothing is executed); with `reveal`, a
    local reveal.js folder (fetched if missing) that the decks load instead of the CDN's."""
    from nbconvert import SlidesExporter

    out_dir.mkdir(parents=True, exist_ok=True)
    options = {"reveal_scroll": True}
    if reveal is not None:
        # paths relative to the decks, so the folder can be copied to a classroom machine as it is
        here = Path(os.path.relpath(fetch_reveal(reveal), out_dir)).as_posix()
        options.update(reveal_url_prefix=f"{here}/reveal.js", require_js_url=f"{here}/require.js",
                       jquery_url=f"{here}/jquery.min.js")
    exporter = SlidesExporter(**options)
    written = []
    for path in paths or lectures():
        body, _ = exporter.from_notebook_node(nbformat.read(path, as_version=4))
        target = out_dir / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: --write, --check or --build DIR."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", action="store_true", help="give every lecture its slide metadata")
    what.add_argument("--check", action="store_true", help="exit 1 if a lecture's slide metadata is stale")
    what.add_argument("--build", type=Path, metavar="DIR", help="write one deck per lecture into DIR")
    parser.add_argument("--reveal", type=Path, metavar="FOLDER", help="with --build: reveal.js, require.js and "
                        "jQuery in FOLDER (fetched from npm if missing) instead of their CDNs")
    args = parser.parse_args(argv)
    if args.write:
        changed = write()
        print(f"slide metadata written to {len(changed)} lecture(s)" if changed else "slide metadata is current")
    elif args.check:
        behind = stale()
        if behind:
            print("slide metadata is stale in " + ", ".join(p.name for p in behind) + ": run `make slides`",
                  file=sys.stderr)
            return 1
        print("slide metadata is current")
    else:
        try:
            decks = build(args.build, reveal=args.reveal)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"slides: {exc}", file=sys.stderr)
            return 1
        for deck in decks:
            print(f"wrote {deck}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
