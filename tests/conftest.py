"""Shared fixtures for the course's tests."""

from __future__ import annotations

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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so fixtures can see whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
