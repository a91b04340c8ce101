"""The instructor's guide: a page per chapter, its figures read from the reports, its mistakes from the suites."""

import pytest

from launchlab import course
from launchlab.env import repo_root
from launchlab_tools import guide

ROOT = repo_root()
GUIDE_09 = guide.guide_file(course.chapter("09"))


def test_every_chapter_has_a_guide_and_every_guide_builds(tmp_path):
    assert all(guide.guide_file(ch).exists() for ch in course.chapters())
    pages = guide.write(tmp_path, ROOT)            # checks every demo's cell and figures against its chapter
    assert len(pages) == len(course.chapters()) and (tmp_path / "index.md").exists()


def test_a_page_quotes_the_reference_runs_and_the_declared_mistakes():
    text = guide.page(ROOT, "09", guide.load(GUIDE_09), guide.figures.columns(ROOT, []))
    assert "NVIDIA H100 80GB HBM3" in text and "NVIDIA H200" in text
    assert "## Mistakes learners make" in text and "(the classic mistake)" in text
    assert "| 0 |" in text and "## Discussion questions" in text


def test_every_exercise_lists_its_declared_mistakes(tmp_path):
    guide.write(tmp_path, ROOT)
    for ch in course.chapters():
        text = (tmp_path / f"{ch.number}.md").read_text()
        for ex in ch.exercises:
            assert f"**{ex.heading}**" in text
            assert all(m.what in text for m in ex.mistakes), (ch.number, ex.number)


def test_the_guide_names_cells_as_jupyterlab_numbers_them_never_by_id(tmp_path):
    import re

    import nbformat

    guide.write(tmp_path, ROOT)
    for ch in course.chapters():
        nb = nbformat.read(ROOT / ch.lecture(), as_version=4)
        text = (tmp_path / f"{ch.number}.md").read_text()
        ids = {c.get("id") for c in nb.cells} - {None}
        named = [w for w in re.findall(r"\b[\w-]+\b", text) if w in ids]
        assert not named, f"chapter {ch.number}'s guide names cells by id: {sorted(set(named))}"
    assert guide.as_seen("run c01, c03 and c05, then c08-c21", {"c01": 2, "c03": 4, "c05": 6, "c08": 9, "c21": 22}) \
        == "run cells 2, 4 and 6, then cells 9-22"


def test_a_plan_that_does_not_fill_the_session_is_refused(tmp_path):
    bad = tmp_path / "guide.yml"
    bad.write_text("goals: [a, b, c]\nplan: [[45, x]]\ndemos: [{title: t, cell: c04, say: s}, {title: u, cell: c08, "
                   "say: s}]\nwhen_a_claim_fails: w\nquestions: [q, r, s]\n")
    with pytest.raises(ValueError, match="45 minutes, not 50"):
        guide.load(bad)


def test_a_demo_naming_a_figure_its_chapter_does_not_declare_is_refused():
    data = guide.load(GUIDE_09)
    data["demos"] = [{**data["demos"][0], "figures": ["no_such_figure"]}]
    with pytest.raises(ValueError, match="does not declare"):
        guide.page(ROOT, "09", data, [])


def test_a_guide_with_one_demo_is_refused(tmp_path):
    bad = tmp_path / "09.yml"
    bad.write_text("goals: [a, b, c]\nplan: [[50, x]]\ndemos: [{title: t, cell: c04, say: s}]\n"
                   "when_a_claim_fails: w\nquestions: [q, r, s]\n")
    with pytest.raises(ValueError, match="demos should be a list of 2 to 3"):
        guide.load(bad)
