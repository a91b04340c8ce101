"""The checker framework every exercise ends with: `exercise`, `Verdict`, value checks and capture helpers.

A checker is a function decorated with `exercise(name, hint)` whose body returns a detail line on success
or raises `CheckFailed(detail)`. The chapter checkers live in `launchlab.checkers`; a lab reaches them only
through `launchlab.checkers.for_lab`, which hands out the `check_*` functions and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .env import strict

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"


class CheckFailed(AssertionError):
    """Raised by a checker's body to fail with a message; raised to the caller under LAUNCHLAB_STRICT=1.

    `hint`, when the checker can tell which mistake it saw, replaces the exercise's general hint.
    """

    def __init__(self, detail: str, hint: str | None = None) -> None:
        super().__init__(detail)
        self.hint = hint


def check_trials() -> int:
    """How many times each checker runs its body: LAUNCHLAB_CHECK_TRIALS (the reference run uses 5 on solutions)."""
    raw = os.environ.get("LAUNCHLAB_CHECK_TRIALS", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"LAUNCHLAB_CHECK_TRIALS={raw!r}: set it to a whole number of runs, 1 or more")
    return int(raw)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one checker call."""

    exercise: str
    passed: bool
    detail: str
    hint: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """Already printed by the checker; show nothing more in a notebook."""


def exercise(name: str, hint: str) -> Callable[[Callable[..., str]], Callable[..., Verdict]]:
    """Make a checker: its body returns a detail string on success or raises CheckFailed(detail).

    The wrapped checker prints PASS or FAIL with a hint (the mistake's own when the body raised one), never a
    traceback: a stub (NotImplementedError) or any error in the learner's code is a FAIL that says what
    happened. Under LAUNCHLAB_CHECK_TRIALS=N the body runs N times and passes only if every run passes.
    """

    def wrap(body: Callable[..., str]) -> Callable[..., Verdict]:
        def judge_once(*args, **kwargs) -> Verdict:
            try:
                return Verdict(name, True, body(*args, **kwargs) or "")
            except NotImplementedError as exc:
                return Verdict(name, False, f"not implemented yet ({exc})", hint)
            except CheckFailed as exc:
                return Verdict(name, False, str(exc), exc.hint or hint)
            except Exception as exc:  # the learner's code failed: say what, without a traceback
                return Verdict(name, False, f"your code raised {type(exc).__name__}: {exc}", hint)

        @functools.wraps(body)
        def checker(*args, **kwargs) -> Verdict:
            trials = check_trials()
            for trial in range(1, trials + 1):
                verdict = judge_once(*args, **kwargs)
                if not verdict:
                    if trials > 1:
                        verdict = Verdict(name, False, f"{verdict.detail} (run {trial} of {trials})", verdict.hint)
                    break
            else:
                if trials > 1:
                    verdict = Verdict(name, True, f"{verdict.detail} (passed {trials} runs of {trials})")
            if verdict.passed:
                print(f"{PASS_MARK} [{name}] {verdict.detail}")
            else:
                print(f"{FAIL_MARK} [{name}] {verdict.detail}\n  Hint: {verdict.hint}")
                if strict():
                    raise CheckFailed(f"{name}: {verdict.detail}", verdict.hint)
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


# Ratios of yours to the expected value that betray a unit slip, and what to say about each.
TIME_SLIPS_MS = {1000.0: "your figure is 1,000x too large: microseconds where milliseconds were asked for?",
                 0.001: "your figure is 1,000x too small: seconds where milliseconds were asked for?"}
TIME_SLIPS_US = {1000.0: "your figure is 1,000x too large: nanoseconds where microseconds were asked for?",
                 0.001: "your figure is 1,000x too small: milliseconds where microseconds were asked for?",
                 1e-6: "your figure is a million times too small: seconds where microseconds were asked for?"}


def slip_hint(ratio: float, slips: dict[float, str] | None) -> str | None:
    """The hint of the slip whose factor `ratio` matches within 15%, if any."""
    for factor, hint in (slips or {}).items():
        if abs(ratio / factor - 1) <= 0.15:
            return hint
    return None


def within(measured: float, expected: float, tolerance: float, what: str,
           slips: dict[float, str] | None = None) -> str:
    """A detail line if measured is within tolerance (a fraction) of expected, else raise CheckFailed (with the
    hint of a known slip, such as a unit, when the ratio betrays one)."""
    measured = number(measured, what, positive=False)
    error = abs(measured - expected) / expected
    line = f"{what}: yours {measured:.4g}, expected {expected:.4g} ({error:.1%} off, {tolerance:.0%} allowed)"
    if not error <= tolerance:
        raise CheckFailed(line, slip_hint(measured / expected, slips))
    return line


def within_factor(yours: float, expected: float, factor: float, what: str,
                  slips: dict[float, str] | None = None) -> str:
    """A detail line if yours is within `factor` times expected either way, else raise CheckFailed."""
    yours = number(yours, what)
    ratio = yours / expected
    line = f"{what}: yours {yours:,.4g}, the checker's {expected:,.4g} (ratio {ratio:.2f}, {1 / factor:g} to {factor:g} allowed)"
    if not 1 / factor <= ratio <= factor:
        raise CheckFailed(line, slip_hint(ratio, slips))
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

    if not (isinstance(captured, (tuple, list)) and len(captured) == 2 and isinstance(captured[0], torch.cuda.CUDAGraph)):
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


@dataclass
class OpCounts:
    """The ATen operations run while counting, apart by whether the current CUDA stream was capturing."""

    eager: Counter
    captured: Counter


@contextlib.contextmanager
def counting_ops() -> Iterator[OpCounts]:
    """Count every ATen operation (sin and sin_ alike) run in the block, eager apart from captured.

    A TorchDispatchMode sees each operation PyTorch dispatches, on a CPU as on a GPU, before it launches
    anything; a graph's replay dispatches none, so eager work during a replay exercise shows up here.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = OpCounts(Counter(), Counter())
    cuda = torch.cuda.is_available()

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            name = name[:-1] if name.endswith("_") and not name.startswith("_") else name
            capturing = cuda and torch.cuda.is_current_stream_capturing()
            (counts.captured if capturing else counts.eager)[name] += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        yield counts


def checker_call_in_child(module: str, call: str, timeout_s: float, exit_after_s: float, stuck: str) -> dict:
    """Run `call` (an expression on launchlab.checkers.<module> returning a dict) in a child process that never
    outlives `timeout_s`; its dict back, or CheckFailed with its error, its last lines, or `stuck` if it hung."""
    from . import child

    # os._exit: once the RESULT line is out, skip the teardown (the device runtime's can take seconds).
    script = (f"import os\nfrom launchlab.checkers import {module}\nfrom launchlab.child import result\n"
              f"result(**{module}.{call})\nos._exit(0)")
    # A GPU loop that never ends keeps its process alive after it reported: stop it once its RESULT is in.
    run = child.run_python(script, timeout_s=timeout_s, exit_after_result_s=exit_after_s)
    found = run.results()
    if found:
        if "error" in found[-1]:
            raise CheckFailed(found[-1]["error"], hint=found[-1].get("hint"))
        return found[-1]
    if run.timed_out:
        raise CheckFailed(f"your code did not finish within {timeout_s:g} s and was stopped: {stuck}")
    raise CheckFailed(f"the child process running your code failed: {run.last_lines(2)}")
