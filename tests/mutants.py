"""The mutation suite's plumbing: plausible answers to an exercise, each judged by its checker, tabulated.

An answer is right or wrong by construction; the suite fails when a checker passes a wrong answer (a mutant
survives) or fails a right one. `tests/conftest.py` prints the table at the end of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The kinds of wrong answer every exercise is tried with (CONTRIBUTING.md, section 5).
KINDS = ("classic", "unit", "method", "hard-coded", "bad value", "structure", "right")


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


def judge(exercise: str, checker: Callable, answers: list[Answer], call: Callable | None = None,
          trials: int = 1) -> list[str]:
    """Run `checker` on every answer `trials` times (through `call(checker, fn)` when given); return the wrong
    verdicts: a right answer must pass every trial, a mutant must fail every trial."""
    assert {a.kind for a in answers} <= set(KINDS), [a.kind for a in answers if a.kind not in KINDS]
    wrong, caught, mutants = [], 0, 0
    for answer in answers:
        verdicts = [call(checker, answer.fn) if call else checker(answer.fn) for _ in range(trials)]
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
