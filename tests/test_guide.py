"""The instructor's guide: a page per chapter, its figures read from the reports, its mistakes from the suites."""

import pytest

from launchlab_tools import guide
from launchlab.env import repo_root
from launchlab_tools.notebooks import course_notebooks

ROOT = repo_root()


def test_every_chapter_has_a_guide_and_every_guide_builds(tmp_path):
    lectures = {p.stem[:2] for p in course_notebooks(ROOT, dirs=("notebooks",))}
    assert {p.stem for p in guide.sources(ROOT)} == lectures
    pages = guide.write(tmp_path, ROOT)            # checks every demo's cell and figures against its lecture
    assert len(pages) == len(lectures) and (tmp_path / "index.md").exists()


def test_a_page_quotes_the_reference_runs_and_the_planted_mistakes():
    text = guide.page(ROOT, "09", guide.load(ROOT / "guides" / "09.yml"), guide.figures.columns(ROOT, []))
    assert "NVIDIA H100 80GB HBM3" in text and "NVIDIA H200" in text
    assert "## Mistakes learners make" in text and "(the classic mistake)" in text
    assert "| 0 |" in text and "## Discussion questions" in text


def test_the_mistakes_come_from_the_mutation_suite_by_exercise():
    planted = guide.planted_mistakes(ROOT, "10")
    assert sorted(planted) == ["1", "2", "3", "4"]
    assert all(len(wrong) >= 6 and all(kind != "right" for _, kind in wrong) for wrong in planted.values())
    assert ("no warm-up: the optimizer's state is created inside the capture", "classic") in planted["1"]


def test_a_plan_that_does_not_fill_the_session_is_refused(tmp_path):
    bad = tmp_path / "guides" / "09.yml"
    bad.parent.mkdir()
    bad.write_text("goals: [a, b, c]\nplan: [[45, x]]\ndemos: [{title: t, cell: c04, say: s}, {title: u, cell: c08, "
                   "say: s}]\nwhen_a_claim_fails: w\nquestions: [q, r, s]\n")
    with pytest.raises(ValueError, match="45 minutes, not 50"):
        guide.load(bad)


def test_a_demo_naming_a_figure_its_lecture_does_not_record_is_refused():
    data = guide.load(ROOT / "guides" / "09.yml")
    data["demos"] = [{**data["demos"][0], "figures": ["no_such_figure"]}]
    with pytest.raises(ValueError, match="does not record"):
        guide.page(ROOT, "09", data, [])


def test_a_guide_with_one_demo_is_refused(tmp_path):
    bad = tmp_path / "09.yml"
    bad.write_text("goals: [a, b, c]\nplan: [[50, x]]\ndemos: [{title: t, cell: c04, say: s}]\n"
                   "when_a_claim_fails: w\nquestions: [q, r, s]\n")
    with pytest.raises(ValueError, match="demos should be a list of 2 to 3"):
        guide.load(bad)
