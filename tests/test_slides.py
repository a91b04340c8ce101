"""Slides: the slide-type rule, every lecture carrying it, and a static deck built from stored outputs."""

import nbformat

from launchlab.env import repo_root
from launchlab_tools import slides

ROOT = repo_root()


def test_the_rule_starts_slides_at_sections_and_subslides_at_readings():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# 09 · title"), code("x = 1"), md("## 1. A section"), code("measure()"), md("What it says."),
             md("More of it."), md("### A subsection"), code("plot()")]
    types, previous = [], None
    for cell in cells:
        types.append(slides.slide_type(cell, previous))
        previous = cell
    assert types == ["slide", "-", "slide", "-", "subslide", "-", "subslide", "-"]


def test_every_lecture_carries_the_rule_and_applying_it_twice_changes_nothing():
    assert not slides.stale(ROOT), "run `make slides` to write the lectures' slide metadata"
    nb = nbformat.read(slides.lectures(ROOT)[0], as_version=4)
    assert nb.metadata["rise"]["scroll"] is True and not slides.with_slides(nb)


def test_a_deck_is_built_from_the_stored_outputs_with_its_plots(tmp_path):
    lecture = ROOT / "notebooks" / "09_past_graphs.ipynb"
    (deck,) = slides.build(tmp_path, [lecture])
    html = deck.read_text(encoding="utf-8")
    sections = html.count("<section")
    assert deck.name == "09_past_graphs.slides.html" and sections >= 8
    assert "data:image/png;base64," in html and "Reveal.initialize" in html
