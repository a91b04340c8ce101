"""Claims print and store their verdict, raise only under LAUNCHLAB_STRICT=1; metrics are recorded."""

import json

import pytest

from launchlab import claims, results
from launchlab.claims import ClaimFailed, claim


def test_claim_that_holds_is_printed_and_stored(results_dir, capsys, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    assert claim("graphs are faster", 2.0 < 7.0, "2.0 us against 7.0 us") is True
    assert "CLAIM HELD  graphs are faster: 2.0 us against 7.0 us" in capsys.readouterr().out
    assert results.load_run()["claims"] == {"graphs are faster": True}


def test_failed_claim_explains_without_raising_for_a_learner(results_dir, capsys, monkeypatch):
    monkeypatch.delenv("LAUNCHLAB_STRICT", raising=False)
    assert claim("graphs are faster", False, "9 us against 7 us") is False
    out = capsys.readouterr().out
    assert "DID NOT HOLD" in out and "9 us against 7 us" in out and "not an error in your work" in out
    assert results.load_run()["claims"]["graphs are faster"] is False


def test_failed_claim_raises_under_strict(results_dir, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    assert claims.strict()
    with pytest.raises(ClaimFailed, match="graphs are faster"):
        claim("graphs are faster", False, "9 us against 7 us")


def test_record_stores_value_and_unit(results_dir):
    assert results.record("empty_launch_enqueue_us", 6.25, "us") == 6.25
    results.record("first_call_compile_ms", 120, "ms")
    run = json.loads(results.run_path().read_text())
    assert run["metrics"] == {"empty_launch_enqueue_us": 6.25, "first_call_compile_ms": 120.0}
    assert run["units"]["first_call_compile_ms"] == "ms"


def test_record_refuses_nan(results_dir):
    with pytest.raises(ValueError, match="NaN"):
        results.record("broken", float("nan"), "us")


def test_reference_reads_committed_report(tmp_path, monkeypatch):
    (tmp_path / "reports" / "gpu").mkdir(parents=True)
    report = {"gpu": "NVIDIA H100 80GB HBM3", "metrics": {"empty_launch_enqueue_us": 6.5}}
    (tmp_path / "reports" / "gpu" / "nvidia-h100-80gb-hbm3.json").write_text(json.dumps(report))
    monkeypatch.setenv("LAUNCHLAB_ROOT", str(tmp_path))
    assert results.reference("empty_launch_enqueue_us") == (6.5, "NVIDIA H100 80GB HBM3")
    assert results.reference("missing_metric") == (None, "NVIDIA H100 80GB HBM3")
