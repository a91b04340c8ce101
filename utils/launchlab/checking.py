"""The checker framework every exercise ends with: `exercise`, `Verdict`, value checks and capture helpers.

A checker is a function decorated with `exercise(name, hint)` whose body returns a detail line on success
or raises `CheckFailed(detail)`. The chapter checkers live in `launchlab.checkers`; a lab reaches them only
through `launchlab.checkers.for_lab`, which hands out the `check_*` functions and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .env import strict

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"


class CheckFailed(AssertionError):
    """Raised by a checker's body to fail with a message; raised to the caller under LAUNCHLAB_STRICT=1."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one checker call."""

    exercise: str
    passed: bool
    detail: str

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """Already printed by the checker; show nothing more in a notebook."""


def exercise(name: str, hint: str) -> Callable[[Callable[..., str]], Callable[..., Verdict]]:
    """Make a checker: its body returns a detail string on success or raises CheckFailed(detail).

    The wrapped checker prints PASS or FAIL with the hint, never a traceback: a stub
    (NotImplementedError) or any error in the learner's code is a FAIL that says what happened.
    """

    def wrap(body: Callable[..., str]) -> Callable[..., Verdict]:
        @functools.wraps(body)
        def checker(*args, **kwargs) -> Verdict:
            try:
                verdict = Verdict(name, True, body(*args, **kwargs) or "")
            except NotImplementedError as exc:
                verdict = Verdict(name, False, f"not implemented yet ({exc})")
            except CheckFailed as exc:
                verdict = Verdict(name, False, str(exc))
            except Exception as exc:  # the learner's code failed: say what, without a traceback
                verdict = Verdict(name, False, f"your code raised {type(exc).__name__}: {exc}")
            if verdict.passed:
                print(f"{PASS_MARK} [{name}] {verdict.detail}")
            else:
                print(f"{FAIL_MARK} [{name}] {verdict.detail}\n  Hint: {hint}")
                if strict():
                    raise CheckFailed(f"{name}: {verdict.detail}")
            return verdict

        checker.exercise_name = name
        return checker

    return wrap


# ---- values a learner returns --------------------------------------------------------------------------------


def number(value: object, what: str, unit: str = "", positive: bool = True) -> float:
    """`value` as a finite float (positive unless told otherwise), or CheckFailed saying what is wrong with it."""
    expected = f"a number{f' of {unit}' if unit else ''}"
    if value is None:
        raise CheckFailed(f"{what} is None: did the function forget to `return` {expected}?")
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise CheckFailed(f"{what} is {value!r} ({type(value).__name__}); return {expected}")
    if hasattr(value, "numel") and value.numel() != 1:  # a tensor or array of several values
        raise CheckFailed(f"{what} has {value.numel()} values; return one number")
    result = float(value)
    if not math.isfinite(result):
        raise CheckFailed(f"{what} is {result}: a measurement that went wrong (no samples? a division by zero?)")
    if positive and result <= 0:
        raise CheckFailed(f"{what} is {result:g}; {'a duration' if unit else 'it'} must be positive")
    return result


def within(measured: float, expected: float, tolerance: float, what: str) -> str:
    """A detail line if measured is within tolerance (a fraction) of expected, else raise CheckFailed."""
    measured = number(measured, what, positive=False)
    error = abs(measured - expected) / expected
    line = f"{what}: yours {measured:.4g}, expected {expected:.4g} ({error:.1%} off, {tolerance:.0%} allowed)"
    if not error <= tolerance:
        raise CheckFailed(line)
    return line


def within_factor(yours: float, expected: float, factor: float, what: str) -> str:
    """A detail line if yours is within `factor` times expected either way, else raise CheckFailed."""
    yours = number(yours, what)
    ratio = yours / expected
    line = f"{what}: yours {yours:,.4g}, the checker's {expected:,.4g} (ratio {ratio:.2f}, {1 / factor:g} to {factor:g} allowed)"
    if not 1 / factor <= ratio <= factor:
        raise CheckFailed(line)
    return line


# ---- graphs a learner captures -------------------------------------------------------------------------------


def require_cuda(what: str) -> None:
    """Fail the check with a clear message when this machine has no CUDA GPU for `what`."""
    import torch

    if not torch.cuda.is_available():
        raise CheckFailed(f"{what} needs a CUDA GPU; run this cell on a machine with one")


def graph_and_output(captured: object) -> tuple:
    """Unpack a learner's (torch.cuda.CUDAGraph, output tensor) answer, or fail saying what was expected."""
    import torch

    if not (isinstance(captured, tuple) and len(captured) == 2 and isinstance(captured[0], torch.cuda.CUDAGraph)):
        raise CheckFailed("return (graph, out): the torch.cuda.CUDAGraph and the output tensor that replays write, "
                          f"not {type(captured).__name__}")
    return captured


def warm_up_then_capture(work: Callable[[], Any]) -> tuple[Any, Any]:
    """(graph, output): `work` run once on a side stream (lazy initialisation, allocator warm-up), then captured."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = work()
    return graph, out


@contextlib.contextmanager
def counting_graph_calls() -> Iterator[dict[str, int]]:
    """Count CUDAGraph captures and replays made inside the block."""
    import torch

    counts = {"captures": 0, "replays": 0}
    begin, replay = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay

    def counting_begin(self, *args, **kwargs):
        counts["captures"] += 1
        return begin(self, *args, **kwargs)

    def counting_replay(self, *args, **kwargs):
        counts["replays"] += 1
        return replay(self, *args, **kwargs)

    torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay = counting_begin, counting_replay
    try:
        yield counts
    finally:
        torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay = begin, replay
