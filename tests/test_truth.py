"""Truth in the prose: every number in a lecture's markdown comes from its stored outputs or a cited source."""

import re

import nbformat
import pytest

from launchlab import course

ROOT_UNITS = (r"x|×|us|µs|μs|ns|ms|s|%|GB/s|TB/s|MB/s|B|KB|MB|GB|KiB|MiB|GiB|TFLOP/s|tok/s|tokens/s|cycles|"
              r"kernels|launches|blocks|SMs|elements|bytes")
# A number with a unit or an "x" (versions, years and section numbers carry none, so they are left alone).
NUMBER = re.compile(r"(?<![\w.\-])(\d[\d,]*(?:\.\d+)?)\s?(?:" + ROOT_UNITS + r")(?![\w/])")


def _digits(text: str) -> str:
    return text.replace(",", "")


def outputs_text(nb) -> str:
    """Everything a notebook's stored outputs show: streams, plain text and markdown."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            data = out.get("data", {})
            parts += [data.get("text/plain", ""), data.get("text/markdown", "")]
    return _digits(" ".join(parts))


def unsourced_numbers(nb, chapter: course.Chapter) -> list[str]:
    """Numbers in markdown (outside code spans) that neither the stored outputs nor the chapter's sources hold."""
    shown = outputs_text(nb) + " " + _digits(" ".join(s.what for s in chapter.sources))
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for match in NUMBER.finditer(re.sub(r"`[^`]*`", "", cell.source)):
            number = _digits(match.group(1))
            if not re.search(r"(?<![\d.])" + re.escape(number) + r"(?!\d)", shown):
                found.append(match.group(0))
    return found


def test_the_scan_finds_a_number_the_run_does_not_print():
    chapter = course.Chapter("98", "98_x", "x", "", "", course.Needs(), 10,
                             sources=(course.Source("9.6 us per kernel", "V100", "https://example.org"),))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("eager 7.0 us, graph 1.2 us (5.8x); the blog: 9.6 us; CUDA 12.4, `3 us`"),
        nbformat.v4.new_code_cell("print(...)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="eager 7.0 us, graph 1.2 us\n")])])
    assert unsourced_numbers(nb, chapter) == ["5.8x"]


@pytest.mark.parametrize("chapter", course.chapters(), ids=lambda ch: ch.number)
def test_every_number_in_a_lecture_is_from_its_run_or_a_cited_source(chapter, root):
    for rel in (chapter.lecture(), chapter.solution()):
        nb = nbformat.read(root / rel, as_version=4)
        assert unsourced_numbers(nb, chapter) == [], f"{rel}: print these from the run, or cite them in sources"


@pytest.mark.parametrize("chapter", course.chapters(), ids=lambda ch: ch.number)
def test_every_cited_source_names_its_hardware_and_is_linked_from_the_lecture(chapter, root):
    text = nbformat.read(root / chapter.lecture(), as_version=4)
    markdown = "\n".join(c.source for c in text.cells if c.cell_type == "markdown")
    for source in chapter.sources:
        assert source.hardware.strip() and source.url.startswith("https://"), source
        assert source.url in markdown, f"{chapter.lecture()} does not link {source.url}"


@pytest.mark.parametrize("chapter", course.chapters(), ids=lambda ch: ch.number)
def test_every_lecture_ends_with_how_its_numbers_could_mislead(chapter, root):
    nb = nbformat.read(root / chapter.lecture(), as_version=4)
    headings = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
                if line.startswith("## ")]
    assert headings and headings[-1].startswith("## How these numbers could mislead you"), headings[-1:]
