"""Lectures as slides: slide metadata in every lecture notebook, and a static reveal.js deck per chapter.

    python -m launchlab_tools.slides --write       # give every lecture its slide metadata (make slides does)
    python -m launchlab_tools.slides --check       # fail if a lecture's slide metadata is missing or stale
    python -m launchlab_tools.slides --build DIR   # one deck per lecture, from the stored outputs: DIR/<name>.slides.html
    python -m launchlab_tools.slides --build DIR --reveal DIR/offline     # ...with every script beside them

The metadata drives the live deck in JupyterLab (RISE: `make lab` installs jupyterlab-rise; open a lecture and
press Alt+R), and the static deck (nbconvert's reveal.js exporter, which runs nothing) follows the same rule,
which `--check` holds the metadata to. The rule, so that nobody edits slide types by hand, is made for a
1280x720 screen: the title and every `##` section start a slide, every `###` heading a sub-slide, and any cell
that would make its slide taller than the screen (by an estimate of each cell's height in the deck: lines of
text and code, outputs, the stored plots' sizes) a sub-slide too. It reads the stored outputs, so a run that
stores new ones may move a slide: `--check` says so, and `--write` puts it right.

The static deck goes further where one cell is taller than a slide, and only in the deck (the notebook and the
site keep every line): a markdown cell is cut at its headings and paragraphs into sub-slides; a long code cell
shows its first lines and says how many more the notebook has; its outputs move to sub-slides of their own
under a line naming the cell, and a very long text output keeps its head and tail and says what it left out.
What still exceeds the slide is scaled down to fit by a script in the deck (never clipped), and never below
MIN_SCALE for a lecture of the course: a browser test walks every slide at 1280x720 to hold the decks to it.
"""

from __future__ import annotations

import argparse
import base64
import copy
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from launchlab.env import repo_root

from .notebooks import course_notebooks

SCROLLING = {"scroll": True, "autolaunch": False}  # RISE's notebook settings: long slides scroll in the live deck
REVEAL_VERSION = "4.0.2"  # the reveal.js nbconvert's slides template is written for (its default CDN prefix)
MATHJAX_VERSION = "3.2.2"
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720  # the deck's slide, shown whole on a 1280x720 screen (reveal.js scales it)
MIN_SCALE = 0.5  # the deck's fit script may shrink a slide this far; a slide that needs more must be cut instead
NO_INPUT = "launchlab-deck-output-only"  # tag of the deck's copy of a cell that shows outputs without the code


# --- the height model ---------------------------------------------------------------------------------------
# Pixels at scale 1 in the deck's style (TEMPLATE, below), measured in Chromium: what one line of prose, code and
# output takes, how many characters fit on one, and what each kind of block adds around it. Against the
# lectures' decks as Chromium lays them out, a cell's estimate is within about 20% of its height (the fit
# script takes up the rest); change the deck's style and these change with it.
@dataclass(frozen=True)
class Sizes:
    content: float = SLIDE_HEIGHT - 40  # a slide's height less reveal.js's padding
    stretch: float = 1.2                # one piece may be this much taller than a slide: scaled to 1/1.2
    text_line: float = 28.0
    text_chars: int = 112
    h1: float = 64.0
    h2: float = 54.0
    h3: float = 44.0
    block_gap: float = 16.0
    table_row: float = 34.0
    table_chars: int = 120
    code_line: float = 24.0
    code_chars: int = 104
    out_line: float = 24.0
    out_chars: int = 104
    cell_pad: float = 14.0
    output_pad: float = 10.0
    image_zoom: float = 1.5             # a stored plot is shown this much larger than it was saved...
    image_width: float = 1040.0         # ...and never wider than this
    max_output_lines: int = 60          # a text output longer than this keeps its head and tail in the deck
    tail_lines: int = 8
    item_gap: float = 2.0
    item_indent: int = 6                # a list item's line holds this many characters fewer
    code_span_extra: float = 0.4        # a character of inline code is this much wider than one of prose
    min_code: float = 8 * 24.0 + 14     # eight lines of code: shorter than that, the outputs move instead
    orphan: float = 160.0               # a last piece this short stays with the one above...
    orphan_stretch: float = 1.35        # ...if the two are no taller than this many slides together
    output_only: float = 27.0           # a deck cell without its input still takes this much


SIZES = Sizes()


def _visual_lines(text: str, chars: int) -> int:
    """Lines a text takes once lines longer than `chars` wrap."""
    return sum(max(1, math.ceil(len(line.expandtabs(4)) / chars)) for line in text.split("\n"))


def _source(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def _blocks(markdown: str) -> list[str]:
    """A markdown cell's blocks, in order: headings, paragraphs, lists, tables and fenced code, each whole."""
    blocks: list[str] = []
    current: list[str] = []
    fence = False

    def close() -> None:
        if current:
            blocks.append("\n".join(current))
            current.clear()

    for line in markdown.split("\n"):
        fenced = line.lstrip().startswith("```")
        if fence:
            current.append(line)
            if fenced:
                fence = False
                close()
        elif fenced:
            close()
            current.append(line)
            fence = True
        elif not line.strip():
            close()
        elif line.startswith("#"):
            close()
            blocks.append(line)
        else:
            if current and line.lstrip().startswith("|") != current[-1].lstrip().startswith("|"):
                close()   # a table begins or ends
            current.append(line)
    close()
    return blocks


@dataclass
class _Unit:
    """The smallest part of a markdown cell that a deck may put on another slide: a block, a list item, a table
    row (with its table's header, repeated where a slide starts with the row)."""

    text: str
    height: float
    glue: str = "\n\n"   # what joins it to the unit before it: a list or table goes on with one line break
    header: str = ""
    heading: int = 0


_ITEM = re.compile(r"([-*+]|\d+\.)\s")
_RULE_ROW = re.compile(r"\s*\|?[\s:|-]+\|?\s*")


_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_CODE_SPAN = re.compile(r"`([^`]*)`")


def _prose_lines(lines: list[str], sizes: Sizes, indent: int = 0) -> int:
    """Lines a paragraph or list item takes: its source line breaks are spaces, and it wraps. A link shows its
    text only; code spans, set in a wider font, count for more."""
    text = _LINK.sub(r"\1", " ".join(line.strip() for line in lines)).replace("**", "")
    width = len(text) + sizes.code_span_extra * sum(len(c) for c in _CODE_SPAN.findall(text))
    return max(1, math.ceil(width / (sizes.text_chars - indent)))


def _units(markdown: str, sizes: Sizes = SIZES) -> list[_Unit]:
    """A markdown cell's units, with their estimated heights in the deck."""
    units = []
    for block in _blocks(markdown):
        first, lines = block.lstrip(), block.split("\n")
        level = _heading(block)
        if first.startswith("```"):
            code = "\n".join(lines[1:-1])
            units.append(_Unit(block, _visual_lines(code, sizes.code_chars) * sizes.code_line + 2 * sizes.block_gap))
        elif level:
            high = {1: sizes.h1, 2: sizes.h2, 3: sizes.h3}.get(level, sizes.h3)
            units.append(_Unit(block, high * _visual_lines(first, 60) + sizes.block_gap, heading=level))
        elif first.startswith("|"):
            ruled = len(lines) > 1 and _RULE_ROW.fullmatch(lines[1]) is not None
            header = "\n".join(lines[:2]) if ruled else ""
            rows = lines[2:] if ruled else lines
            if header:
                units.append(_Unit(header, _visual_lines(lines[0], sizes.table_chars) * sizes.table_row
                                   + sizes.block_gap))
            for k, row in enumerate(rows):
                gap = sizes.block_gap if k == 0 and not header else 0.0
                units.append(_Unit(row, _visual_lines(row, sizes.table_chars) * sizes.table_row + gap,
                                   glue="\n" if header or k else "\n\n", header=header))
        elif _ITEM.match(lines[0]):
            items: list[list[str]] = []
            for line in lines:
                if _ITEM.match(line) or not items:
                    items.append([line])
                else:
                    items[-1].append(line)   # an indented line or a nested item goes on with its item
            for k, item in enumerate(items):
                extra = sizes.block_gap if k == 0 else sizes.item_gap
                tall = _prose_lines(item, sizes, sizes.item_indent) * sizes.text_line + extra
                units.append(_Unit("\n".join(item), tall, glue="\n" if k else "\n\n"))
        else:
            units.append(_Unit(block, _prose_lines(lines, sizes) * sizes.text_line + sizes.block_gap))
    return units


def _joined(units: list[_Unit]) -> str:
    """The markdown of consecutive units; a table row that starts it brings its table's header."""
    text = units[0].header + "\n" + units[0].text if units[0].header else units[0].text
    return text + "".join(u.glue + u.text for u in units[1:])


def markdown_height(markdown: str, sizes: Sizes = SIZES) -> float:
    """Estimated height of a markdown cell in the deck."""
    return sum(u.height for u in _units(markdown, sizes)) + sizes.cell_pad


def _png_size(data: str) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG, from its header."""
    try:
        head = base64.b64decode(data[:64])
    except (ValueError, TypeError):
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def _output_text(output) -> str | None:
    """The text an output shows, when it shows text (a stream, a traceback, a plain-text result)."""
    if output.output_type == "stream":
        return output.text if isinstance(output.text, str) else "".join(output.text)
    if output.output_type == "error":
        return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(output.get("traceback", [])))
    data = output.get("data", {})
    if any(k.startswith("image/") or k == "text/html" for k in data):
        return None
    text = data.get("text/plain")
    return "".join(text) if isinstance(text, list) else text


def _image_zoom(width: int, sizes: Sizes = SIZES) -> float:
    """How much larger the deck shows a stored plot of this width than its own pixels."""
    return min(sizes.image_zoom, sizes.image_width / max(width, 1))


def output_height(output, sizes: Sizes = SIZES) -> float:
    """Estimated height of one output in the deck."""
    data = output.get("data", {})
    png = data.get("image/png")
    if png:
        size = _png_size(png if isinstance(png, str) else "".join(png))
        if size:
            width, height = size
            return height * _image_zoom(width, sizes) + sizes.output_pad
        return 300.0
    html = data.get("text/html")
    if html:
        html = "".join(html) if isinstance(html, list) else html
        return (html.count("<tr") or html.count("<br") or 3) * sizes.table_row + sizes.output_pad
    text = _output_text(output) or ""
    return _visual_lines(text.rstrip("\n"), sizes.out_chars) * sizes.out_line + sizes.output_pad


def code_height(source: str, sizes: Sizes = SIZES) -> float:
    """Estimated height of a code cell's input in the deck."""
    return _visual_lines(source.rstrip("\n"), sizes.code_chars) * sizes.code_line + sizes.cell_pad


# --- the rule -----------------------------------------------------------------------------------------------
def _heading(markdown: str) -> int:
    """The level of the heading a markdown text starts with (0 if none)."""
    match = re.match(r"(#{1,6})\s", markdown.lstrip())
    return len(match.group(1)) if match else 0


def _md_cell(source: str, like) -> nbformat.NotebookNode:
    """A markdown cell with this source and the metadata and id of `like` (the deck makes the ids unique)."""
    cell = nbformat.v4.new_markdown_cell(source, metadata=copy.deepcopy(like.metadata))
    if "id" in like:
        cell.id = like.id
    return cell


def _trim_text(text: str, sizes: Sizes = SIZES) -> str:
    """A long text output as the deck shows it: its head and its tail, and a line saying what is left out."""
    lines = text.rstrip("\n").split("\n")
    if _visual_lines("\n".join(lines), sizes.out_chars) <= sizes.max_output_lines:
        return text
    head, budget = [], sizes.max_output_lines - sizes.tail_lines - 1
    for line in lines:
        cost = _visual_lines(line, sizes.out_chars)
        if cost > budget:
            break
        head.append(line)
        budget -= cost
    tail, budget = [], sizes.tail_lines
    for line in reversed(lines[len(head):]):
        cost = _visual_lines(line, sizes.out_chars)
        if cost > budget:
            break
        tail.insert(0, line)
        budget -= cost
    left = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {left} more lines of this output are in the notebook ...]", *tail]) + "\n"


def _trim_outputs(outputs: list, sizes: Sizes = SIZES) -> list:
    """Outputs as the deck shows them: long texts cut to their head and tail, then cut into pieces that fit."""
    pieces = []
    for output in outputs:
        output = copy.deepcopy(output)
        if output.output_type == "stream":
            text = _trim_text(_output_text(output) or "", sizes)
            lines, chunk = text.rstrip("\n").split("\n"), []
            room = sizes.content - 2 * sizes.cell_pad - sizes.output_pad - 2 * sizes.out_line
            for line in lines:   # a text output longer than a slide goes on in the next output
                cost = _visual_lines(line, sizes.out_chars) * sizes.out_line
                if chunk and _visual_lines("\n".join(chunk), sizes.out_chars) * sizes.out_line + cost > room:
                    pieces.append(nbformat.v4.new_output("stream", name=output.name, text="\n".join(chunk) + "\n"))
                    chunk = []
                chunk.append(line)
            pieces.append(nbformat.v4.new_output("stream", name=output.name, text="\n".join(chunk) + "\n"))
            continue
        png = output.get("data", {}).get("image/png")
        size = _png_size(png if isinstance(png, str) else "".join(png)) if png else None
        if size:   # larger on a slide than in a notebook: nbconvert writes the width into the <img>
            output.setdefault("metadata", {}).setdefault("image/png", {})["width"] = round(
                size[0] * _image_zoom(size[0], sizes))
        if output.output_type == "error":
            output.traceback = _trim_text("\n".join(output.traceback), sizes).rstrip("\n").split("\n")
        elif "text/plain" in output.get("data", {}) and set(output.data) == {"text/plain"}:
            output.data["text/plain"] = _trim_text(_output_text(output) or "", sizes)
        pieces.append(output)
    return pieces


def _trim_code(source: str, lines: int) -> str:
    """A code cell's first `lines` lines as the deck shows them, and a comment saying how many more there are."""
    all_lines = source.rstrip("\n").split("\n")
    kept = all_lines[:max(lines - 1, 0)]
    while kept and not kept[-1].strip():
        kept.pop()
    more = len(all_lines) - len(kept)
    return "\n".join([*kept, f"# ... {more} more lines of this cell are in the notebook"])


def _code_pieces(cell, sizes: Sizes = SIZES) -> list:
    """A code cell as one or more deck cells, each about a slide tall at most: the input (its first lines, if it
    is long) with the outputs that fit under it, then the other outputs under a line naming the cell."""
    source = _source(cell)
    outputs = _trim_outputs(cell.get("outputs", []), sizes)
    heights = [output_height(o, sizes) for o in outputs]
    room = sizes.content * sizes.stretch
    if code_height(source, sizes) + sum(heights) <= room:
        return [dict(cell, source=source, outputs=outputs)]
    # Outputs that leave room for the code's first lines stay under it; the code is cut to that room.
    code_room = room - sum(heights) if room - sum(heights) >= sizes.min_code else sizes.content
    if code_height(source, sizes) > code_room:
        lines = int((code_room - sizes.cell_pad) // sizes.code_line)
        source = _trim_code(_source(cell), lines)
        while code_height(source, sizes) > code_room and lines > 1:   # wrapped lines take more room
            lines -= 1
            source = _trim_code(_source(cell), lines)
    count = cell.get("execution_count")
    note = nbformat.v4.new_output("stream", name="stdout",
                                  text=f"[{f'In [{count}]' if count else 'the cell above'}, continued: its output]\n")
    note_height = sizes.output_only + output_height(note, sizes)
    groups: list[list[int]] = [[]]   # the outputs of each piece; the first piece also shows the input
    tall = [code_height(source, sizes)]
    for k, output_tall in enumerate(heights):
        if tall[-1] + output_tall > room and (groups[-1] or len(groups) == 1):
            groups.append([])
            tall.append(note_height)
        groups[-1].append(k)
        tall[-1] += output_tall
    last = tall[-1] - note_height
    if len(groups) > 1 and last < sizes.orphan and tall[-2] + last <= sizes.content * sizes.orphan_stretch:
        groups[-2:] = [groups[-2] + groups[-1]]   # no slide for a line or two of output: the one above takes it
    pieces = [dict(cell, source=source, outputs=[outputs[k] for k in groups[0]])]
    for group in groups[1:]:
        pieces.append(dict(cell, source="", outputs=[note, *(outputs[k] for k in group)],
                           metadata=_tagged(cell.metadata)))
    return [nbformat.from_dict(copy.deepcopy(p)) for p in pieces]


def _tagged(metadata) -> dict:
    metadata = copy.deepcopy(dict(metadata))
    metadata["tags"] = [*metadata.get("tags", []), NO_INPUT]
    return metadata


def _markdown_pieces(cell, sizes: Sizes = SIZES) -> list:
    """A markdown cell as one or more deck cells: cut before each `##` or `###` heading after its first line,
    and between units (blocks, list items, table rows) where the text so far fills a slide."""
    groups: list[list[_Unit]] = []
    current: list[_Unit] = []
    used = sizes.cell_pad
    for unit in _units(_source(cell), sizes):
        only_headings = all(u.heading for u in current)
        if current and (unit.heading in (2, 3) or used + unit.height > sizes.content and not only_headings):
            groups.append(current)
            current, used = [], sizes.cell_pad
        current.append(unit)
        used += unit.height
    groups.append(current)
    heights = [sum(u.height for u in g) + sizes.cell_pad for g in groups]
    if (len(groups) > 1 and not groups[-1][0].heading and heights[-1] < sizes.orphan
            and heights[-2] + heights[-1] <= sizes.content * sizes.orphan_stretch):
        groups[-2:] = [groups[-2] + groups[-1]]   # no slide for a last line or two: the one above takes them
    if len(groups) <= 1:
        return [cell]
    return [_md_cell(_joined(g), cell) for g in groups]


def height(cell, sizes: Sizes = SIZES) -> float:
    """Estimated height of one deck cell."""
    if cell.cell_type == "markdown":
        return markdown_height(_source(cell), sizes)
    if cell.cell_type != "code":
        return _visual_lines(_source(cell), sizes.code_chars) * sizes.code_line
    hidden = NO_INPUT in cell.get("metadata", {}).get("tags", [])
    shown = sizes.output_only if hidden else code_height(_source(cell), sizes)
    return shown + sum(output_height(o, sizes) for o in cell.get("outputs", []))


def deck_cells(nb: nbformat.NotebookNode, sizes: Sizes = SIZES) -> list[tuple[int, nbformat.NotebookNode]]:
    """The deck's cells with their slide types, each with the index of the notebook cell it comes from."""
    out, used = [], 0.0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            pieces = _markdown_pieces(cell, sizes)
        elif cell.cell_type == "code":
            pieces = _code_pieces(cell, sizes)
        else:
            pieces = [cell]
        for part, piece in enumerate(pieces):
            piece = nbformat.from_dict(copy.deepcopy(dict(piece)))
            if part and "id" in piece:
                piece.id = f"{piece.id}-{part}"   # ids stay unique in the deck
            tall = height(piece, sizes)
            level = _heading(_source(piece)) if piece.cell_type == "markdown" else 0
            if not out or level in (1, 2):
                kind = "slide"
            elif level == 3 or (used > 0 and used + tall > sizes.content):
                kind = "subslide"
            else:
                kind = "-"
            if kind != "-":
                used = 0.0
            used += tall
            piece.metadata["slideshow"] = {"slide_type": kind}
            out.append((index, piece))
    return out


def slide_types(nb: nbformat.NotebookNode, sizes: Sizes = SIZES) -> list[str]:
    """The slide type the rule gives each notebook cell: that of the first deck cell it becomes."""
    first: dict[int, str] = {}
    for index, piece in deck_cells(nb, sizes):
        first.setdefault(index, piece.metadata["slideshow"]["slide_type"])
    return [first[i] for i in range(len(nb.cells))]


def deck_notebook(nb: nbformat.NotebookNode, sizes: Sizes = SIZES) -> nbformat.NotebookNode:
    """The notebook as the static deck shows it (a copy: the notebook itself is not touched)."""
    deck = copy.deepcopy(nb)
    deck.cells = [piece for _, piece in deck_cells(nb, sizes)]
    return deck


def with_slides(nb: nbformat.NotebookNode) -> bool:
    """Give every cell its slide type and the notebook RISE's settings; True if anything changed."""
    changed = nb.metadata.get("rise") != SCROLLING
    nb.metadata["rise"] = dict(SCROLLING)
    for cell, wanted in zip(nb.cells, slide_types(nb), strict=True):
        if cell.metadata.get("slideshow") != {"slide_type": wanted}:
            cell.metadata["slideshow"] = {"slide_type": wanted}
            changed = True
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


# --- what the decks load, beside them -----------------------------------------------------------------------
# From the npm registry at build time, instead of the CDNs nbconvert's template names: package, the file or
# folder in it, and where it goes. reveal.js is the version the template is written for; MathJax 3 renders any
# TeX in the lectures (its SVG output needs no font files). The template's jQuery, require.js and mermaid are not
# loaded: the deck's own script does without them and no lecture draws a mermaid diagram.
OFFLINE = {"reveal.js": (f"reveal.js@{REVEAL_VERSION}", ""), "mathjax": (f"mathjax@{MATHJAX_VERSION}", "es5")}


def _npm_unpack(spec: str, timeout_s: float) -> tuple[tempfile.TemporaryDirectory, Path]:
    """`npm pack spec`, unpacked: (the temporary folder to clean up, the package's folder in it)."""
    tmp = tempfile.TemporaryDirectory()
    done = subprocess.run(["npm", "pack", spec, "--silent", "--prefer-offline"], cwd=tmp.name, timeout=timeout_s,
                          capture_output=True, text=True)
    packed = sorted(Path(tmp.name).glob("*.tgz"))
    if done.returncode != 0 or not packed:
        tmp.cleanup()
        raise RuntimeError(f"npm pack {spec} failed: {(done.stderr or done.stdout)[-300:]}")
    with tarfile.open(packed[0]) as archive:
        archive.extractall(tmp.name, filter="data")
    return tmp, Path(tmp.name) / "package"


def fetch_reveal(target: Path, timeout_s: float = 120) -> Path:
    """reveal.js and MathJax in `target` (from the npm registry, once), so that decks present offline."""
    if all((target / name).exists() for name in OFFLINE):
        return target
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not on the PATH: install Node.js to fetch reveal.js, or build without --reveal "
                           "(the decks then load reveal.js from its CDN)")
    target.mkdir(parents=True, exist_ok=True)
    for name, (spec, inner) in OFFLINE.items():
        if (target / name).exists():
            continue
        tmp, package = _npm_unpack(spec, timeout_s)
        try:
            shutil.copytree(package / inner if inner else package, target / f"{name}.part")
            (target / f"{name}.part").rename(target / name)
        finally:
            shutil.rmtree(target / f"{name}.part", ignore_errors=True)
            tmp.cleanup()
    return target


# --- the deck's template ------------------------------------------------------------------------------------
# nbconvert's reveal template, with its head and footer scripts replaced: no CDN, no jQuery scrolling, MathJax 3
# from beside the deck, and a script that fits each slide to the screen.
TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  options: {ignoreHtmlClass: 'tex2jax_ignore|jp-CodeCell'},
  startup: {typeset: true}
};
</script>
<script src="{{ resources.launchlab.mathjax }}" defer></script>
{%- endblock html_head_js_mathjax -%}
{% block notebook_css %}
{{ super() }}
<style type="text/css">
.reveal pre, .reveal .jp-OutputArea-output pre, .reveal .highlight pre {
  white-space: break-spaces; overflow-wrap: break-word; word-break: normal; box-sizing: border-box;
}
:root { --jp-cell-prompt-width: 84px; }
.reveal div.jp-OutputArea-output > pre { width: 100%; }
.reveal .ll-fit, .reveal .ll-fit * { overflow: visible !important; }
.reveal section img { max-width: 100%; margin: 0; }
.reveal .jp-Notebook-cell { padding: 4px 0; }
.reveal .slides section .ll-fit { width: 100%; }
</style>
{% endblock notebook_css %}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
(function () {
  var WIDTH = {{ resources.launchlab.width }}, HEIGHT = {{ resources.launchlab.height }};
  var leaves = Array.prototype.filter.call(document.querySelectorAll('.reveal .slides section'),
    function (s) { return !s.querySelector('section'); });
  // every slide's content in one box, which the fit below scales as a whole
  leaves.forEach(function (section) {
    var box = document.createElement('div');
    box.className = 'll-fit';
    while (section.firstChild) { box.appendChild(section.firstChild); }
    section.appendChild(box);
  });

  // Scale a slide's content down until it fits the slide, width and height; never clip it, never scale up.
  function fit(section) {
    var box = section.querySelector(':scope > .ll-fit');
    if (!box || getComputedStyle(section).display === 'none') { return; }
    box.style.transform = ''; box.style.marginBottom = '';
    var style = getComputedStyle(section);
    var room = HEIGHT - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    var high = box.scrollHeight, wide = Math.max(box.scrollWidth, WIDTH);
    if (high > room) { high += 2; }    // scrollHeight and scrollWidth are rounded: leave a pixel or two
    if (wide > WIDTH) { wide += 2; }
    var scale = Math.min(1, WIDTH / wide, room / high);
    if (scale < 1) {
      box.style.transformOrigin = '0 0';
      box.style.transform = 'translateX(' + (WIDTH - wide * scale) / 2 + 'px) scale(' + scale + ')';
      box.style.marginBottom = -(1 - scale) * high + 'px';
    }
    section.setAttribute('data-fit-scale', scale.toFixed(3));
  }
  function fitShown() {
    leaves.forEach(fit);
    Reveal.layout();   // centres each slide again on its fitted height
  }
  window.LaunchLabDeck = {fit: fitShown, minScale: {{ resources.launchlab.min_scale }}};

  Reveal.initialize({
    controls: true, progress: true, history: true, center: true,
    transition: "{{ resources.reveal.transition | default('slide', true) }}",
    slideNumber: "{{ resources.reveal.number | default('c/t', true) }}",
    width: WIDTH, height: HEIGHT, margin: 0.04, minScale: 0.2, maxScale: 2.0,
    plugins: [RevealNotes]
  });
  window.Reveal = Reveal;
  Reveal.on('ready', fitShown);
  Reveal.on('slidechanged', fitShown);
  window.addEventListener('load', fitShown);
  if (document.fonts) { document.fonts.ready.then(fitShown); }
  document.querySelectorAll('.reveal img').forEach(function (img) {
    if (!img.complete) { img.addEventListener('load', fitShown); }
  });
  var typeset = setInterval(function () {    // MathJax loads deferred: refit once it has typeset the deck
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      clearInterval(typeset);
      MathJax.startup.promise.then(fitShown);
    }
  }, 50);
  setTimeout(function () { clearInterval(typeset); }, 10000);
})();
</script>
{% endblock footer_js %}
"""


def build(out_dir: Path, paths: list[Path] | None = None, reveal: Path | None = None) -> list[Path]:
    """One static reveal.js deck per lecture, from its stored outputs (nothing is executed); with `reveal`, a
    local folder with reveal.js and MathJax (fetched if missing) that the decks load instead of the CDNs'."""
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    out_dir.mkdir(parents=True, exist_ok=True)
    options = {"reveal_scroll": False, "reveal_theme": "white", "reveal_transition": "slide",
               "reveal_width": str(SLIDE_WIDTH), "reveal_height": str(SLIDE_HEIGHT)}
    mathjax = f"https://cdn.jsdelivr.net/npm/mathjax@{MATHJAX_VERSION}/es5/tex-svg-full.js"
    if reveal is not None:
        # paths relative to the decks, so the folder can be copied to a classroom machine as it is
        here = Path(os.path.relpath(fetch_reveal(reveal), out_dir)).as_posix()
        options.update(reveal_url_prefix=f"{here}/reveal.js")
        mathjax = f"{here}/mathjax/tex-svg-full.js"
    config = Config({"TagRemovePreprocessor": {"enabled": True, "remove_input_tags": {NO_INPUT}}})
    exporter = SlidesExporter(config=config, extra_loaders=[DictLoader({"launchlab_deck.html.j2": TEMPLATE})],
                              template_file="launchlab_deck.html.j2", **options)
    resources = {"launchlab": {"mathjax": mathjax, "width": SLIDE_WIDTH, "height": SLIDE_HEIGHT,
                               "min_scale": MIN_SCALE}}
    written = []
    for path in paths or lectures():
        deck = deck_notebook(nbformat.read(path, as_version=4))
        body, _ = exporter.from_notebook_node(deck, resources=copy.deepcopy(resources))
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
    parser.add_argument("--reveal", type=Path, metavar="FOLDER", help="with --build: reveal.js and MathJax in "
                        "FOLDER (fetched from npm if missing) instead of their CDNs")
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
