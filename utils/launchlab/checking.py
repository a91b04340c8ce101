"""The checker framework every exercise ends with: `exercise`, `Verdict`, value checks and capture helpers.

A checker is a function decorated with `exercise(number, hint)` whose body returns a detail line on success
or raises `CheckFailed(detail)`; its verdict carries the heading the course model gives exercise `number` of
its chapter, and is stored in this GPU's run (`results.record_verdict`). Random scenarios come from `rng()`,
seeded per trial, so a FAIL prints the seed that replays it. Around every body the CUDA state an exercise may
leave behind (a capture left open, a side stream left current, the sync debug mode) is put back, and a GPU
left broken (a sticky error) is a verdict that says to restart the kernel, not a FAIL of the next exercise.
The chapter checkers live in `launchlab/chapters/chNN/checkers.py`; a lab reaches them only through
`launchlab.checkers.for_lab`, which hands out the `check_*` functions and nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import operator
import os
import random
import re
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .env import strict

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"
PARTIAL_MARK = "PASS (CPU part only)"  # a cpu-partial exercise passed where there is no CUDA GPU for the rest
RESTART_MARK = "RESTART"               # the GPU was left broken: the verdict says to restart the kernel
RESTART = "restart the kernel"         # how such a verdict's detail starts (the grader reads it)
NEEDS_GPU = "needs a GPU"              # one wording for a check without its GPU, here and in the grader's verdicts
SEED_VARIABLE = "LAUNCHLAB_CHECK_SEED"  # set, every trial of every checker uses this seed


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
    partial: bool = False      # passed on a CPU; the GPU part of a cpu-partial exercise was not judged here
    seed: int | None = None    # the seed of the trial that decided it, when the checker drew random scenarios

    def __bool__(self) -> bool:
        return self.passed

    @property
    def restart(self) -> bool:
        """The GPU was left broken: no answer was judged, the learner must restart the kernel."""
        return not self.passed and self.detail.startswith(RESTART)

    def _ipython_display_(self) -> None:
        """Already printed by the checker; show nothing more in a notebook."""


# ---- random scenarios, replayable from a seed ----------------------------------------------------------------


@dataclass
class _Trial:
    seed: int
    drawn: random.Random | None = None  # made at the trial's first draw: a trial that draws nothing has no seed


_trials: list[_Trial] = []  # the checker trials running now, innermost last


def rng() -> random.Random:
    """The random generator of the checker trial running now, seeded from the trial's seed: every random scenario
    a checker makes comes from here, so the seed a FAIL prints replays it (`check.check_x(answer, seed=...)`).
    Outside a checker, a freshly seeded generator."""
    if not _trials:
        return random.Random(random.SystemRandom().randrange(2**31))
    trial = _trials[-1]
    if trial.drawn is None:
        trial.drawn = random.Random(trial.seed)
    return trial.drawn


def torch_generator(device: str = "cpu"):
    """A torch.Generator on `device` seeded from rng(), for tensors a checker draws (torch.randn(..., generator=))."""
    import torch

    return torch.Generator(device=device).manual_seed(rng().randrange(2**31))


def numpy_generator():
    """A numpy Generator seeded from rng(), for arrays a checker draws."""
    import numpy as np

    return np.random.default_rng(rng().randrange(2**31))


def _given_seed(seed: object) -> int | None:
    """The seed every trial of a checker call uses: its seed= argument, else LAUNCHLAB_CHECK_SEED, else None (each
    trial draws a fresh one)."""
    if seed is None:
        raw = os.environ.get(SEED_VARIABLE, "").strip()
        if not raw:
            return None
        if not raw.isdigit():
            raise ValueError(f"{SEED_VARIABLE}={raw!r}: set it to a whole number (a seed a FAIL printed), or unset it")
        return int(raw)
    if isinstance(seed, bool):
        raise TypeError(f"seed={seed!r}: pass the whole number that a FAIL printed")
    try:
        return operator.index(seed)
    except TypeError:
        raise TypeError(f"seed={seed!r}: pass the whole number that a FAIL printed") from None


# ---- the exercise a checker judges, from the course model ----------------------------------------------------

_HEADING = re.compile(r"^Exercise (\d+)\b")


class Declared:
    """The exercise a checker judges: the number (or free-form name) given to `exercise`, resolved against the
    course model when first needed. The model imports every chapter's checkers module, so reading it while a
    checkers module is being imported could be circular: nothing is read at decoration time."""

    def __init__(self, body: Callable, key: int | str) -> None:
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TypeError(f"exercise({key!r}, ...): give the exercise's number in its chapter, or a name")
        self.body, self.key = body, key
        self.chapter = None   # course.Chapter, when the checker belongs to one
        self.model = None     # course.Exercise, when the chapter declares this one
        self._resolved = False

    def resolve(self) -> Declared:
        """Read the model once; where a chapter's model does not load (yet), read it again at the next call."""
        if self._resolved:
            return self
        from . import course

        module = self.body.__module__
        try:
            chapter = course.chapter_of_module(module)
        except Exception:  # a chapter's declaration that does not import: keep the checker usable
            chapter = None
        if chapter is not None:
            if isinstance(self.key, int):
                self.model = chapter.exercise(self.key)  # ModelError: the chapter declares no such exercise
            else:
                self.model = next((e for e in chapter.exercises if e.heading == self.key), None) or next(
                    (e for e in chapter.exercises if e.checker == self.body.__name__), None)
            self.chapter = chapter
        self._resolved = chapter is not None or not module.startswith("launchlab.chapters.")
        return self

    @property
    def name(self) -> str:
        """'Exercise 2: choose a bucket': the model's heading for a number, else the name given."""
        self.resolve()
        if isinstance(self.key, str):
            return self.key
        return self.model.heading if self.model is not None else f"Exercise {self.key}"

    @property
    def number(self) -> int | None:
        self.resolve()
        if self.model is not None:
            return self.model.number
        if isinstance(self.key, int):
            return self.key
        match = _HEADING.match(self.key)
        return int(match.group(1)) if match else None

    @property
    def label(self) -> str:
        """'exercise 2', as a sentence names it."""
        return f"exercise {self.number}" if self.number is not None else self.name

    def judged_in_part_here(self) -> bool:
        """A cpu-partial exercise judged where CUDA is not available: its GPU part is judged elsewhere."""
        self.resolve()
        return self.model is not None and self.model.runs_on == "cpu-partial" and not cuda_available()


def exercise_name(checker: Callable) -> str:
    """The name a checker's verdicts carry ('Exercise 2: choose a bucket'); also left in checker.exercise_name."""
    name = checker.declared.name
    checker.exercise_name = name
    return name


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU here (False where PyTorch does not import)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


# ---- the CUDA state exercises share in one kernel ------------------------------------------------------------

_last_judged: str | None = None  # the last exercise judged in this process ("exercise 3")
_broken_by: str | None = None    # the exercise whose check left the GPU broken, once one did


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def _end_capture(handle: int) -> None:
    """End the capture running on the stream `handle` and destroy the graph it made (an invalidated capture
    makes none). torch has no call for a capture it did not begin itself, so through the CUDA runtime's own."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        runtime = None
    if runtime is not None:
        _, graph = runtime.cudaStreamEndCapture(runtime.cudaStream_t(handle))
        if graph is not None and int(graph):
            runtime.cudaGraphDestroy(graph)
        return
    import cupy

    try:
        graph = cupy.cuda.runtime.streamEndCapture(handle)
    except cupy.cuda.runtime.CUDARuntimeError:  # invalidated: the capture is over, and left no graph
        return
    if graph:
        cupy.cuda.runtime.graphDestroy(graph)


def _restore_torch(cuda) -> str | None:
    """End a capture left running on the current stream, make the default stream current again, turn the sync
    debug mode off, then synchronise: None if the GPU answers, else the error it gives.

    Every call names the device: a test (or a learner) may hide the GPU behind a patched is_available(), which
    torch.cuda's calls without a device consult. A step that fails is left to the synchronisation to judge."""
    try:
        device = cuda.current_device()
    except Exception as exc:
        return _first_line(exc)

    def end_capture() -> None:
        if cuda.is_current_stream_capturing():
            _end_capture(cuda.current_stream(device).cuda_stream)

    def default_stream_current() -> None:
        default = cuda.default_stream(device)
        if cuda.current_stream(device) != default:
            cuda.set_stream(default)

    def sync_debug_off() -> None:
        if cuda.get_sync_debug_mode() != 0:
            cuda.set_sync_debug_mode(0)  # before synchronize(), which the "error" mode refuses

    for step in (end_capture, default_stream_current, sync_debug_off):
        with contextlib.suppress(Exception):
            step()
    try:
        cuda.synchronize(device)
    except Exception as exc:  # a sticky error (an illegal address), or a capture on a stream out of reach
        return _first_line(exc)
    try:
        if _allocator_frees_after_streams(device):
            return None
    except Exception:  # an allocator without these calls (another PyTorch): nothing more to put back
        return None
    try:
        stuck = _allocator_capture_ended(device)
    except Exception:  # found stuck, and the repair itself failed: as stuck as before
        stuck = True
    return ALLOCATOR_STUCK if stuck else None


_probe_streams: dict = {}   # device -> the one stream the probe below uses, made once


def _probe_stream(device: int):
    """The restore's own high-priority stream on this device, made on first use."""
    import torch

    if device not in _probe_streams:
        _probe_streams[device] = torch.cuda.Stream(device, priority=-1)
    return _probe_streams[device]


def _allocator_frees_after_streams(device: int) -> bool:
    """Whether the caching allocator still hands back a block used on another stream once that stream's work is
    done: it stops doing so while it counts a capture as running (it may not query events during one)."""
    import torch

    # One high-priority stream, made once: torch hands out its streams round-robin from pools of 32, and a draw
    # here would move which one a learner's next torch.cuda.Stream() returns (it can be the very stream
    # torch.cuda.graph captures on, which turns a fork into a chain)
    side = _probe_stream(device)
    probe = torch.empty(128, device=device)
    probe.record_stream(side)
    address = probe.data_ptr()
    del probe
    torch.cuda.synchronize(device)
    torch.empty(128, device=device)  # an allocation is when the allocator looks at finished streams' events
    return not any(block["address"] == address and block["state"] == "active_pending_free"
                   for segment in torch.cuda.memory_snapshot() if segment["device"] == device
                   for block in segment["blocks"])


def _allocator_capture_ended(device: int) -> bool:
    """End, in PyTorch's caching allocator, the captures failed ones left counted as running: whether any is left.

    torch.cuda.graph's exit ends its capture in the allocator only after CUDA ended the stream's capture, so a
    capture that an illegal call invalidated (the classic .item() inside it), or one ended through the CUDA
    runtime, stays counted, and from then on memory freed after other streams' work is never reused. torch has no
    call that lists those captures: the pool ids captures were given, newest first, are tried (a wrong one is
    refused), and each ended one is released (its graph never will be); pools made by graph_pool_handle() or
    MemPool, which a learner's own `with use_mem_pool(...)` may hold open, are tried only if that was not enough.
    Assumes one thread, as a notebook's kernel runs checks."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(), torch.cuda.stream(_probe_stream(device)):
        warnings.simplefilter("ignore")   # "the CUDA Graph is empty": it is made only for the pool id it gets
        graph.capture_begin()
        graph.capture_end()
    captures, made = graph.pool()[0], torch.cuda.graph_pool_handle()[1]   # the counters' highest ids so far
    del graph
    torch.cuda.synchronize(device)   # blocks held back for other streams are let go as soon as their pool ends
    for pools, release in (([(n, 0) for n in range(captures - 1, 0, -1)], True),
                           ([(0, n) for n in range(made - 1, 0, -1)], False)):
        for pool in pools:
            try:
                torch._C._cuda_endAllocateToPool(device, pool)
            except RuntimeError:   # not a capture the allocator counts as running
                continue
            if release:
                with contextlib.suppress(RuntimeError):
                    torch._C._cuda_releasePool(device, pool)
            if _allocator_frees_after_streams(device):
                return False
    return not _allocator_frees_after_streams(device)


_no_driver = False  # no CUDA driver (or no cuda-bindings) here: the driver-level check has nothing to ask


def _driver_check() -> str | None:
    """Without torch's CUDA, synchronise the context current on this thread if there is one (CuPy's, cuda.core's):
    None if it answers or none exists, else the error it gives. Creates no context."""
    global _no_driver
    if _no_driver:
        return None
    try:
        from cuda.bindings import driver

        err, context = driver.cuCtxGetCurrent()  # CUDA_ERROR_NOT_INITIALIZED when nothing used the GPU
    except Exception:
        _no_driver = True
        return None
    try:
        if err != driver.CUresult.CUDA_SUCCESS or not int(context):
            return None
        (err,) = driver.cuCtxSynchronize()
        if err == driver.CUresult.CUDA_SUCCESS:
            return None
        _, text = driver.cuGetErrorString(err)
        return f"CUDA error: {text.decode() if isinstance(text, bytes) else text}"
    except Exception:  # no driver, no bindings: no GPU state to check
        return None


def restore_cuda_state() -> str | None:
    """Put back the CUDA state an exercise may leave behind in this process, and say whether the GPU still
    works: None if it does, else what is wrong (a sticky error only a new process clears). Touches CUDA only
    where this process already initialised it, through torch (torch already imported) or another binding."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        initialised = cuda is not None and cuda.is_initialized()
    except Exception:
        initialised = False
    if initialised:
        return _restore_torch(cuda)
    if any(name in sys.modules for name in ("cupy", "cuda.core", "cuda.bindings")):
        return _driver_check()
    return None


RESTART_HINT = ("a CUDA error such as an illegal memory access stays with the process that made it: every later "
                "GPU call fails until the kernel is restarted")
ALLOCATOR_STUCK = ("PyTorch's memory allocator still counts a failed capture as running, so it no longer reuses "
                   "memory freed after other streams' work")
ALLOCATOR_HINT = ("a capture that fails inside torch.cuda.graph (a host read such as .item() in the captured code) "
                  "can stay counted as running in PyTorch's memory allocator; the checker tried to end it and could "
                  "not, and until a new process starts, the checks that hold freed memory cannot judge your answer")


def _restart(declared: Declared, why: str) -> Verdict:
    hint = ALLOCATOR_HINT if ALLOCATOR_STUCK in why else RESTART_HINT
    return Verdict(declared.name, False, f"{RESTART}: {why}. Kernel > Restart, then run the lab's first cell and "
                                         f"{declared.label} again", hint)


def _gpu_before(declared: Declared) -> Verdict | None:
    """Restore the CUDA state before a checker's body runs; a restart verdict if the GPU is already broken."""
    global _broken_by
    what = restore_cuda_state()
    if what is None:
        _broken_by = None
        return None
    if _broken_by:
        culprit = f"{_broken_by} left the GPU in a broken state"
    elif _last_judged:
        culprit = f"code run after {_last_judged} was judged left the GPU in a broken state"
    else:
        culprit = "code run before this check left the GPU in a broken state"
    return _restart(declared, f"{culprit} ({what})")


def _gpu_after(declared: Declared, verdict: Verdict) -> Verdict | None:
    """Restore the CUDA state after a checker's body, whatever it did; a restart verdict if it broke the GPU."""
    global _broken_by, _last_judged
    _last_judged = declared.label
    what = restore_cuda_state()
    if what is None:
        return None
    _broken_by = declared.label
    said = verdict.detail.strip().splitlines()[0][:300] if not verdict.passed and verdict.detail.strip() else ""
    same = what.removeprefix("CUDA error: ") in said  # the learner's code raised the error that broke it
    return _restart(declared, f"{declared.label} left the GPU in a broken state ({what})"
                    + (f"; the check had failed with: {said}" if said and not same else ""))


# ---- the checker -----------------------------------------------------------------------------------------------


def _replay(verdict: Verdict, checker: str) -> str:
    if verdict.seed is None:
        return ""
    return f" (seed {verdict.seed}: check.{checker}(your_answer, seed={verdict.seed}) replays it)"


def _announce(verdict: Verdict, checker: str) -> None:
    """The verdict's line, as the lab shows it (the browser tests read these lines)."""
    if verdict.passed:
        print(f"{PARTIAL_MARK if verdict.partial else PASS_MARK} [{verdict.exercise}] {verdict.detail}")
    elif verdict.restart:
        print(f"{RESTART_MARK} [{verdict.exercise}] {verdict.detail}")
    else:
        print(f"{FAIL_MARK} [{verdict.exercise}] {verdict.detail}{_replay(verdict, checker)}\n  Hint: {verdict.hint}")


def _record(declared: Declared, verdict: Verdict) -> None:
    """Store the verdict in this GPU's run, for a checker of a chapter's exercise."""
    if declared.chapter is None or declared.model is None:
        return
    from . import results

    try:
        results.record_verdict(declared.chapter.number, declared.model.number, verdict.passed, verdict.detail,
                               verdict.hint, partial=verdict.partial, seed=verdict.seed)
    except Exception as exc:  # an unwritable runs/ must not hide the verdict just printed
        warnings.warn(f"the verdict of {declared.name} was not stored: {exc}", stacklevel=3)


def exercise(number_or_name: int | str, hint: str) -> Callable[[Callable[..., str]], Callable[..., Verdict]]:
    """Make a checker: its body returns a detail string on success or raises CheckFailed(detail).

    `number_or_name` is the exercise's number in its chapter's model (launchlab/chapters/chNN/chapter.toml): the
    verdicts carry the model's heading ('Exercise 2: choose a bucket') and are stored in this GPU's run. A name
    instead names the verdicts as given (a test's checker). The wrapped checker prints PASS or FAIL with a hint
    (the mistake's own when the body raised one), never a traceback: a stub (NotImplementedError) or any error in
    the learner's code is a FAIL that says what happened. Under LAUNCHLAB_CHECK_TRIALS=N the body runs N times
    and passes only if every run passes. Each trial draws its scenarios from `rng()` under a fresh seed, which a
    FAIL prints; `seed=` (or LAUNCHLAB_CHECK_SEED) replays it. A cpu-partial exercise passed without CUDA says
    PASS (CPU part only). The CUDA state is restored before and after the body; a GPU left broken gives a
    verdict that says to restart the kernel.
    """

    def wrap(body: Callable[..., str]) -> Callable[..., Verdict]:
        declared = Declared(body, number_or_name)

        def judge_once(args: tuple, kwargs: dict, seed: int) -> Verdict:
            name = declared.name
            trial = _Trial(seed)
            _trials.append(trial)
            try:
                verdict = Verdict(name, True, body(*args, **kwargs) or "")
            except NotImplementedError as exc:  # nothing to replay: no seed
                return Verdict(name, False, f"not implemented yet ({exc})", hint)
            except CheckFailed as exc:
                verdict = Verdict(name, False, str(exc), exc.hint or hint)
            except Exception as exc:  # the learner's code failed: say what, without a traceback
                verdict = Verdict(name, False, f"your code raised {type(exc).__name__}: {exc}", hint)
            finally:
                _trials.pop()
            return dataclasses.replace(verdict, seed=seed) if trial.drawn is not None else verdict

        @functools.wraps(body)
        def checker(*args, seed: int | None = None, **kwargs) -> Verdict:
            name = checker.exercise_name = declared.name
            trials = check_trials()
            given = _given_seed(seed)
            verdict = _gpu_before(declared)
            if verdict is None:
                for trial in range(1, trials + 1):
                    trial_seed = random.SystemRandom().randrange(2**31) if given is None else given
                    verdict = judge_once(args, kwargs, trial_seed)
                    broken = _gpu_after(declared, verdict)
                    if broken is not None:
                        verdict = broken
                        break
                    if not verdict:
                        if trials > 1:
                            verdict = dataclasses.replace(verdict,
                                                          detail=f"{verdict.detail} (run {trial} of {trials})")
                        break
                else:
                    if trials > 1:
                        verdict = dataclasses.replace(
                            verdict, detail=f"{verdict.detail} (passed {trials} runs of {trials})")
                if verdict.passed and declared.judged_in_part_here():
                    verdict = dataclasses.replace(verdict, partial=True, detail=(
                        f"{verdict.detail}; the CPU part only: the rest of this exercise is judged on a machine with "
                        "a CUDA GPU"))
            _announce(verdict, body.__name__)
            _record(declared, verdict)
            if not verdict.passed and strict():
                raise CheckFailed(f"{name}: {verdict.detail}{_replay(verdict, body.__name__)}", verdict.hint)
            return verdict

        checker.declared = declared
        if isinstance(number_or_name, str):
            checker.exercise_name = number_or_name
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
        raise CheckFailed(f"{what} {NEEDS_GPU}; run this cell on a machine with an NVIDIA GPU")


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


def _stream_at(pointer: int):
    """The CUDA stream at this address, as torch sees streams (0: the device's default stream)."""
    import torch

    return torch.cuda.default_stream() if pointer == 0 else torch.cuda.ExternalStream(pointer)


_COUNT_PIECE = 1 << 22   # bytes of a held block compared at once: about 10 bytes of temporaries each (40 MiB)


@dataclass
class HeldMemory:
    """The default pool's free blocks, held and filled with one byte value: what a graph does to memory let go."""

    blocks: list
    fill: int = 255
    unheld: int = 0    # free bytes the hold could not take (an allocator set up otherwise than by default)
    why: list = dataclasses.field(default_factory=list)   # why each unheld piece was not taken, for a failure to say

    def written(self) -> int:
        """Held bytes that no longer hold the fill: written since it was made."""
        import torch

        torch.cuda.synchronize()
        # Counted in 4 MiB pieces: the hold owns every free byte of the pool, so a temporary the size of a held
        # block (gigabytes, where a process cached a large buffer) would need memory the device no longer has; a
        # piece's comparison is a bool the piece's size, and its count casts that to int64 (8 bytes a byte).
        changed = torch.zeros((), dtype=torch.int64, device=self.blocks[0].device) if self.blocks else None
        for block in self.blocks:
            for i in range(0, block.numel(), _COUNT_PIECE):
                changed += torch.count_nonzero(block[i:i + _COUNT_PIECE] != self.fill)
        return int(changed) if changed is not None else 0

    def refill(self, value: int) -> None:
        """Fill every held block with another byte: a write of the old fill's value shows against the new one."""
        import torch

        for block in self.blocks:
            block.fill_(value)
        self.fill = value
        torch.cuda.synchronize()


def _free_blocks(device: int) -> tuple[list[tuple[int, str, int]], int]:
    """The default pool's free blocks on this device as (stream, segment kind, bytes), and the bytes awaiting free."""
    import torch

    free, pending = [], 0
    for segment in torch.cuda.memory_snapshot():
        if segment["device"] != device or tuple(segment["segment_pool_id"]) != (0, 0):
            continue  # a graph's private pool is the graph's own
        for block in segment["blocks"]:
            if block["state"] == "inactive":
                free.append((segment["stream"], segment["segment_type"], block["size"]))
            elif block["state"] == "active_pending_free":
                pending += block["size"]
    return free, pending


@contextlib.contextmanager
def holding_freed_memory() -> Iterator[HeldMemory]:
    """Hold every free block of the default memory pool, filled with 0xFF, inside the block, so that memory an answer
    let go is no one else's and any write to it shows."""
    import gc

    import torch

    gc.collect()   # a buffer reachable only through a reference cycle is let go now, not in the middle of a replay
    torch.cuda.synchronize()
    device = torch.cuda.current_device()
    held = HeldMemory([])
    for _ in range(16):
        free, pending = _free_blocks(device)
        if not free and not pending:
            break
        if not free:  # only blocks that waited on other streams' events: an allocation makes the allocator free them
            held.blocks.append(torch.full((512,), 255, dtype=torch.uint8, device=device))
            continue
        for stream, kind, size in free:
            # the allocator gives each stream its own blocks, and the best fit for an exact size is a block of that
            # size; a small segment's blocks are handed out 1 MiB at most at a time (larger requests go elsewhere)
            try:
                while size > 0:
                    take = min(size, 1 << 20) if kind == "small" else size
                    # taken on the block's stream, filled on the current one: the block may sit on a stream that
                    # was destroyed since (a CuPy or cuda.core stream), where no kernel can run; the synchronize
                    # below orders the fill before anything the hold's owner does
                    with torch.cuda.stream(_stream_at(stream)):
                        block = torch.empty((take,), dtype=torch.uint8, device=device)
                    held.blocks.append(block.fill_(255))
                    size -= take
            except (RuntimeError, torch.OutOfMemoryError) as error:   # no room left for the fill's own work
                held.unheld += size
                held.why.append(f"{size:,} bytes on stream {stream:#x}: {str(error).splitlines()[0]}")
    else:
        left = sum(size for _, _, size in _free_blocks(device)[0])
        held.unheld += left
        held.why.append(f"{left:,} bytes still free after 16 rounds")
    torch.cuda.synchronize()
    try:
        yield held
    finally:
        torch.cuda.synchronize()   # the block's work (a replay writing freed memory) ends before its blocks go back
        del held.blocks[:]


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


# What a loop may not do to stay off the host, and what each one is to a learner. The Python-level ways a tensor's
# value reaches the host: on a GPU each waits for the GPU and copies (or raises, as .numpy() does); on a CPU most
# of them run no PyTorch operation at all, so only their names show them.
HOST_READ_METHODS = {
    "item": ".item()", "tolist": ".tolist()", "numpy": ".numpy()", "__array__": "np.asarray(t)", "cpu": ".cpu()",
    "__bool__": "bool(t) (an if or a comparison on a tensor)", "__float__": "float(t)", "__int__": "int(t)",
    "__index__": "a tensor used as a Python index", "__complex__": "complex(t)", "__format__": "a tensor printed",
    "__repr__": "a tensor printed", "__str__": "a tensor printed",
    "__dlpack__": "a DLPack export (np.from_dlpack, cupy.from_dlpack)", "data_ptr": "t.data_ptr() (a raw pointer)",
}
# ATen operations that read a value on the host, wherever they are called from (torch's own code too): a number
# handed to Python, or an output whose size depends on the values (the GPU must finish before the host knows it).
HOST_READ_OPS = {
    "_local_scalar_dense": ".item() (a tensor read as a number)", "is_nonzero": "bool(t)",
    "equal": "torch.equal (a bool on the host)", "allclose": "torch.allclose (a bool on the host)",
    "nonzero": ".nonzero() (its size depends on the values)", "argwhere": ".argwhere()",
    "masked_select": "torch.masked_select", "_unique": "torch.unique", "_unique2": "torch.unique",
    "unique_dim": "torch.unique", "unique_consecutive": "torch.unique_consecutive",
}


def _nested_tensor(data: object) -> bool:
    """Whether a list or tuple (at any depth) holds a tensor."""
    import torch

    return isinstance(data, (list, tuple)) and any(isinstance(d, torch.Tensor) or _nested_tensor(d) for d in data)


def _host_read(name: str, args: tuple, kwargs: dict) -> str | None:
    """What a Python-level call reads on the host, by its name and arguments; None if it reads nothing."""
    import torch

    if name in HOST_READ_METHODS:
        return HOST_READ_METHODS[name]
    if name == "to" and args and isinstance(args[0], torch.Tensor):
        # only the host named as such: .to(p.device) is a move to wherever p is, the GPU on a GPU
        named = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, str)]
        return ".to('cpu')" if any(a.split(":")[0] == "cpu" for a in named) else None
    if name in ("tensor", "as_tensor", "asarray") and args and _nested_tensor(args[0]):
        return f"torch.{name} of a list of tensors (each read as a number)"
    return None


def _masked(func, args: tuple) -> bool:
    """Whether an indexing operation takes a boolean mask, so its size or the cells it writes depend on values. A
    single mask given one value to write is a masked_fill_ to PyTorch (no read); any other mask is a nonzero."""
    import torch

    name = func.overloadpacket.__name__
    if name not in ("index", "index_put", "index_put_", "_index_put_impl_") or len(args) < 2:
        return False
    indices = [i for i in args[1] or () if i is not None]
    if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return False
    value = args[2] if len(args) > 2 else None
    fills = name != "index" and len(indices) == 1 and isinstance(value, torch.Tensor) and value.numel() == 1
    return not fills


@contextlib.contextmanager
def host_reads() -> Iterator[Counter]:
    """Count every read of a tensor's value on the host made inside the block, on a CPU as a GPU would see it:
    .item(), float(t), int(t), bool(t) (an `if` on a tensor), .tolist(), .numpy(), np.asarray(t), .cpu(),
    .to("cpu") (the host named, not a device taken from a tensor), a tensor printed or used as an index, torch.tensor of a list of tensors, a DLPack export or a raw pointer (another library's read), and the operations whose
    result the host must wait for (torch.equal, .nonzero(), a boolean mask, torch.unique), torch's own included.
    The counts are by what a learner wrote ('.tolist()': 2)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    reads: Counter = Counter()
    inside = [0]  # Python-level reads in progress: the ATen reads under them are the same read

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not inside[0]:
                if name in HOST_READ_OPS:
                    reads[HOST_READ_OPS[name]] += 1
                elif _masked(func, args):
                    reads["a boolean mask as an index (its size depends on the values)"] += 1
            return func(*args, **(kwargs or {}))

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            read = _host_read(getattr(func, "__name__", ""), args, kwargs or {})
            if read is None:
                return func(*args, **(kwargs or {}))
            reads[read] += 1
            inside[0] += 1
            try:
                return func(*args, **(kwargs or {}))
            finally:
                inside[0] -= 1

    with Ops(), Calls():
        yield reads


def checker_call_in_child(module: str, call: str, timeout_s: float, exit_after_s: float, stuck: str) -> dict:
    """Run `call` (an expression on launchlab.chapters.<module>.checkers returning a dict) in a child process that never
    outlives `timeout_s`; its dict back, or CheckFailed with its error, its last lines, or `stuck` if it hung."""
    from . import child

    # os._exit: once the RESULT line is out, skip the teardown (the device runtime's can take seconds).
    script = (f"import os\nfrom launchlab.chapters.{module} import checkers as {module}\nfrom launchlab.child import result\n"
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


def every_case_right(ran: list[dict], planned: int, problem: Callable[[dict], CheckFailed | None], what: str) -> None:
    """Raise the first problem among the cases a child ran, then CheckFailed if fewer than `planned` ran."""
    for case in ran:
        found = problem(case)
        if found:
            raise found
    if len(ran) != planned:
        raise CheckFailed(f"only {len(ran)} of {planned} {what} were run")


class FigureOff(CheckFailed):
    """A measured figure off its reference in one round: measured again by `measured_again`, unlike other failures."""


def measured_again(one_round: Callable[[], Any], rounds: int) -> Any:
    """one_round()'s result from the first of `rounds` rounds that raises no FigureOff; the last round's FigureOff
    if every round raised one; any other failure (a wrong type, a crash) at once. A host hiccup slows one round; a
    wrong method is off in every round."""
    for attempt in range(rounds):
        try:
            return one_round()
        except FigureOff as exc:
            if attempt == rounds - 1:
                raise CheckFailed(f"{exc} (off in each of {rounds} rounds)", exc.hint) from None
    raise ValueError(f"rounds must be 1 or more, not {rounds}")


class no_tf32:
    """float32 matmuls in full precision while a check runs, so eager and graphed runs compare tightly.

    Through `fp32_precision` where PyTorch has it (reading the older `allow_tf32` flags raises once a learner
    has used the newer setting), else through `allow_tf32`."""

    def __enter__(self):
        import torch

        backends = torch.backends
        self.new_api = hasattr(backends.cuda.matmul, "fp32_precision")
        if self.new_api:
            self.saved = backends.cuda.matmul.fp32_precision, backends.cudnn.conv.fp32_precision
            backends.cuda.matmul.fp32_precision = backends.cudnn.conv.fp32_precision = "ieee"
        else:
            self.saved = backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
            backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        backends = torch.backends
        if self.new_api:
            backends.cuda.matmul.fp32_precision, backends.cudnn.conv.fp32_precision = self.saved
        else:
            backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = self.saved
