"""Claims print and store their verdict, raise only under LAUNCHLAB_STRICT=1; metrics are recorded."""

import json

import pytest

from launchlab import course, results
from launchlab import report as report_module
from launchlab.claims import ClaimFailed, ClaimRefused, Comparison, Side, agrees, claim, higher, lower
from launchlab.report import Report


@pytest.fixture(autouse=True)
def declared_anything(monkeypatch):
    """These tests are about storing and printing: every name counts as declared, with the unit it is given."""
    monkeypatch.setattr(course, "declared_claim", lambda name: (None, course.Claim(name)))
    monkeypatch.setattr(results, "declared_figure",
                        lambda name, unit=None: course.Figure(name, unit or "us", "lower", "a test figure"))


def test_claim_that_holds_is_printed_and_stored_with_both_sides(results_dir, capsys, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    held = claim("graphs are faster", lower(("graph", 2.0), ("eager", 7.0), by=3, config="the same 10 kernels, warm"),
                 why="replayed 100 times")
    assert held is True
    out = capsys.readouterr().out
    assert "CLAIM HELD  graphs are faster: graph 2 against eager 7 (rule: ours < baseline / 3; baseline: the same " \
           "10 kernels, warm); replayed 100 times (margin 17%)" in out
    entry = results.load_run()["claims"]["graphs are faster"]
    assert entry["ours"] == {"label": "graph", "value": 2.0} and entry["rule"] == "ours < baseline / 3"
    assert entry["baseline"] == {"label": "eager", "value": 7.0, "config": "the same 10 kernels, warm"}
    assert entry["held"] is True and entry["margin"] == round(7 / 6 - 1, 4)


def test_failed_claim_explains_without_raising_for_a_learner(results_dir, capsys, monkeypatch):
    monkeypatch.delenv("LAUNCHLAB_STRICT", raising=False)
    assert claim("graphs are faster", lower(("graph", 9.0), ("eager", 7.0))) is False
    out = capsys.readouterr().out
    assert "DID NOT HOLD" in out and "graph 9 against eager 7" in out and "not an error in your work" in out
    assert results.load_run()["claims"]["graphs are faster"]["held"] is False


def test_a_rule_that_holds_both_ways_round_is_refused():
    with pytest.raises(ClaimRefused, match="sides swapped"):
        lower(("floor", 4.5), ("CuPy", 4.4), by=0.6)
    with pytest.raises(ClaimRefused, match="tighter than"):
        agrees(("events", 1.0), ("spin", 1.0), within=0.9)
    swapped = Comparison(Side("a", 1.0), Side("b", 1.0), "r", True, 0.5, True)
    with pytest.raises(ClaimRefused, match="cannot fail"):
        claim("graphs are faster", swapped)


def test_a_claim_without_sides_needs_a_reason_and_the_old_form_is_refused(results_dir, capsys):
    with pytest.raises(ClaimRefused, match="reason"):
        claim("outputs are equal", holds=True)
    with pytest.raises(ClaimRefused, match="old claim"):
        claim("outputs are equal", True, "why")
    assert claim("outputs are equal", holds=True, reason="an exact comparison of two tensors")
    assert "no two sides: an exact comparison" in capsys.readouterr().out


def test_comparisons_join_to_the_narrower_margin_and_name_a_narrow_one(results_dir, capsys, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    assert claim("a coin flip", higher(("rate", 10.4), ("floor", 10.0)), lower(("t", 1.0), ("u", 3.0)))
    assert "HELD NARROWLY" in capsys.readouterr().out
    entry = results.load_run()["claims"]["a coin flip"]
    assert entry["margin"] == 0.04 and entry["more"][0]["rule"] == "ours < baseline"
    assert Report(gpu=None, claims=results.load_run()["claims"]).narrow_claims(0.10) == {"a coin flip": 0.04}


def test_agreement_and_bad_values():
    assert agrees(("events", 10.3), ("spin timer", 10.0), within=0.05).held
    assert not agrees(("events", 13.0), ("spin timer", 10.0), within=0.05).held
    assert not lower(("x", float("nan")), ("y", 1.0)).held and not higher(("x", float("inf")), ("y", 1.0)).held
    assert higher(("tail", 1.0), ("p1 to median", 0.0), by=3).held, "a zero baseline: the rule holds as written"
    assert not lower(("x", 2.0), ("y", 0.0)).held
    assert not lower(("x", 1.0), ("y", 1.0)).held, "equal is not lower"


def test_failed_claim_raises_under_strict(results_dir, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    from launchlab.env import strict

    assert strict()
    with pytest.raises(ClaimFailed, match="graphs are faster"):
        claim("graphs are faster", lower(("graph", 9.0), ("eager", 7.0)))


def test_record_stores_value_and_unit(results_dir):
    assert results.record("empty_launch_enqueue_us", 6.25, "us") == 6.25
    results.record("first_call_compile_ms", 120, "ms")
    run = json.loads(results.run_path().read_text())
    assert run["metrics"] == {"empty_launch_enqueue_us": 6.25, "first_call_compile_ms": 120.0}
    assert run["units"]["first_call_compile_ms"] == "ms"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_record_refuses_non_finite_values(results_dir, bad):
    with pytest.raises(ValueError, match="check the measurement"):
        results.record("broken", bad, "us")


def write_reports(root, reports: dict[str, dict]) -> None:
    (root / "reports" / "gpu").mkdir(parents=True)
    for slug, report in reports.items():
        (root / "reports" / "gpu" / f"{slug}.json").write_text(json.dumps(report))


H100 = {"gpu": "NVIDIA H100 80GB HBM3", "metrics": {"empty_launch_enqueue_us": 6.5, "only_h100_us": 1.0},
        "units": {"empty_launch_enqueue_us": "us", "only_h100_us": "us"}, "notebooks": {}, "claims": {}}
H200 = {"gpu": "NVIDIA H200", "metrics": {"empty_launch_enqueue_us": 5.5, "graphed_allreduce_speedup": 4.1},
        "units": {"graphed_allreduce_speedup": "x"}, "notebooks": {}, "claims": {}}


def test_reference_prefers_this_gpus_report_then_any_report_that_holds_the_figure(tmp_path, monkeypatch):
    write_reports(tmp_path, {"nvidia-h100-80gb-hbm3": H100, "nvidia-h200": H200})
    monkeypatch.setenv("LAUNCHLAB_ROOT", str(tmp_path))
    monkeypatch.setattr(report_module, "gpu_slug", lambda: "nvidia-h200")
    mine = results.reference("empty_launch_enqueue_us")
    assert (mine.value, mine.gpu, mine.label) == (5.5, "NVIDIA H200", "reference (H200)")
    other = results.reference("only_h100_us")  # not in this GPU's report: found in the H100's, and named
    assert (other.value, other.unit, other.label) == (1.0, "us", "reference (H100)")
    assert results.reference("missing_metric") is None
    monkeypatch.setattr(report_module, "gpu_slug", lambda: "cpu")  # no report of its own: the first that holds it
    assert results.reference("graphed_allreduce_speedup").label == "reference (H200)"


def test_compare_prints_yours_beside_the_reference_naming_its_gpu(tmp_path, monkeypatch, capsys):
    write_reports(tmp_path, {"nvidia-h100-80gb-hbm3": H100, "nvidia-h200": H200})
    monkeypatch.setenv("LAUNCHLAB_ROOT", str(tmp_path))
    monkeypatch.setattr(report_module, "gpu_slug", lambda: "cpu")
    units = {"graphed_allreduce_speedup": "x"}
    monkeypatch.setattr(results, "declared_figure",
                        lambda name, unit=None: course.Figure(name, units.get(name, "us"), "lower", "a test figure"))
    rows = results.compare(["only_h100_us", "graphed_allreduce_speedup", "missing_metric"],
                           yours={"only_h100_us": 2.0, "graphed_allreduce_speedup": 4.1})
    out = capsys.readouterr().out
    assert [r["reference_gpu"] for r in rows] == ["H100", "H200", None]
    assert rows[0]["ratio"] == 2.0 and rows[1]["unit"] == "x"
    assert "none" not in out.lower().replace("no report holds it", "")
    assert "no report holds it" in out.splitlines()[-1]
    label, values = results.reference_series(["only_h100_us", "graphed_allreduce_speedup"])
    assert label == "reference (H100, H200)" and values == [1.0, 4.1]


@pytest.mark.parametrize("name, short", [("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"),
                                         ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA A100-SXM4-80GB", "A100"),
                                         (None, "no GPU")])
def test_short_gpu_names(name, short):
    assert results.short_gpu(name) == short


def test_a_merged_report_keeps_earlier_entries_and_units():
    first = Report(gpu="G").merged({"notebooks/00.ipynb": {"seconds": 1.0}},
                                   {"metrics": {"a_us": 1.0}, "units": {"a_us": "us"}, "claims": {"c1": {"held": True}}})
    report = first.merged({"notebooks/01.ipynb": {"seconds": 2.0}}, {"metrics": {"b_ms": 2.0}, "units": {"b_ms": "ms"}})
    assert set(report.notebooks) == {"notebooks/00.ipynb", "notebooks/01.ipynb"}
    assert report.metrics == {"a_us": 1.0, "b_ms": 2.0} and report.units == {"a_us": "us", "b_ms": "ms"}
    assert report.claims == {"c1": {"held": True}}
    again = report.merged({"notebooks/00.ipynb": {"seconds": 3.0}, "notebooks/01.ipynb": {}},
                          {"metrics": {"c_us": 3.0}, "units": {"c_us": "us"}})
    assert again.metrics == {"c_us": 3.0} and again.claims == {}, "a full re-run replaces the report"


def test_a_merge_drops_names_no_chapter_declares_any_more():
    old = Report(gpu="G", notebooks={"notebooks/00.ipynb": {}, "notebooks/01.ipynb": {}},
                 metrics={"old_us": 1.0, "kept_us": 2.0}, units={"old_us": "us", "kept_us": "us"},
                 claims={"old name": {"held": False}, "kept": {"held": True}})
    report = old.merged({"notebooks/00.ipynb": {}}, {"metrics": {"new_us": 3.0}, "units": {"new_us": "us"},
                                                    "claims": {"new name": {"held": True}}},
                        declared={"kept_us", "new_us", "kept", "new name"})
    assert report.claims == {"kept": {"held": True}, "new name": {"held": True}}
    assert report.metrics == {"kept_us": 2.0, "new_us": 3.0} and set(report.units) == {"kept_us", "new_us"}


def test_a_rerun_notebook_drops_what_it_no_longer_records_and_unknown_notebooks_go():
    old = Report(gpu="G", notebooks={"notebooks/00.ipynb": {"metrics": ["old_us"], "claims": ["old"]},
                                     "notebooks/01.ipynb": {"metrics": ["kept_us"], "claims": []},
                                     "notebooks/99_gone.ipynb": {}},
                 metrics={"old_us": 1.0, "kept_us": 2.0}, claims={"old": {"held": True}})
    report = old.merged({"notebooks/00.ipynb": {"metrics": ["new_us"], "claims": []}},
                        {"metrics": {"new_us": 3.0}}, known_paths={"notebooks/00.ipynb", "notebooks/01.ipynb"})
    assert report.metrics == {"kept_us": 2.0, "new_us": 3.0} and report.claims == {}
    assert set(report.notebooks) == {"notebooks/00.ipynb", "notebooks/01.ipynb"}


def test_a_report_round_trips_and_its_schema_refuses_strangers(tmp_path):
    from launchlab.report import ReportError, validate

    report = Report(gpu="G", host_cpu="a CPU", notebooks={"notebooks/00.ipynb": {
        "source_sha256": "0" * 64, "cells": 1, "failed": 0, "skipped": 0, "seconds": 1.0}}, metrics={"a_us": 1.0})
    path = report.write(tmp_path / "r.json")
    assert Report.load(path) == report
    assert validate({**report.to_dict(), "extra": 1}) == ["unknown key 'extra'"]
    bad = report.to_dict()
    bad["metrics"] = {"a_us": float("nan")}
    assert any("not a finite number" in p for p in validate(bad))
    with pytest.raises(ReportError, match="r2.json"):
        (tmp_path / "r2.json").write_text('{"gpu": "G"}')
        Report.load(tmp_path / "r2.json")


@pytest.mark.parametrize("path", sorted(report_module.reports_dir().glob("*.json")), ids=lambda p: p.name)
def test_every_figure_and_claim_in_a_committed_report_belongs_to_a_notebook_run(path):
    """A figure no notebook's entry lists is left over from a run whose code no longer records it: it would sit
    beside the current figures as if measured with them (the figures page and the compare tables read it)."""
    report = Report.load(path)
    metrics = {name for entry in report.notebooks.values() for name in entry.get("metrics", [])}
    claims = {name for entry in report.notebooks.values() for name in entry.get("claims", [])}
    assert not set(report.metrics) - metrics, "figures no notebook entry lists"
    assert not set(report.units) - metrics, "units of figures no notebook entry lists"
    assert not set(report.claims) - claims, "claims no notebook entry lists"
