"""Lab 02's mutation suite: plausible answers a learner writes, each judged by its checker (CPU exercises)."""

import pytest

from launchlab.checkers import ch02
from launchlab.trace import load_events
from mutants import Answer, judge

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _complete(path):
    return [e for e in load_events(path) if e.get("ph") == "X"]


def _range(events, annotation):
    r = next(e for e in events if e.get("cat") == "user_annotation" and e.get("name") == annotation)
    return r["ts"], r["ts"] + r["dur"]


def _stats(work, window, kernels):
    """Busy time as the union of intervals, gaps including both ends, over `window`."""
    lo, hi = window
    busy, gaps, cursor = 0.0, [], lo
    for start, end in sorted(work):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        gaps.append(max(start - cursor, 0.0))
        busy += max(end - max(start, cursor), 0.0)
        cursor = max(cursor, end)
    gaps.append(hi - cursor)
    return {"kernel_count": kernels, "idle_fraction": 1 - busy / (hi - lo), "largest_gap_us": max(gaps)}


def idle_right(path, annotation):
    """Right, written differently: a sweep over start/end points, counting how many intervals are open."""
    events = _complete(path)
    lo, hi = _range(events, annotation)
    work = [e for e in events if e["cat"] in GPU_WORK and lo <= e["ts"] <= hi]
    hi = max([hi] + [e["ts"] + e["dur"] for e in work])
    points = sorted([(e["ts"], 1) for e in work] + [(e["ts"] + e["dur"], -1) for e in work])
    busy, open_, last, gaps, idle_since = 0.0, 0, lo, [], lo
    for t, step in points:
        if open_:
            busy += t - last
        if open_ == 0 and step == 1:
            gaps.append(t - idle_since)
        open_ += step
        if open_ == 0:
            idle_since = t
        last = t
    gaps.append(hi - idle_since)
    return {"kernel_count": sum(e["cat"] == "kernel" for e in work), "idle_fraction": 1 - busy / (hi - lo),
            "largest_gap_us": max(gaps)}


def _work(path, annotation, cats=GPU_WORK, extend=True, starts_inside=True):
    events = _complete(path)
    lo, hi = _range(events, annotation)
    if starts_inside:
        work = [e for e in events if e["cat"] in cats and lo <= e["ts"] <= hi]
    else:  # anything that overlaps the range
        work = [e for e in events if e["cat"] in cats and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    if extend:
        hi = max([hi] + [e["ts"] + e["dur"] for e in work])
    kernels = sum(e["cat"] == "kernel" for e in work)
    return [(e["ts"], e["ts"] + e["dur"]) for e in work], (lo, hi), kernels


def summed_durations(path, annotation):
    work, window, kernels = _work(path, annotation)
    busy = sum(end - start for start, end in work)  # overlapping streams counted twice
    return {**_stats(work, window, kernels), "idle_fraction": 1 - busy / (window[1] - window[0])}


def kernels_only(path, annotation):
    return _stats(*_work(path, annotation, cats=("kernel",)))


def window_from_first_work(path, annotation):
    work, (lo, hi), kernels = _work(path, annotation)
    return _stats(work, (min(s for s, _ in work), hi), kernels)


def window_clipped_at_range_end(path, annotation):
    return _stats(*_work(path, annotation, extend=False))


def trailing_gap_forgotten(path, annotation):
    work, window, kernels = _work(path, annotation)
    stats = _stats(work, window, kernels)
    last_end = max(e for _, e in work)
    inner = _stats(work, (window[0], last_end), kernels)["largest_gap_us"]
    return {**stats, "largest_gap_us": inner}


def overlapping_work_counted(path, annotation):
    return _stats(*_work(path, annotation, starts_inside=False))


def idle_in_percent(path, annotation):
    stats = idle_right(path, annotation)
    return {**stats, "idle_fraction": 100 * stats["idle_fraction"]}


def gaps_in_milliseconds(path, annotation):
    stats = idle_right(path, annotation)
    return {**stats, "largest_gap_us": stats["largest_gap_us"] / 1000}


def nan_fraction(path, annotation):
    return {**idle_right(path, annotation), "idle_fraction": float("nan")}


def shipped_figures_typed_in(path, annotation):
    shipped = idle_right(str(ch02.trace.shipped_trace_path()), "loop") if hasattr(ch02, "trace") else None
    return dict(shipped or {"kernel_count": 0, "idle_fraction": 0.5, "largest_gap_us": 1.0})


def every_event_counted_as_a_kernel(path, annotation):
    work, window, _ = _work(path, annotation)
    return _stats(work, window, len(work))


IDLE_ANSWERS = [
    Answer("union of intervals (the solution's method)", "right", lambda p, a: _stats(*_work(p, a))),
    Answer("sweep over interval end points", "right", idle_right),
    Answer("durations summed, overlaps counted twice", "classic", summed_durations),
    Answer("memsets and copies left out", "classic", kernels_only),
    Answer("window starts at the first GPU work", "method", window_from_first_work),
    Answer("window clipped at the range's end", "method", window_clipped_at_range_end),
    Answer("the gap after the last work forgotten", "method", trailing_gap_forgotten),
    Answer("work started before the range counted", "structure", overlapping_work_counted),
    Answer("every GPU event counted as a kernel", "structure", every_event_counted_as_a_kernel),
    Answer("idle fraction in percent", "unit", idle_in_percent),
    Answer("largest gap in milliseconds", "unit", gaps_in_milliseconds),
    Answer("idle fraction NaN", "bad value", nan_fraction),
    Answer("the shipped trace's figures typed in", "hard-coded", shipped_figures_typed_in),
]


def test_lab02_exercise1_idle_stats(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # The made-up traces are drawn afresh on each call: every answer meets several.
    wrong = judge("lab 02, exercise 1: GPU idle time from a trace", ch02.check_idle_stats, IDLE_ANSWERS, trials=3)
    assert not wrong, "\n".join(wrong)


@pytest.fixture(autouse=True)
def _quiet(capsys):
    yield
    capsys.readouterr()
