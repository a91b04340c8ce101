"""Lab 07's mutation suite for exercise 4, splitting idle time (runs on a CPU)."""

from launchlab import trace
from launchlab.checkers import ch07
from mutants import Answer, judge


def reference(kernels, window):
    split = trace.attribute_idle(kernels, window)
    return split.busy_us, split.host_wait_us, split.gpu_gap_us


def split_by_events(kernels, window):
    """Right, written differently: merge the kernels into busy intervals first, then classify each gap."""
    lo, hi = window
    merged = []
    for launched, start, end in sorted(kernels, key=lambda k: k[1]):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        if merged and start <= merged[-1][2]:
            merged[-1][2] = max(merged[-1][2], end)
        else:
            merged.append([launched, start, end])
    busy = sum(end - start for _, start, end in merged)
    host = gpu = 0.0
    previous_end = lo
    for launched, start, end in merged:
        gap = start - previous_end
        waited = min(max(launched - previous_end, 0.0), gap)
        host, gpu = host + waited, gpu + gap - waited
        previous_end = end
    return busy, host + (hi - previous_end), gpu


def all_host(kernels, window):
    busy, host, gpu = reference(kernels, window)
    return busy, host + gpu, 0.0


def overlaps_twice(kernels, window):
    _, host, gpu = reference(kernels, window)
    return sum(end - start for _, start, end in kernels), host, gpu


def assumes_sorted(kernels, window):
    lo, hi = window
    busy = host = gpu = 0.0
    cursor = lo
    for launched, start, end in kernels:  # in the order given
        start, end = max(start, lo), min(end, hi)
        if start > cursor:
            waiting = min(max(launched - cursor, 0.0), start - cursor)
            host, gpu = host + waiting, gpu + start - cursor - waiting
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    return busy, host + max(hi - cursor, 0.0), gpu


def tail_as_gpu_gap(kernels, window):
    busy, host, gpu = reference(kernels, window)
    tail = window[1] - max(min(end, window[1]) for _, _, end in kernels)
    return busy, host - tail, gpu + tail


def waits_measured_from_launch_to_start(kernels, window):
    busy, host, gpu = reference(kernels, window)
    waited = sum(start - launched for launched, start, _ in kernels)  # negative for work queued ahead
    return busy, waited, window[1] - window[0] - busy - waited


ATTRIBUTE_ANSWERS = [
    Answer("the course's walk", "right", reference),
    Answer("busy intervals merged first", "right", split_by_events),
    Answer("every idle stretch blamed on the host", "classic", all_host),
    Answer("overlapping kernels counted twice", "classic", overlaps_twice),
    Answer("kernels taken in the order given", "method", assumes_sorted),
    Answer("the stretch after the last kernel called a GPU gap", "method", tail_as_gpu_gap),
    Answer("host wait as launch-to-start time", "method", waits_measured_from_launch_to_start),
    Answer("milliseconds", "unit", lambda k, w: tuple(v / 1000 for v in reference(k, w))),
    Answer("the first hand-made case typed in", "hard-coded", lambda k, w: (3.0, 2.0, 1.0)),
    Answer("NaN for the GPU gap", "bad value", lambda k, w: (*reference(k, w)[:2], float("nan"))),
    Answer("a list of the three", "right", lambda k, w: list(reference(k, w))),
    Answer("two of the three", "structure", lambda k, w: reference(k, w)[:2]),
]


def test_lab07_exercise4_attribute_idle(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge("lab 07, exercise 4: split the idle time", ch07.check_attribute_idle, ATTRIBUTE_ANSWERS, trials=2)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
