"""The start page, the README's syllabus and the reading site's table of contents follow the course model."""

import re

import nbformat

from launchlab import course
from launchlab_tools import site_toc, start_page
from launchlab_tools.notebooks import course_notebooks
from launchlab_tools.start_page import START_PAGE

LINK = re.compile(r"\]\(([^)]+\.ipynb)\)")


def test_the_start_page_is_current_and_runs_nothing(root):
    assert not start_page.generate(root, check=True), f"run `make labs` to regenerate {START_PAGE} and the README"
    nb = nbformat.read(root / START_PAGE, as_version=4)
    assert all(c.cell_type == "markdown" for c in nb.cells)


def test_the_start_page_links_every_chapter_file_and_nothing_missing(root):
    text = "\n".join(c.source for c in nbformat.read(root / START_PAGE, as_version=4).cells)
    targets = {(root / link).resolve() for link in LINK.findall(text)}
    assert all(t.exists() for t in targets), [str(t) for t in targets if not t.exists()]
    on_disk = {p.resolve() for p in course_notebooks(root, dirs=("notebooks", "labs", "solutions"))}
    assert on_disk <= targets, f"not linked from the start page: {sorted(map(str, on_disk - targets))}"


def test_a_chapter_not_yet_written_is_listed_as_such(tmp_path):
    (tmp_path / "notebooks").mkdir()
    text = "\n".join(start_page.index_cells(tmp_path))
    assert text.count("not in this checkout yet") == len(course.chapters())


def test_the_readme_gives_every_chapter_and_the_study_time(root):
    text = (root / "README.md").read_text(encoding="utf-8")
    for ch in course.chapters():
        assert f"| {ch.number} | {ch.title} | {ch.leaves_able_to} |" in text
    assert "in all, for a first reading" in text
    # What the GPU tier costs, added up from the reports (the start page's run times), never typed by hand.
    assert start_page.gpu_tier_cost(root) in text and " min on " in start_page.gpu_tier_cost(root)


def test_the_gpu_tier_cost_is_the_sum_of_the_start_pages_run_times(root):
    import json

    cost = start_page.gpu_tier_cost(root)
    for report in sorted((root / "reports" / "gpu").glob("*.json")):
        data = json.loads(report.read_text(encoding="utf-8"))
        paths = [rel for ch in course.chapters() for rel in (ch.lecture(), ch.solution())
                 if (root / rel).exists() and rel in data["notebooks"]]
        minutes = sum(data["notebooks"][rel]["seconds"] for rel in paths) / 60
        assert f"{minutes:.1f} min on " in cost and f"({len(paths)} notebooks)" in cost


def test_the_site_lists_every_lecture_and_solution(root):
    toc = site_toc.toc_text(root)
    for path in course_notebooks(root):
        assert f"file: {path.parent.name}/{path.stem}" in toc
