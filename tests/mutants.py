"""The mutation suite's plumbing: plausible answers to an exercise, each judged by its checker, tabulated.

An answer is right or wrong by construction; the suite fails when a checker passes a wrong answer (a mutant
survives) or fails a right one. `tests/conftest.py` prints the table at the end of the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from launchlab import course

# The kinds of wrong answer every exercise is tried with (the course model's, and "right").
KINDS = (*course.MISTAKE_KINDS, "right")


@dataclass(frozen=True)
class Answer:
    """One plausible answer to an exercise: what a learner might write, and whether it is right."""

    name: str
    kind: str
    fn: Callable

    @property
    def right(self) -> bool:
        return self.kind == "right"


TABLE: list[dict] = []  # one row per exercise judged in this run


def without_cuda(checker: Callable, fn: Callable):
    """The checker's verdict with CUDA hidden from it: the part of a cpu-partial exercise a CPU judges, the same on
    a GPU machine (a `call=` for `suite` and `judge`)."""
    import torch

    available = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        return checker(fn)
    finally:
        torch.cuda.is_available = available


@dataclass(frozen=True)
class Suite:
    """The planted answers to one exercise and how its checker is called on them."""

    lab: str
    number: int
    checker: Callable
    answers: list[Answer]
    call: Callable | None = None
    part: str = ""


SUITES: list[Suite] = []  # every suite declared at a test module's top level, in import order

# Verdicts the one-process test (tests/test_one_process.py, which the GPU tier's serial phase runs first) gave,
# per (lab, exercise, part, answer), wrong answers' and right ones': `judge` in the same process reuses them
# instead of judging each answer again. Untimed suites run in the parallel phase, in other processes, and are
# judged there anew.
JUDGED: dict[tuple[str, int, str, str], list] = {}


def judged_before(lab: str, number: int, part: str, answer: Answer) -> list:
    """The verdicts this process already gave `answer` in the one-process test: none when a seed or a number of
    trials is forced (a replay must judge anew), and none that only says the GPU was left broken."""
    if os.environ.get("LAUNCHLAB_CHECK_SEED") or os.environ.get("LAUNCHLAB_CHECK_TRIALS"):
        return []
    return [v for v in JUDGED.get((lab, number, part, answer.name), []) if not v.restart]


def suite(lab: str, number: int, checker: Callable, answers: list[Answer], call: Callable | None = None,
          part: str = "") -> Suite:
    """Declare the answers to exercise `number` of lab `lab` (at a test module's top level), so that the
    one-process test can judge every lab's wrong answers before its right ones; return the suite."""
    declared = Suite(lab, number, checker, answers, call, part)
    SUITES.append(declared)
    return declared


def undeclared(lab: str, number: int, answers: list[Answer]) -> list[str]:
    """The wrong answers that exercise `number` of chapter `lab` does not declare as a mistake of that kind."""
    declared = {m.name: m.kind for m in course.chapter(lab).exercise(number).mistakes}
    return [f"{a.name} ({a.kind})" for a in answers if not a.right and declared.get(a.name) != a.kind]


def judge(lab: str, number: int, checker: Callable, answers: list[Answer], call: Callable | None = None,
          trials: int = 1, part: str = "") -> list[str]:
    """Run `checker` on every answer to exercise `number` of lab `lab` ('04') `trials` times (through
    `call(checker, fn)` when given); return the wrong verdicts: a right answer must pass every trial, a mutant
    must fail every trial, and every mutant must be a mistake the chapter declares (launchlab/chapters/chNN)."""
    assert {a.kind for a in answers} <= set(KINDS), [a.kind for a in answers if a.kind not in KINDS]
    missing = undeclared(lab, number, answers)
    assert not missing, (f"lab {lab} exercise {number}: wrong answers not declared as mistakes in "
                         f"launchlab/chapters/ch{lab}/chapter.toml: {', '.join(missing)}")
    exercise = f"lab {lab}, {course.chapter(lab).exercise(number).heading.lower()}" + (f" ({part})" if part else "")
    wrong, caught, mutants = [], 0, 0
    # Wrong answers first, in one process: a right answer judged after them also shows a checker or a mistake
    # that leaves the GPU, a stream, a capture or a mode in a bad state (as a learner's kernel would meet it).
    for answer in sorted(answers, key=lambda a: a.right):
        verdicts = judged_before(lab, number, part, answer)[:trials]
        verdicts += [call(checker, answer.fn) if call else checker(answer.fn) for _ in range(trials - len(verdicts))]
        if answer.right:
            wrong += [f"{answer.name} (right, {answer.kind}) failed: {v.detail}" for v in verdicts if not v][:1]
        else:
            mutants += 1
            survived = [v for v in verdicts if v]
            if survived:
                wrong.append(f"{answer.name} ({answer.kind}) survived {len(survived)} of {trials}: "
                             f"{survived[0].detail}")
            else:
                caught += 1
    TABLE.append({"exercise": exercise, "mutants": mutants, "caught": caught,
                  "right": sum(a.right for a in answers), "wrong verdicts": len(wrong)})
    return wrong
