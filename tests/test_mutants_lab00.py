"""Lab 00's mutation suite: timers a learner plausibly writes, each judged by its checker (every exercise needs a GPU).

The checkers time spin kernels of durations they draw afresh (3 to 9 ms, several per call), so a typed-in
number cannot pass; each timing exercise is judged twice.
"""

import random
import statistics
import time

import numpy as np
import pytest

from launchlab.chapters.ch00 import checkers as ch00
from mutants import Answer, judge, suite

TYPED_IN_MS = 5.0  # what the lab's demo cells print: "a kernel that ran 5.000 ms"


def _cp():
    import cupy as cp

    return cp


def _sync():
    _cp().cuda.Device().synchronize()


pytestmark = pytest.mark.usefixtures("lenient_checkers")


# ---- exercise 1: wait for the GPU ----------------------------------------------------------------------------

def time_once(fn):
    """The solution's timer."""
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    return (time.perf_counter() - start) * 1e3


def time_once_torch_ns(fn):
    """Right, written differently: torch's device-wide synchronisation and an integer nanosecond clock."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e6


def time_once_events(fn):
    """Right, written differently: earlier work drained, then events around the call on the current stream."""
    cp = _cp()
    cp.cuda.get_current_stream().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def no_sync(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def sync_before_only(fn):
    _sync()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def sync_after_only(fn):
    start = time.perf_counter()
    fn()
    _sync()
    return (time.perf_counter() - start) * 1e3


def syncs_a_new_stream(fn):
    cp = _cp()
    _sync()
    start = time.perf_counter()
    fn()
    cp.cuda.Stream().synchronize()  # a stream of its own, with nothing in it: returns at once
    return (time.perf_counter() - start) * 1e3


WAIT_ANSWERS = [
    Answer("synchronise before and after (the solution)", "right", time_once),
    Answer("torch.cuda.synchronize and perf_counter_ns", "right", time_once_torch_ns),
    Answer("events after draining the stream", "right", time_once_events),
    Answer("no synchronisation (the broken timer)", "classic", no_sync),
    Answer("synchronised before the call only", "method", sync_before_only),
    Answer("synchronised after the call only: earlier work counted", "method", sync_after_only),
    Answer("synchronises a new, empty stream", "structure", syncs_a_new_stream),
    Answer("seconds", "unit", lambda fn: time_once(fn) / 1e3),
    Answer("microseconds", "unit", lambda fn: time_once(fn) * 1e3),
    Answer("the demo's 5 ms typed in", "hard-coded", lambda fn: (fn(), _sync(), TYPED_IN_MS)[-1]),
    Answer("thousands of back-to-back launches timed", "method",
           lambda fn: __import__("launchlab.timing", fromlist=["timing"]).launch_throughput_us(fn).median_us / 1e3),
    Answer("forgot to return", "bad value", lambda fn: None),
    Answer("NaN", "bad value", lambda fn: float("nan")),
]
SUITE_WAIT = suite("00", 1, ch00.check_wait_for_gpu, WAIT_ANSWERS)


@pytest.mark.exercise("00", 1)
@pytest.mark.gpu
def test_lab00_exercise1_wait_for_gpu():
    wrong = judge(SUITE_WAIT.lab, SUITE_WAIT.number, SUITE_WAIT.checker, SUITE_WAIT.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "before you start the clock" in ch00.check_wait_for_gpu(sync_after_only).hint
    assert "after fn()" in ch00.check_wait_for_gpu(no_sync).hint
    assert "seconds where milliseconds" in ch00.check_wait_for_gpu(lambda fn: time_once(fn) / 1e3).hint
    started = time.monotonic()
    verdict = ch00.check_wait_for_gpu(lambda fn: [fn() for _ in range(5000)] and time_once(fn))
    assert not verdict and "more than" in verdict.detail and time.monotonic() - started < 30, verdict


# ---- exercise 2: warm up first -------------------------------------------------------------------------------

def steady_time(fn, repeats=5):
    """The solution's timer."""
    fn()
    _sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def steady_time_batched(fn, warmups=2, calls=8):
    """Right, written differently: two warm-up calls, then several calls timed together, divided."""
    for _ in range(warmups):
        fn()
    _sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync()
    return (time.perf_counter() - start) * 1e3 / calls


def cold_call(fn):
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    return (time.perf_counter() - start) * 1e3


def mean_with_the_first_call(fn, repeats=5):
    samples = [cold_call(fn) for _ in range(repeats)]  # the first sample pays the compilation
    return sum(samples) / len(samples)


def warm_up_not_waited_for(fn):
    fn()  # still running when the clock starts
    start = time.perf_counter()
    fn()
    _sync()
    return (time.perf_counter() - start) * 1e3


def warms_up_the_gpu_not_fn(fn):
    cp = _cp()
    cp.ones(1024).sum()  # "wakes the GPU up", but fn's kernel is still uncompiled
    _sync()
    return cold_call(fn)


WARM_ANSWERS = [
    Answer("one warm-up call, median of five (the solution)", "right", steady_time),
    Answer("two warm-ups, eight calls timed together", "right", steady_time_batched),
    Answer("the first call timed (the broken timer)", "classic", cold_call),
    Answer("mean of all calls, the first included", "method", mean_with_the_first_call),
    Answer("warm-up call not waited for", "method", warm_up_not_waited_for),
    Answer("other GPU work as the warm-up", "structure", warms_up_the_gpu_not_fn),
    Answer("seconds", "unit", lambda fn: steady_time(fn) / 1e3),
    Answer("microseconds", "unit", lambda fn: steady_time(fn) * 1e3),
    Answer("the demo's 5 ms typed in", "hard-coded", lambda fn: TYPED_IN_MS),
    Answer("NaN", "bad value", lambda fn: float("nan")),
]
SUITE_WARM = suite("00", 2, ch00.check_warm_up, WARM_ANSWERS)


@pytest.mark.exercise("00", 2)
@pytest.mark.gpu
def test_lab00_exercise2_warm_up():
    wrong = judge(SUITE_WARM.lab, SUITE_WARM.number, SUITE_WARM.checker, SUITE_WARM.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "compiled" in ch00.check_warm_up(cold_call).hint
    assert "warm-up" in ch00.check_warm_up(warm_up_not_waited_for).hint
    assert "not typed in" in ch00.check_warm_up(lambda fn: TYPED_IN_MS).hint


# ---- exercise 3: record events on the stream that does the work ---------------------------------------------

def event_time(fn, stream):
    """The solution's timer."""
    cp = _cp()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def event_time_in_stream_context(fn, stream):
    """Right, written differently: the stream made current, events recorded on the current stream."""
    cp = _cp()
    with stream:
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
    stream.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def event_time_stream_record(fn, stream):
    """Right, written differently: Stream.record makes and records the events."""
    cp = _cp()
    start = stream.record()
    fn()
    end = stream.record()
    end.synchronize()
    return float(cp.cuda.get_elapsed_time(start, end))


def _events(fn, start_on, end_on, order=(0, 1)):
    cp = _cp()
    events = [cp.cuda.Event(), cp.cuda.Event()]
    events[0].record(start_on)
    fn()
    events[1].record(end_on)
    events[1].synchronize()
    _sync()
    return cp.cuda.get_elapsed_time(events[order[0]], events[order[1]])


def host_clock_no_sync(fn, stream):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def wall_clock_device_synchronised(fn, stream):
    """A synchronised wall clock: the device drained before, and waited for after."""
    cp = _cp()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - start) * 1e3


def wall_clock_stream_synchronised(fn, stream):
    """A wall clock that waits for the stream after fn, not before: the stream's earlier work counts."""
    start = time.perf_counter()
    fn()
    stream.synchronize()
    return (time.perf_counter() - start) * 1e3


def default_stream_events_after_stream_sync(fn, stream):
    """Events on the current stream, with the stream waited for before the end event is recorded."""
    cp = _cp()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn()
    stream.synchronize()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def end_on_current_stream_read_at_once(fn, stream):
    """The end event on the current stream, its time read as soon as it completes: the start may not have."""
    cp = _cp()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def device_drained_then_events(fn, stream):
    """Right, more cautious than needed: the device drained first, then events on the stream."""
    _cp().cuda.Device().synchronize()
    return event_time(fn, stream)


EVENT_ANSWERS = [
    Answer("both events on the stream (the solution)", "right", event_time),
    Answer("with stream: events on the current stream", "right", event_time_in_stream_context),
    Answer("Stream.record()", "right", event_time_stream_record),
    Answer("the device drained first, then events on the stream", "right", device_drained_then_events),
    Answer("a wall clock with the device synchronised before and after", "classic", wall_clock_device_synchronised),
    Answer("a wall clock that waits for the stream after fn only", "method", wall_clock_stream_synchronised),
    Answer("events on the current stream, the stream waited for before the end event", "classic",
           default_stream_events_after_stream_sync),
    Answer("events on the current stream (the broken timer)", "classic", lambda fn, s: _events(fn, None, None)),
    Answer("end event on the current stream", "classic", lambda fn, s: _events(fn, s, None)),
    Answer("end event on the current stream, read at once", "classic", end_on_current_stream_read_at_once),
    Answer("events on a new stream", "structure",
           lambda fn, s: (lambda other: _events(fn, other, other))(_cp().cuda.Stream())),
    Answer("start and end swapped", "bad value", lambda fn, s: _events(fn, s, s, order=(1, 0))),
    Answer("host clock, no synchronisation", "method", host_clock_no_sync),
    Answer("seconds", "unit", lambda fn, s: event_time(fn, s) / 1e3),
    Answer("microseconds", "unit", lambda fn, s: event_time(fn, s) * 1e3),
    Answer("the demo's 5 ms typed in", "hard-coded", lambda fn, s: TYPED_IN_MS),
    Answer("forgot to return", "bad value", lambda fn, s: None),
]
SUITE_EVENT = suite("00", 3, ch00.check_event_stream, EVENT_ANSWERS)


@pytest.mark.exercise("00", 3)
@pytest.mark.gpu
def test_lab00_exercise3_event_stream():
    wrong = judge(SUITE_EVENT.lab, SUITE_EVENT.number, SUITE_EVENT.checker, SUITE_EVENT.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "record" in ch00.check_event_stream(lambda fn, s: _events(fn, None, None)).hint
    assert "negative" in ch00.check_event_stream(lambda fn, s: _events(fn, s, s, order=(1, 0))).hint
    assert "other work" in ch00.check_event_stream(wall_clock_device_synchronised).hint
    assert "before both had completed" in ch00.check_event_stream(end_on_current_stream_read_at_once).detail


# ---- exercise 4: report the median ----------------------------------------------------------------------------

def _samples(fn, repeats=21, sync=True):
    samples = []
    for _ in range(repeats):
        if sync:
            _sync()
        start = time.perf_counter()
        fn()
        if sync:
            _sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def robust_time(fn, repeats=21):
    """The solution's timer."""
    return float(np.median(_samples(fn, repeats)))


def robust_time_statistics(fn, repeats=25):
    """Right, written differently: one warm-up, then statistics.median of 25 samples timed with torch."""
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def unsorted_middle(fn, repeats=21):
    samples = _samples(fn, repeats)
    return samples[len(samples) // 2]


MEDIAN_ANSWERS = [
    Answer("np.median of 21 samples (the solution)", "right", robust_time),
    Answer("statistics.median of 25 after a warm-up", "right", robust_time_statistics),
    Answer("np.percentile 50 of 31 samples", "right", lambda fn: float(np.percentile(_samples(fn, 31), 50))),
    Answer("the mean (the broken timer)", "classic", lambda fn: float(np.mean(_samples(fn)))),
    Answer("the middle sample, unsorted", "method", unsorted_middle),
    Answer("the fastest sample", "method", lambda fn: min(_samples(fn))),
    Answer("the first sample", "method", lambda fn: _samples(fn)[0]),
    Answer("the last sample", "method", lambda fn: _samples(fn)[-1]),
    Answer("the slowest sample", "method", lambda fn: max(_samples(fn))),
    Answer("no synchronisation", "method", lambda fn: float(np.median(_samples(fn, sync=False)))),
    Answer("seconds", "unit", lambda fn: robust_time(fn) / 1e3),
    Answer("microseconds", "unit", lambda fn: robust_time(fn) * 1e3),
    Answer("the demo's 5 ms typed in", "hard-coded", lambda fn: (_samples(fn), TYPED_IN_MS)[-1]),
    Answer("NaN", "bad value", lambda fn: float(np.median(_samples(fn) + [float("nan")]))),
]
SUITE_MEDIAN = suite("00", 4, ch00.check_median, MEDIAN_ANSWERS)


@pytest.mark.exercise("00", 4)
@pytest.mark.gpu
def test_lab00_exercise4_median():
    wrong = judge(SUITE_MEDIAN.lab, SUITE_MEDIAN.number, SUITE_MEDIAN.checker, SUITE_MEDIAN.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "mean" in ch00.check_median(lambda fn: float(np.mean(_samples(fn)))).hint
    assert "sort" in ch00.check_median(unsorted_middle).hint
    hint = ch00.check_median(lambda fn: _samples(fn)[0]).hint
    # the first call of a draw can also be its fastest, its slowest or as long as its unsorted middle one (within the
    # checker's tolerance), and then that slip's hint is as right: each names a figure read off a single call
    assert any(words in hint for words in ("one call's time", "fastest sample", "slowest sample", "middle")), hint


def _simulated_calls(seed, calls):
    """What check_median's two runs hand a timer that calls fn `calls` times, simulated on the host with the
    checker's own draws: each call's time in ms, the kernel's duration jittered, plus 20 ms where it stalls."""
    rng = random.Random(seed)
    runs = []
    for run, duration_us in enumerate(ch00._durations_us(2, rng)):
        plan = ch00.FIRST_PLAN if run == 0 else ch00._stall_plan(calls)
        runs.append([duration_us / 1e3 * rng.uniform(1 - ch00.JITTER, 1 + ch00.JITTER) + ch00.STALL_S * 1e3 * (i in plan)
                     for i in range(calls)])
    return runs


# A timer's figure from its own samples (every call but a warm-up), by each plausible wrong rule.
MEDIAN_RULES = {
    "the first sample": lambda samples: samples[0],
    "the last sample": lambda samples: samples[-1],
    "the middle sample, unsorted": lambda samples: samples[len(samples) // 2],
    "the mean": statistics.fmean,
    "the fastest sample": min,
    "the slowest sample": max,
}


@pytest.mark.exercise("00", 4)
@pytest.mark.parametrize("warm_up, repeats", [(False, 21), (True, 25), (False, 31)], ids=["21", "warm-up+25", "31"])
def test_lab00_exercise4_no_wrong_rule_passes_by_the_order_of_the_samples(warm_up, repeats):
    """Over 300 draws of the checker's runs (simulated on the host: the GPU part is the kernel's own duration),
    each wrong rule misses the median by more than the tolerance in at least one run, and the median never."""
    passed = {name: 0 for name in MEDIAN_RULES}
    for seed in range(300):
        runs = _simulated_calls(seed, repeats + warm_up)
        for name, rule in MEDIAN_RULES.items():
            passed[name] += all(abs(rule(calls[warm_up:]) / statistics.median(calls) - 1) <= ch00.TOLERANCE
                                for calls in runs)
        # the median of a timer's own samples (a warm-up left out) is the checker's median of every call
        assert all(abs(statistics.median(calls[warm_up:]) / statistics.median(calls) - 1) <= 0.08
                   for calls in runs), seed
    assert not any(passed.values()), passed


# ---- exercise 5: read the right field of a library timer -------------------------------------------------------

def _bench(fn, n_repeat=20):
    from cupyx.profiler import benchmark

    return benchmark(fn, n_repeat=n_repeat, n_warmup=2)


def library_gpu_time(fn):
    """The solution's timer."""
    return float(np.median(_bench(fn).gpu_times[0])) * 1e3


def library_gpu_time_mean(fn):
    """Right, written differently: the mean over every device's GPU times (one device here)."""
    return float(_bench(fn, n_repeat=10).gpu_times.mean() * 1000)


def benchmark_of_the_result(fn):
    from cupyx.profiler import benchmark

    return float(np.median(benchmark(fn(), n_repeat=20).gpu_times)) * 1e3  # fn() called, its result passed


LIBRARY_ANSWERS = [
    Answer("median of gpu_times (the solution)", "right", library_gpu_time),
    Answer("mean of gpu_times", "right", library_gpu_time_mean),
    Answer("cpu_times (the broken timer)", "classic", lambda fn: float(_bench(fn).cpu_times.mean()) * 1e3),
    Answer("median of cpu_times", "classic", lambda fn: float(np.median(_bench(fn).cpu_times)) * 1e3),
    Answer("sum of the gpu_times", "method", lambda fn: float(_bench(fn).gpu_times.sum()) * 1e3),
    Answer("benchmark handed fn() instead of fn", "structure", benchmark_of_the_result),
    Answer("perf_counter, no library, no synchronisation", "method",
           lambda fn: (lambda t0: (fn(), (time.perf_counter() - t0) * 1e3)[-1])(time.perf_counter())),
    Answer("seconds", "unit", lambda fn: float(np.median(_bench(fn).gpu_times[0]))),
    Answer("microseconds", "unit", lambda fn: library_gpu_time(fn) * 1e3),
    Answer("the demo's 5 ms typed in", "hard-coded", lambda fn: TYPED_IN_MS),
    Answer("forgot to return", "bad value", lambda fn: None),
]
SUITE_LIBRARY = suite("00", 5, ch00.check_library_field, LIBRARY_ANSWERS)


@pytest.mark.exercise("00", 5)
@pytest.mark.gpu
def test_lab00_exercise5_library_field():
    wrong = judge(SUITE_LIBRARY.lab, SUITE_LIBRARY.number, SUITE_LIBRARY.checker, SUITE_LIBRARY.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "gpu_times" in ch00.check_library_field(lambda fn: float(_bench(fn).cpu_times.mean()) * 1e3).hint


# ---- on a CPU: what makes the checks un-foolable --------------------------------------------------------------

def test_lab00_planted_durations_defeat_a_typed_in_number():
    """Every check's durations lie in 3-9 ms, each 1.3x the next: no number is within 10% of two of them."""
    import random

    rng = random.Random(0)
    for count in (2, 3, 5):
        for _ in range(200):
            durations = sorted(ch00._durations_us(count, rng))
            assert 3000 <= durations[0] and durations[-1] <= 9000 * (1 + 1e-9)
            assert all(b / a >= 1.3 - 1e-9 for a, b in zip(durations, durations[1:], strict=False))
            assert (1 + ch00.TOLERANCE) / (1 - ch00.TOLERANCE) < 1.3


def test_lab00_stall_plan_hits_the_middle_and_leaves_the_median_alone():
    for calls in range(5, 120):
        plan = ch00._stall_plan(calls)
        assert calls // 2 in plan
        assert len(plan) < calls / 2 - 1 or calls < 10 and len(plan) == 1
        if calls >= 10:  # a first call kept as a warm-up shifts the middle sample by one: still stalled
            assert {calls // 2 - 1, calls // 2 + 1} <= plan
        if calls >= 17:  # the first and the last call stall too, and from 20 calls the first after a warm-up
            assert {0, calls - 1} <= plan and (calls < 20 or 1 in plan)
        assert len(plan) <= max(0.3 * calls, 3 if calls >= 10 else 1)
