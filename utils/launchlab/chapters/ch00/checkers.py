"""Checkers for lab 00, "fix the broken benchmark".

Each one hands your timer functions that run a spin kernel, then compares what your timer says with how long
the kernel took by the GPU's own nanosecond timer, measured in the same call. 10% is allowed. The durations are
drawn afresh on every call, between 3 and 9 ms, and each check times several different ones (each at least 1.3x
the last), so no number typed in fits them all; the detail line names them only after your function returned.
"""

from __future__ import annotations

import itertools
import os
import random
import statistics
import time
from collections.abc import Callable

from ... import checking
from ...checking import TIME_SLIPS_MS, CheckFailed, exercise, number, slip_hint, within
from ...kernels import SPIN_SOURCE, spinner

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_event_stream", "check_library_field", "check_median", "check_wait_for_gpu", "check_warm_up"]

TOLERANCE = 0.10
# Long enough that the launch's trip to an idle GPU (tens, at times a few hundred, microseconds) stays a small
# fraction of it, so a correct timer passes with room to spare.
SHORTEST_MS, LONGEST_MS = 3.0, 9.0
STEP = 1.3  # between two durations of one check: no number is within 10% of two of them
STALL_S = 0.02  # a host stall, as a busy machine causes now and then (exercise 4)
JITTER = 0.25  # exercise 4: each call's kernel runs 0.75x to 1.25x the drawn duration
_fresh = itertools.count()


def _durations_us(count: int, rng: random.Random) -> list[float]:
    """`count` spin durations in microseconds between SHORTEST_MS and LONGEST_MS, each STEP x the one before,
    from a random start, in random order."""
    start = rng.uniform(SHORTEST_MS, LONGEST_MS / STEP ** (count - 1))
    durations = [start * STEP**k * 1000 for k in range(count)]
    rng.shuffle(durations)
    return durations


def _returned_ms(value: object, what: str) -> float:
    """Your function's return value as a float of milliseconds, or a clear failure."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise CheckFailed(f"what {what} returned is {value:g} ms, a negative duration",
                          "a negative time: the clock read or the events in the wrong order (end minus start), or "
                          "the two events recorded on different streams, where the end can complete first")
    return number(value, f"what {what} returned", "milliseconds")


def _clear(spin) -> None:
    """Zero the spin kernel's duration and wait: a call that never runs fn leaves it at zero."""
    import cupy as cp

    spin.elapsed_ns.data.memset(0, spin.elapsed_ns.nbytes)
    cp.cuda.Device().synchronize()


CALL_CAP = 200  # calls of fn for one figure: each runs a kernel of milliseconds, so thousands take minutes


def _capped(fn: Callable[[], object], what: str) -> Callable[[], object]:
    """fn, failing the check once your function calls it more than CALL_CAP times for one figure."""
    calls = itertools.count(1)

    def call():
        if next(calls) > CALL_CAP:
            raise CheckFailed(f"{what} called fn more than {CALL_CAP} times for one figure; each call runs a kernel "
                              "of several milliseconds", "time one call, or a few dozen samples (with cupyx's "
                              "benchmark, pass n_repeat: 20 is plenty)")
        return fn()
    return call


def _truth_ms(spin, what: str) -> float:
    """The last spin's duration by the GPU's timer, in ms; a failure if your function never ran the kernel."""
    truth = spin.truth_us() / 1000
    if truth <= 0:
        raise CheckFailed(f"{what} returned without running the kernel: fn was never called",
                          "call fn inside your timer: the time must be measured, not typed in")
    return truth


def _ratios_line(pairs: list[tuple[float, float]]) -> str:
    return ", ".join(f"{mine:.3g} ms for {truth:.3g}" for mine, truth in pairs)


TOO_SHORT = 0.2  # yours under a fifth of the kernel's duration: the clock stopped before the GPU finished


def _unit_slip(rows: list[tuple[float, float]]) -> str | None:
    """The hint of a unit slip when (nearly) every one of your figures is off from the truth by the same factor;
    a timer that stops too early is off by different factors for different durations, so it is no unit slip."""
    for factor in TIME_SLIPS_MS:
        if sum(bool(slip_hint(mine / truth, {factor: "x"})) for mine, truth in rows) >= max(len(rows) - 1, 2):
            return TIME_SLIPS_MS[factor]
    return None


@exercise(1,
          "a launch returns as soon as the kernel is queued: synchronise the device before you read the clock.")
def check_wait_for_gpu(time_once_ms: Callable[[Callable[[], object]], float]) -> str:
    import cupy as cp

    spin = spinner()
    rng = checking.rng()
    scratch = cp.zeros(1, dtype=cp.uint64)
    rows = []  # (yours, true duration, work queued before the call), in ms
    for duration_us in _durations_us(5, rng):
        _clear(spin)
        queued_us = duration_us * rng.uniform(0.5, 0.8)
        # Earlier work, still running when your timer starts: it must not be counted.
        spin.kernel((1,), (1,), (cp.int64(int(queued_us * 1000 * spin.cycles_per_ns)), scratch))
        mine = _returned_ms(time_once_ms(_capped(lambda d=duration_us: spin.launch(d), "time_once_ms")), "time_once_ms")
        rows.append((mine, _truth_ms(spin, "time_once_ms"), queued_us / 1000))
    good = sum(abs(mine / truth - 1) <= TOLERANCE for mine, truth, _ in rows)
    line = (f"{good} of {len(rows)} kernels of {min(r[1] for r in rows):.2f} to {max(r[1] for r in rows):.2f} ms "
            f"timed within {TOLERANCE:.0%} (at least {len(rows) - 1} needed): "
            + _ratios_line([(m, t) for m, t, _ in rows]))
    if good >= len(rows) - 1:
        return line
    ratio = statistics.median(mine / truth for mine, truth, _ in rows)
    hint = _unit_slip([(m, t) for m, t, _ in rows])
    if hint:
        pass
    elif ratio < TOO_SHORT:
        hint = ("your times are a small fraction of the kernels': the clock stopped when the launch returned, "
                "before the GPU finished; synchronise the device after fn() and before reading the clock")
    elif sum(abs(mine / (truth + queued) - 1) <= TOLERANCE for mine, truth, queued in rows) >= len(rows) - 1:
        hint = ("your times include work queued before fn was called (the checker left a kernel running): "
                "synchronise the device before you start the clock, too")
    raise CheckFailed(line, hint)


@exercise(2,
          "the first call of a fresh kernel compiles and loads it; run the function once, synchronised, "
          "before you start timing.")
def check_warm_up(steady_time_ms: Callable[[Callable[[], object]], float]) -> str:
    import cupy as cp

    spin = spinner()
    rows, calls_made = [], []
    for duration_us in _durations_us(2, checking.rng()):
        # A kernel no process has compiled yet: its first call pays NVRTC compilation and module load.
        source = SPIN_SOURCE + f"\n// fresh kernel {time.time_ns()}-{next(_fresh)}\n"
        kernel = cp.RawKernel(source, "spin_cycles")
        cycles = cp.int64(int(duration_us * 1000 * spin.cycles_per_ns))
        calls: list[int] = []

        def first_call_compiles(kernel=kernel, cycles=cycles, calls=calls):
            calls.append(1)
            kernel((1,), (1,), (cycles, spin.elapsed_ns))

        _clear(spin)
        rows.append((_returned_ms(steady_time_ms(_capped(first_call_compiles, "steady_time_ms")), "steady_time_ms"),
                     _truth_ms(spin, "steady_time_ms")))
        calls_made.append(len(calls))
    line = f"steady-state times of freshly compiled kernels: {_ratios_line(rows)}"
    bad = [(mine / truth, n) for (mine, truth), n in zip(rows, calls_made, strict=True)
           if abs(mine / truth - 1) > TOLERANCE]
    if not bad:
        return line + f" (both within {TOLERANCE:.0%})"
    ratio, calls = bad[0]
    hint = _unit_slip(rows)
    if hint:
        pass
    elif calls == 1 and ratio > 1.5:
        hint = ("you timed the one and only call, which compiled and loaded the kernel: call fn once and "
                "synchronise before you start timing")
    elif ratio < TOO_SHORT:
        hint = ("your time is a small fraction of the kernel's: synchronise the device after the timed call, "
                "before reading the clock")
    elif 1.7 <= ratio <= 2.3:
        hint = ("about twice the kernel's duration: the warm-up call was still running when your clock started; "
                "synchronise after the warm-up")
    elif ratio > 2.3:
        hint = ("your time includes the first call, which compiled and loaded the kernel: call fn once and "
                "synchronise before you start timing, and leave that call out of your samples")
    raise CheckFailed(line + f" ({len(bad)} off by more than {TOLERANCE:.0%})", hint)


@exercise(3,
          "an event measures the stream it is recorded on; record both events on the stream you were given.")
def check_event_stream(event_time_ms: Callable[[Callable[[], object], object], float]) -> str:
    import cupy as cp

    spin = spinner()
    stream = cp.cuda.Stream(non_blocking=True)  # a stream that does not wait for the default stream
    elsewhere = cp.cuda.Stream(non_blocking=True)  # other work on the GPU, which no timer of stream should see
    # Where every launch waits for its kernel, nothing overlaps: the other work would land inside any figure
    concurrent = os.environ.get("CUDA_LAUNCH_BLOCKING", "0") != "1"
    rows = []
    for duration_us in _durations_us(3, checking.rng()):
        _clear(spin)
        # stream is still busy with earlier work when your timer starts, and fn keeps the GPU busy elsewhere for
        # three times its kernel's time: a wall clock, events on another stream, or a device-wide synchronize()
        # between your events see one or the other
        if concurrent:
            spin.occupy(duration_us, stream)

        def fn(d=duration_us):
            if concurrent:
                spin.occupy(3 * d, elsewhere)
            spin.launch(d, stream=stream)

        try:
            mine = _returned_ms(event_time_ms(_capped(fn, "event_time_ms"), stream), "event_time_ms")
        except cp.cuda.runtime.CUDARuntimeError as exc:
            if "NotReady" not in str(exc):
                raise
            raise CheckFailed(f"event_time_ms read the time between its events before both had completed ({exc})",
                              "wait for the end event (end.synchronize()) before reading the time, and record both "
                              "events on stream: an end event on another stream can complete before the start") \
                from None
        cp.cuda.Device().synchronize()
        rows.append((mine, _truth_ms(spin, "event_time_ms")))
    alone = "" if concurrent else " (CUDA_LAUNCH_BLOCKING=1: each kernel alone on the GPU)"
    line = f"event times of kernels on a side stream{alone}: {_ratios_line(rows)}"
    off = _off_ratios(rows)
    if not off:
        return line + f" (all within {TOLERANCE:.0%})"
    hint = _unit_slip(rows) or (
        "your events saw almost none of the kernel: they were recorded on a stream where nothing ran; pass "
        "the stream to record (start.record(stream)), both of them" if off[0] < TOO_SHORT else
        "your figure also holds other work: the stream's earlier work, or the other stream's. A wall clock or a "
        "device synchronize() between your events waits for that too; record both events on stream (start.record(stream)) "
        "and read the time between them" if off[0] > 1 + TOLERANCE else None)
    raise CheckFailed(line + f" ({len(off)} off by more than {TOLERANCE:.0%})", hint)


def _off_ratios(rows: list[tuple[float, float]]) -> list[float]:
    """Your time over the true one, for each row off by more than TOLERANCE."""
    return [mine / truth for mine, truth in rows if abs(mine / truth - 1) > TOLERANCE]


FIRST_PLAN = frozenset(range(4, 10_000, 5))  # the first run: every fifth call stalls, as in the lab's demo


def _stall_plan(calls: int) -> set[int]:
    """The calls to stall in the second run, given how many your function made the first time: the middle ones
    (with one either side, in case your first call was a warm-up), then the first, the last and the second (the
    first sample after a warm-up), then every fifth, each while no more than 30% of the calls stall. So a timer
    that reports one sample, the first, the last or the unsorted middle, reports a stalled one."""
    if calls < 10:
        return {calls // 2}
    plan = {calls // 2 - 1, calls // 2, calls // 2 + 1}
    for i in (0, calls - 1, 1, *range(4, calls, 5)):
        if len(plan | {i}) <= 0.3 * calls:
            plan.add(i)
    return plan


def _median_mistake(mine: float, expected: float, samples: list[float]) -> str | None:
    """The classic wrong figure yours is nearest to (mean, fastest, unsorted middle), if it is near one."""
    n = len(samples)
    candidates = [(statistics.fmean(samples), "your figure is the mean of the samples, which the stalls drag up: "
                                               "report the median"),
                  (min(samples), "your figure is the fastest sample, the luckiest call rather than a typical one: "
                                 "report the median")]
    candidates += [(samples[k], "your figure is the sample from the middle of the run, unsorted: sort the samples "
                                "before taking the middle one (or use np.median)")
                   for k in (n // 2 - 1, n // 2, n // 2 + 1) if 0 <= k < n]
    # The stalls hit the first, the last and the middle calls alike, so which one call you read may not show.
    candidates += [(samples[k], "your figure is one call's time (the first, the last or the unsorted middle one), "
                                "which a stall can hit: report the median of all the samples (sort them before "
                                "taking the middle one, or use np.median)") for k in (0, 1, n - 1) if 0 <= k < n]
    candidates += [(max(samples), "your figure is the slowest sample, a stalled call: report the median")]
    # Your own timing adds the launch and the synchronisation to each call, so allow a few percent; the nearest
    # explanation wins, and only if it explains your figure far better than the true median does.
    value, hint = min(candidates, key=lambda c: abs(mine / c[0] - 1))
    if abs(mine / value - 1) <= 0.06 and abs(mine / value - 1) < abs(mine / expected - 1) / 2:
        return hint
    if mine / expected < TOO_SHORT:
        return "far below the kernel's duration: synchronise after each call before reading the clock"
    return None


@exercise(4,
          "one slow sample (the OS, the garbage collector, another process) drags the mean; the median "
          "of many samples ignores a few outliers.")
def check_median(robust_time_ms: Callable[[Callable[[], object]], float]) -> str:
    """Your function times a kernel whose duration varies from call to call, some calls preceded by a 20 ms
    host stall, twice: first every fifth call stalls, then the calls in the middle of your run, the first, the
    second and the last (and a few more), so an unsorted middle, a first or a last sample is a stalled one. Each
    call's duration is read from the GPU's timer."""
    import cupy as cp

    spin = spinner()
    rng = checking.rng()
    slots = cp.zeros(10_000, dtype=cp.uint64)  # one GPU-timed duration per call
    lines, calls_made = [], 0
    for run, duration_us in enumerate(_durations_us(2, rng)):
        plan = FIRST_PLAN if run == 0 else _stall_plan(calls_made)
        stalled: list[bool] = []

        def sometimes_delayed(duration_us=duration_us, plan=plan, stalled=stalled):
            i = len(stalled)
            stalled.append(i in plan)
            if i in plan:
                time.sleep(STALL_S)
            cycles = int(duration_us * rng.uniform(1 - JITTER, 1 + JITTER) * 1000 * spin.cycles_per_ns)
            j = min(i, len(slots) - 1)
            spin.kernel((1,), (1,), (cp.int64(cycles), slots[j:j + 1]))

        mine = _returned_ms(robust_time_ms(_capped(sometimes_delayed, "robust_time_ms")), "robust_time_ms")
        calls_made = len(stalled)
        if calls_made < 5:
            raise CheckFailed(f"robust_time_ms called fn {calls_made} times; take many samples (21 by default)")
        truth_ms = (slots[:min(calls_made, len(slots))].get() / 1e6).tolist()
        samples = [t + STALL_S * 1e3 * s for t, s in zip(truth_ms, stalled, strict=False)]
        expected = statistics.median(samples)
        what = (f"typical time of {calls_made} calls of a {duration_us / 1e3:.2f} ms (+-{JITTER:.0%}) kernel, "
                f"{sum(stalled)} of them after a 20 ms host stall, in ms")
        try:
            lines.append(within(mine, expected, TOLERANCE, what, slips=TIME_SLIPS_MS))
        except CheckFailed as exc:
            raise CheckFailed(str(exc), exc.hint or _median_mistake(mine, expected, samples)) from None
    return "; ".join(lines)


@exercise(5,
          "cupyx.profiler.benchmark reports cpu_times (the host's time in the call, without waiting) and "
          "gpu_times (CUDA events on the stream); a GPU kernel's duration is in gpu_times.")
def check_library_field(library_gpu_time_ms: Callable[[Callable[[], object]], float]) -> str:
    spin = spinner()
    rows = []
    for duration_us in _durations_us(2, checking.rng()):
        _clear(spin)
        mine = _returned_ms(library_gpu_time_ms(_capped(lambda d=duration_us: spin.launch(d), "library_gpu_time_ms")),
                            "library_gpu_time_ms")
        rows.append((mine, _truth_ms(spin, "library_gpu_time_ms")))
    line = f"library-timed kernels: {_ratios_line(rows)}"
    off = _off_ratios(rows)
    if not off:
        return line + f" (both within {TOLERANCE:.0%})"
    ratio = off[0]
    hint = _unit_slip(rows)
    if hint:
        pass
    elif ratio < TOO_SHORT:
        hint = ("far below the kernel's duration: that is the host's time in the call (cpu_times), which does not "
                "wait for the GPU; read gpu_times")
    elif ratio > 3 and abs(ratio - round(ratio)) < 0.1 * ratio:
        hint = f"about {round(ratio)} kernels' worth: the sum over the repeats? Report one call's time (the median)"
    raise CheckFailed(line + f" ({len(off)} off by more than {TOLERANCE:.0%})", hint)
