"""Every lab's exercises judged in one process, as a learner's kernel judges them: all of a lab's wrong answers
first, then all its right answers, so a checker or an answer that leaves the GPU, a stream, a capture or the sync
debug mode in a bad state shows up as a right answer that fails.

The answers are the mutation suites' (tests/test_mutants_labNN.py), each declared with `mutants.suite(...)`.
"""

from __future__ import annotations

import importlib

import pytest

import mutants
from launchlab import course
from launchlab.env import gpu_count

# Lab 08's checkers run every answer in ranks of their own, started by torchrun: nothing an answer does reaches
# the learner's process, and judging its suites one answer at a time would start about forty pairs of ranks.
LABS = [ch.number for ch in course.chapters() if ch.exercises and ch.needs.gpus <= 1]


@pytest.fixture
def _not_strict(monkeypatch, capsys, results_dir):
    """Verdicts returned, not raised; each checker judges once; their printing swallowed; a private run."""
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.delenv("LAUNCHLAB_CHECK_TRIALS", raising=False)
    monkeypatch.delenv("LAUNCHLAB_CHECK_SEED", raising=False)
    # A hanging answer is given up on sooner, as the suites' own tests do: right answers need milliseconds.
    for name in ("ch06", "ch09"):
        checkers = importlib.import_module(f"launchlab.chapters.{name}.checkers")
        monkeypatch.setattr(checkers, "GPU_TIMEOUT_S", 3)
        monkeypatch.setattr(checkers, "CHILD_EXIT_S", 2)
    yield
    capsys.readouterr()


def _judged(suite: mutants.Suite, answer: mutants.Answer):
    verdict = suite.call(suite.checker, answer.fn) if suite.call else suite.checker(answer.fn)
    # Kept for the suite's own test in this process (the GPU tier runs this file first): it judges again only
    # the trials beyond this one.
    mutants.JUDGED.setdefault((suite.lab, suite.number, suite.part, answer.name), []).append(verdict)
    return verdict


def _where(suite: mutants.Suite, answer: mutants.Answer) -> str:
    part = f" ({suite.part})" if suite.part else ""
    return f"lab {suite.lab} exercise {suite.number}{part}, {answer.name} ({answer.kind})"


@pytest.mark.gpu
@pytest.mark.parametrize("lab", LABS)
def test_a_labs_wrong_answers_then_its_right_ones_in_one_process(lab, _not_strict):
    if gpu_count() < 1:
        pytest.skip(f"lab {lab} needs a CUDA GPU")
    importlib.import_module(f"test_mutants_lab{lab}")  # its suite(...) declarations register it
    suites = [s for s in mutants.SUITES if s.lab == lab]
    assert suites, f"tests/test_mutants_lab{lab}.py declares no suite(...)"
    wrong = []
    for suite in suites:
        for answer in (a for a in suite.answers if not a.right):
            verdict = _judged(suite, answer)
            if verdict:
                wrong.append(f"{_where(suite, answer)} passed: {verdict.detail}")
    for suite in suites:
        for answer in (a for a in suite.answers if a.right):
            verdict = _judged(suite, answer)
            if not verdict:
                wrong.append(f"{_where(suite, answer)} failed after the wrong answers: {verdict.detail}")
    assert not wrong, "\n".join(wrong)
