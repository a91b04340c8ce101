"""Every figure across GPUs: a column per report and per learner run, a section and a chart per chapter."""

import json
import re
from pathlib import Path

import pytest

from launchlab import course
from launchlab_tools import figures, site_toc

IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
ROOT = Path(__file__).resolve().parents[1]
H100, H200, MINE = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA GeForce RTX 4090 (your run)"


def sections(text: str) -> dict[str, str]:
    """{'09 · Past graphs: ...': its markdown} for every '## ' section of the page."""
    return {part.split("\n", 1)[0]: part for part in text.split("\n## ")[1:]}


def section(text: str, prefix: str) -> str:
    found = [body for heading, body in sections(text).items() if heading.startswith(prefix)]
    assert len(found) == 1, f"one section '## {prefix}...' expected, found {len(found)}"
    return found[0]


def table(body: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header cells, {metric: row cells}) of the section's markdown table."""
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in body.splitlines() if line.startswith("|")]
    return rows[0], {re.search(r"`([^`]+)`$", row[0]).group(1): row for row in rows[2:]}


def cell(body: str, metric: str, column: str) -> str:
    header, rows = table(body)
    return rows[metric][header.index(column)]


@pytest.fixture(scope="module")
def reference_page(tmp_path_factory):
    """The page from the committed reports alone (read-only), no learner run."""
    path = figures.write_page(tmp_path_factory.mktemp("page"), ROOT, runs=[])
    return path, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def page_with_run(tmp_path_factory):
    """The page with one learner run: a figure the reports hold and one they do not."""
    tmp = tmp_path_factory.mktemp("with_run")
    run = tmp / "nvidia-geforce-rtx-4090.json"
    run.write_text(json.dumps({"gpu": "NVIDIA GeForce RTX 4090",
                               "metrics": {"graph_us_per_stage": 2.5, "zz_figure_no_notebook_lists": 42.0},
                               "units": {"graph_us_per_stage": "us", "zz_figure_no_notebook_lists": "ms"}}))
    path = figures.write_page(tmp / "page", ROOT, runs=[run])
    return path, path.read_text(encoding="utf-8")


def test_a_column_per_report_in_file_name_order(reference_page):
    _, text = reference_page
    header, _ = table(section(text, "09 "))
    assert header[:2] == ["figure", "unit"]
    assert H100 in header and H200 in header
    assert header.index(H100) < header.index(H200)  # nvidia-h100-... sorts before nvidia-h200.json
    assert text.startswith("# Every figure across GPUs\n")
    assert "(your run)" not in text


def test_chapter_09_holds_its_figures_measured_on_h100(reference_page):
    _, text = reference_page
    body = section(text, "09 · Past graphs")
    value = cell(body, "graph_us_per_stage", H100)
    assert 0 < float(value.replace(",", "")) < 1000, value
    assert cell(body, "graph_us_per_stage", "unit") == "us"


def test_one_small_chart_per_chapter_section(reference_page):
    path, text = reference_page
    linked = []
    for heading, body in sections(text).items():
        images = IMAGE.findall(body)
        assert len(images) == 1 or (not images and "No chart" in body), heading
        linked += images
    assert "figures_09.png" in linked
    for name in linked:
        png = path.parent / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert 0 < png.stat().st_size < 60_000, (name, png.stat().st_size)
    assert sorted(p.name for p in path.parent.glob("*.png")) == sorted(linked)  # nothing stray or stale


def test_a_learner_run_gains_a_column_and_its_unknown_figure_lands_in_other(page_with_run):
    _, text = page_with_run
    ch09 = section(text, "09 ")
    assert table(ch09)[0][-1] == MINE
    assert cell(ch09, "graph_us_per_stage", MINE) == "2.5"
    assert cell(ch09, "fused_us_per_stage", MINE) == "–"  # measured on H100, not in this run
    other = section(text, "Other figures")
    assert cell(other, "zz_figure_no_notebook_lists", MINE) == "42"
    assert cell(other, "zz_figure_no_notebook_lists", H100) == "–"
    assert cell(other, "zz_figure_no_notebook_lists", "unit") == "ms"
    assert "zz_figure_no_notebook_lists" not in ch09
    assert "your own runs from `runs/`." in text


def test_values_read_to_four_significant_figures():
    assert figures.figure(None) == "–"
    assert figures.figure(1.0486400127) == "1.049"
    assert figures.figure(0.1222) == "0.1222"
    assert figures.figure(8.0) == "8"
    assert figures.figure(0.0) == "0"
    assert figures.figure(2197.9) == "2,198"
    assert figures.figure(167772160.0) == "167,800,000"
    assert figures.figure(-12345.0) == "-12,340"


X_US, Y_US = (f.name for f in course.chapter("01").figures[:2])
ENTRY = {"source_sha256": "0" * 64, "cells": 1, "failed": 0, "skipped": 0, "seconds": 1.0}


def small_root(tmp_path):
    """A course with two tiny reports: two of chapter 01's figures, and one figure no chapter declares."""
    gpu = tmp_path / "reports" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "a.json").write_text(json.dumps({
        "gpu": "GPU A", "metrics": {X_US: 2.0, Y_US: 0.0}, "units": {X_US: "us"}, "claims": {},
        "notebooks": {"notebooks/01_launch.ipynb": ENTRY}}))
    (gpu / "b.json").write_text(json.dumps({
        "gpu": "GPU B", "metrics": {X_US: 4.0, "z": 1.0}, "claims": {}, "notebooks": {"notebooks/08_x.ipynb": ENTRY}}))
    return tmp_path


def test_chapters_come_from_the_model_and_the_output_is_deterministic(tmp_path):
    root = small_root(tmp_path)
    first = figures.write_page(tmp_path / "one", root, runs=[])
    second = figures.write_page(tmp_path / "two", root, runs=[])
    text = first.read_text(encoding="utf-8")
    assert list(sections(text)) == ["01 · " + course.chapter("01").title, "Other figures"]
    assert cell(section(text, "01 "), X_US, "GPU B") == "4"
    assert course.chapter("01").figures[0].description in section(text, "01 ")
    assert "No chart" in section(text, "Other figures")  # GPU A, the first column, lacks z
    assert text == second.read_text(encoding="utf-8")
    assert (tmp_path / "one" / "figures_01.png").read_bytes() == (tmp_path / "two" / "figures_01.png").read_bytes()


def test_default_runs_are_the_gpu_runs_in_runs(tmp_path, results_dir):
    results_dir.mkdir()
    (results_dir / "cpu.json").write_text(json.dumps({"gpu": None, "metrics": {"a": 1.0}}))
    (results_dir / "nvidia-l4.json").write_text(json.dumps({"gpu": "NVIDIA L4", "metrics": {"x_us": 3.0}}))
    (results_dir / "grades.json").write_text(json.dumps([{"notebook": "labs/09.ipynb"}]))   # not a run: left out
    assert figures.learner_runs(tmp_path) == [results_dir / "nvidia-l4.json"]
    cols = figures.columns(small_root(tmp_path), figures.learner_runs(tmp_path))
    assert [c.label for c in cols] == ["GPU A", "GPU B", "NVIDIA L4 (your run)"]


def test_the_published_page_holds_the_reports_only(tmp_path, results_dir):
    results_dir.mkdir()
    (results_dir / "nvidia-l4.json").write_text(json.dumps({"gpu": "NVIDIA L4", "metrics": {X_US: 3.0}}))
    root = small_root(tmp_path)
    assert figures.main([str(tmp_path / "out"), "--root", str(root), "--reference-only"]) == 0
    assert "(your run)" not in (tmp_path / "out" / "index.md").read_text(encoding="utf-8")


def test_main_writes_the_page_and_prints_its_path(tmp_path, capsys):
    root = small_root(tmp_path)
    assert figures.main([str(tmp_path / "out"), "--root", str(root), "--run", str(root / "reports/gpu/b.json")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "index.md")
    assert "GPU B (your run)" in (tmp_path / "out" / "index.md").read_text(encoding="utf-8")


def test_main_without_a_report_or_with_a_missing_run_exits_2(tmp_path, monkeypatch, capsys):
    assert figures.main([str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    assert "no GPU report in" in capsys.readouterr().err
    monkeypatch.setenv("LAUNCHLAB_ROOT", str(tmp_path))
    assert figures.main([str(tmp_path / "out")]) == 2
    assert "no GPU report in" in capsys.readouterr().err
    assert figures.main([str(tmp_path / "out"), "--run", str(tmp_path / "nope.json")]) == 2
    assert "no such run file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        figures.main([])
    assert exit_.value.code == 2
    assert not (tmp_path / "out").exists()


def test_the_site_lists_the_page_after_the_solutions_once_written(tmp_path):
    for folder in ("notebooks", "solutions"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{course.chapter('00').stem}.ipynb").write_text("{}")
    assert "Across GPUs" not in site_toc.toc_text(tmp_path)
    (tmp_path / "across_gpus").mkdir()
    (tmp_path / "across_gpus" / "index.md").write_text("# Every figure across GPUs\n")
    toc = site_toc.toc_text(tmp_path)
    assert toc.index("caption: Solutions") < toc.index("caption: Across GPUs")
    assert toc.endswith("  - caption: Across GPUs\n    chapters:\n      - file: across_gpus/index\n")
