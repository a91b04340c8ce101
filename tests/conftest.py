"""Shared fixtures for the course's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    """The course checkout."""
    return ROOT


@pytest.fixture
def results_dir(tmp_path, monkeypatch) -> Path:
    """A private results directory, so tests never touch the learner's runs/."""
    monkeypatch.setenv("LAUNCHLAB_RESULTS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def _session_runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(autouse=True)
def _verdicts_stay_out_of_runs(monkeypatch, _session_runs):
    """Every checker call stores its verdict in this GPU's run: unless LAUNCHLAB_RESULTS_DIR is set, the tests'
    go to the session's own folder, never the learner's runs/ (`results_dir` gives a test one of its own)."""
    if not os.environ.get("LAUNCHLAB_RESULTS_DIR"):
        monkeypatch.setenv("LAUNCHLAB_RESULTS_DIR", str(_session_runs))


@pytest.fixture
def lenient_checkers(monkeypatch, capsys, results_dir):
    """Checkers return their verdict instead of raising, judge once, and their printing is swallowed; the verdicts
    they store go to a private run, not the learner's runs/."""
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.delenv("LAUNCHLAB_CHECK_TRIALS", raising=False)
    yield
    capsys.readouterr()


def pytest_collection_modifyitems(items):
    """A GPU test of an exercise (marked `exercise(lab, number)`) whose checker times nothing, as the course model
    declares, may share the GPU: it is marked `concurrent`, and the GPU tier runs it in parallel with the labs. A
    test that names no exercise stays in the serial phase, the safe side, unless it marks itself `concurrent` (the
    no-answer tests do: their candidates share the GPU in either phase)."""
    from launchlab import course

    # The one-process test first: every lab's wrong answers then its right ones, whose verdicts the suites' own
    # tests in the same process then reuse (tests/mutants.py, JUDGED) rather than judging each answer twice.
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_one_process.py"))
    for item in items:
        marker = item.get_closest_marker("exercise")
        lab = getattr(getattr(item, "callspec", None), "params", {}).get("lab")
        if item.nodeid.startswith("tests/test_one_process.py") and lab is not None:
            # A lab whose exercises all time nothing is judged in one process in the parallel phase too.
            if not any(exercise.timed for exercise in course.chapter(lab).exercises):
                item.add_marker(pytest.mark.concurrent)
            continue
        if marker is None:
            continue
        exercise = course.chapter(marker.args[0]).exercise(int(marker.args[1]))
        if item.get_closest_marker("gpu") is not None and not exercise.timed:
            item.add_marker(pytest.mark.concurrent)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so fixtures can see whether the test failed; the mutation
    table's rows a test added travel on its report (a pytest-xdist worker's rows reach the controller so)."""
    from mutants import TABLE

    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.when == "call":
        start = getattr(item, "_table_start", len(TABLE))
        report.user_properties.append(("mutation_rows", TABLE[start:]))
    return report


def pytest_runtest_setup(item):
    from mutants import TABLE

    item._table_start = len(TABLE)


def pytest_terminal_summary(terminalreporter):
    """The mutation suite's table: every exercise judged in this run, its wrong answers and how many were caught."""
    TABLE = [row for reports in terminalreporter.stats.values() for report in reports
             for name, rows in getattr(report, "user_properties", []) if name == "mutation_rows" for row in rows]
    if not TABLE:
        return
    width = max(len(r["exercise"]) for r in TABLE)
    terminalreporter.write_sep("-", "mutation suite: plausible wrong answers each checker caught")
    terminalreporter.write_line(f"{'exercise':{width}}  mutants  caught  right answers  wrong verdicts")
    for r in TABLE:
        terminalreporter.write_line(f"{r['exercise']:{width}}  {r['mutants']:7d}  {r['caught']:6d}  "
                                    f"{r['right']:13d}  {r['wrong verdicts']:14d}")
    terminalreporter.write_line(f"{'in all':{width}}  {sum(r['mutants'] for r in TABLE):7d}  "
                                f"{sum(r['caught'] for r in TABLE):6d}  {sum(r['right'] for r in TABLE):13d}  "
                                f"{sum(r['wrong verdicts'] for r in TABLE):14d}")
