"""launchlab.devicegraphs and lab 06's checker plumbing: feature checks, results from child processes, references."""

import pytest

from launchlab import child, devicegraphs
from launchlab.chapters.ch06 import checkers as ch06
from launchlab.checking import NEEDS_GPU, CheckFailed


def test_feature_check_names_the_driver_needed_and_what_to_do():
    assert devicegraphs.version_text(12040) == "12.4"
    assert devicegraphs.missing("conditional nodes", 13000) is None
    old = devicegraphs.missing("conditional nodes", 12030)
    assert "12.4" in old and "12.3" in old and "Update the NVIDIA driver" in old
    assert "no CUDA driver" in devicegraphs.missing("device graph launch", 0)


def test_a_missing_feature_is_one_line_not_a_traceback(monkeypatch):
    monkeypatch.setattr(devicegraphs, "driver_version", lambda: 12020)
    with pytest.raises(devicegraphs.FeatureMissing) as caught:
        devicegraphs.require("conditional nodes")
    (line,) = caught.value._render_traceback_()
    assert line.startswith("[skipped] conditional nodes needs a CUDA 12.4 driver")


@pytest.mark.parametrize("lines, timed_out, message", [
    (["RESULT {\"error\": \"your source did not compile\"}"], False, "did not compile"),
    (["Traceback", "Something broke"], False, "child process running your code failed: Traceback\nSomething broke"),
    ([], True, "did not finish within"),
])
def test_child_results_and_failures_become_check_messages(monkeypatch, lines, timed_out, message):
    ran = child.ChildRun(None if timed_out else 1, 1.0, timed_out, lines)
    monkeypatch.setattr(child, "run_python", lambda script, **kwargs: ran)
    with pytest.raises(CheckFailed, match=message):
        ch06._in_child("anything()")


def test_child_result_is_parsed(monkeypatch):
    ran = child.ChildRun(0, 1.0, False, ["compiling", "RESULT {\"cases\": [1, 2]}"])
    monkeypatch.setattr(child, "run_python", lambda script, **kwargs: ran)
    assert ch06._in_child("anything()") == {"cases": [1, 2]}


def test_halving_reference_counts_until_below_threshold():
    count, x = ch06.halvings([3.0, -1.0], 1.0)
    assert count == 2 and list(x) == [0.75, -0.25]
    assert ch06.halvings([0.5], 1.0)[0] == 1  # the body always runs once
    assert ch06.halvings([1e30], 1.0)[0] == ch06.MAX_COUNT  # the fuse


def test_lab06_checkers_fail_clearly_without_a_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; tests/test_lab_checkers.py runs the real checks")
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = ch06.check_scheduler(lambda: "")
    assert not verdict and NEEDS_GPU in verdict.detail
