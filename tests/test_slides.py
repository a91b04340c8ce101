"""Slides: the slide-type rule, every lecture carrying it, the deck's cuts of what is taller than a slide, and a
static deck built from stored outputs that loads nothing from the network (the browser test walks every slide)."""

import base64
import copy
import re
import struct

import nbformat

from launchlab.env import repo_root
from launchlab_tools import slides

ROOT = repo_root()
md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell


def _plot(width: int, height: int) -> dict:
    """A display output holding a PNG of this size (its header is all the rule reads)."""
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", width, height) + bytes(40)
    return nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(header).decode(),
                                                        "text/plain": "<Figure>"})


def _text(lines: int, width: int = 40) -> dict:
    return nbformat.v4.new_output("stream", name="stdout",
                                  text="".join(f"line {k:04d} " + "x" * width + "\n" for k in range(lines)))


def _types(cells: list) -> list[str]:
    nb = nbformat.v4.new_notebook(cells=cells)
    return slides.slide_types(nb)


def test_the_rule_starts_slides_at_sections_and_subslides_at_subsections():
    cells = [md("# 09 · title"), code("x = 1"), md("## 1. A section"), code("measure()"), md("What it says."),
             md("More of it."), md("### A subsection"), code("plot()")]
    assert _types(cells) == ["slide", "-", "slide", "-", "-", "-", "subslide", "-"]


def test_the_rule_starts_a_subslide_where_a_cell_would_overflow_the_slide():
    tall = code("plot()", outputs=[_plot(552, 280)])            # shown 1.5x: 420 px
    again = copy.deepcopy(tall)
    again.id = "again"
    cells = [md("# title"), md("## 1. A section\n\nSome words."), tall, md("What the plot says."), again]
    assert _types(cells) == ["slide", "slide", "-", "-", "subslide"]
    # the rule reads the cells and nothing else: the same notebook gets the same types
    assert _types(cells) == _types(copy.deepcopy(cells))


def test_every_lecture_carries_the_rule_and_applying_it_changes_only_slide_metadata():
    assert not slides.stale(ROOT), "run `make slides` to write the lectures' slide metadata"
    nb = nbformat.read(slides.lectures(ROOT)[0], as_version=4)
    assert nb.metadata["rise"]["scroll"] is True and not slides.with_slides(nb)
    for cell in nb.cells:   # a notebook whose metadata is gone gets it back, and nothing else changes
        cell.metadata.pop("slideshow", None)
    before = copy.deepcopy(nb)
    assert slides.with_slides(nb)
    for old, new in zip(before.cells, nb.cells, strict=True):
        assert old.source == new.source and old.get("outputs") == new.get("outputs")
        assert {k: v for k, v in new.metadata.items() if k != "slideshow"} == dict(old.metadata)


def test_the_deck_shows_the_head_of_a_long_code_cell_and_says_how_many_lines_the_notebook_has():
    source = "\n".join(f"value_{k} = {k}" for k in range(200))
    cell = code(source, outputs=[_text(2)], execution_count=7)
    nb = nbformat.v4.new_notebook(cells=[md("# title"), cell])
    (first, shown), = [(i, c) for i, c in slides.deck_cells(nb) if c.cell_type == "code"]
    lines = shown.source.split("\n")
    match = re.fullmatch(r"# \.\.\. (\d+) more lines of this cell are in the notebook", lines[-1])
    assert match and len(lines) - 1 + int(match.group(1)) == 200 and lines[0] == "value_0 = 0"
    assert shown.outputs == cell.outputs and slides.height(shown) <= slides.SIZES.content * slides.SIZES.stretch
    assert nb.cells[1].source == source   # the notebook keeps every line


def test_the_deck_moves_outputs_that_do_not_fit_to_subslides_that_name_their_cell():
    cell = code("run()", outputs=[_plot(552, 280), _text(6), _plot(552, 280), _text(500)], execution_count=3)
    nb = nbformat.v4.new_notebook(cells=[md("# title"), cell])
    pieces = [c for _, c in slides.deck_cells(nb)][1:]
    assert len(pieces) > 2 and pieces[0].source == "run()"
    for piece in pieces[1:]:
        assert piece.metadata.slideshow["slide_type"] == "subslide"
        assert slides.NO_INPUT in piece.metadata["tags"]
        assert piece.outputs[0].text == "[In [3], continued: its output]\n"
        assert slides.height(piece) <= slides.SIZES.content * slides.SIZES.stretch
    text = "".join(o.text for p in pieces for o in p.outputs[1 if p is not pieces[0] else 0:]
                   if o.output_type == "stream")
    assert "line 0000" in text and "line 0499" in text                      # the head and the tail
    left = re.search(r"\[\.\.\. (\d+) more lines of this output are in the notebook \.\.\.\]", text)
    assert left and text.count("line ") + int(left.group(1)) == 506        # and what is left out, counted
    assert slides.NO_INPUT not in nb.cells[1].metadata.get("tags", [])


def test_the_deck_cuts_a_markdown_cell_at_its_sections_and_its_long_lists_and_tables():
    items = "\n".join(f"{k}. " + "a point worth making " * 12 for k in range(1, 13))
    rows = "\n".join(f"| row {k} | {k * k} |" for k in range(40))
    cell = md(f"Closing words.\n\n## 2. The next section\n\n{items}\n\n| name | value |\n| --- | --- |\n{rows}")
    nb = nbformat.v4.new_notebook(cells=[md("# title"), code("x = 1"), cell])
    pieces = [c for i, c in slides.deck_cells(nb) if i == 2]
    assert pieces[0].source == "Closing words." and pieces[0].metadata.slideshow["slide_type"] == "-"
    assert pieces[1].source.startswith("## 2. The next section") and pieces[1].metadata.slideshow["slide_type"] == "slide"
    later = [p.source for p in pieces[2:]]
    assert any(re.match(r"\d+\. a point", s) and not s.startswith("1. ") for s in later)   # a list goes on
    for text in later:   # each slide's part of the table has the table's header
        assert "| row " not in text or text.index("| name | value |\n| --- | --- |\n") < text.index("| row ")
    assert sum(s.count("| row ") for s in later + [pieces[1].source]) == 40
    for piece in pieces:
        assert slides.height(piece) <= slides.SIZES.content * slides.SIZES.orphan_stretch


def test_no_slide_of_a_lecture_is_estimated_taller_than_the_rule_allows():
    limit = slides.SIZES.content * slides.SIZES.orphan_stretch   # the browser test measures the real heights
    for path in slides.lectures(ROOT):
        slide, tallest = [], []
        for _, cell in slides.deck_cells(nbformat.read(path, as_version=4)):
            if cell.metadata.slideshow["slide_type"] != "-" and slide:
                tallest.append(sum(map(slides.height, slide)))
                slide = []
            slide.append(cell)
        tallest.append(sum(map(slides.height, slide)))
        assert max(tallest) <= limit, f"{path.name}: a slide of {max(tallest):.0f} px (by the estimate)"


def test_a_deck_is_built_from_the_stored_outputs_with_everything_it_loads_beside_it(tmp_path):
    offline = tmp_path / "offline"
    for name in slides.OFFLINE:   # as fetch_reveal leaves them (the browser test fetches the real ones)
        (offline / name).mkdir(parents=True)
    lecture = ROOT / "notebooks" / "09_past_graphs.ipynb"
    (deck,) = slides.build(tmp_path, [lecture], reveal=offline)
    html = deck.read_text(encoding="utf-8")
    assert deck.name == "09_past_graphs.slides.html" and html.count("<section") >= 16
    assert "data:image/png;base64," in html and "Reveal.initialize" in html
    loaded = re.findall(r"<script[^>]*\ssrc=\"([^\"]+)\"", html) + re.findall(r"<link[^>]*\shref=\"([^\"]+)\"", html)
    assert loaded and all(url.startswith("offline/") for url in loaded), loaded
    assert "offline/mathjax/tex-svg-full.js" in loaded and "offline/reveal.js/dist/reveal.js" in loaded
    for gone in ("MathJax.Hub", "mermaid", "jquery", "require.js", "googleapis"):
        assert gone not in html, gone
    assert f"WIDTH = {slides.SLIDE_WIDTH}, HEIGHT = {slides.SLIDE_HEIGHT}" in html
