"""Lab 02's mutation suite: plausible answers a learner writes, each judged by its checker (CPU exercises)."""

import pytest

from launchlab.chapters.ch02 import checkers as ch02
from launchlab.trace import load_events, shipped_trace_path
from mutants import Answer, judge, suite

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


SHIPPED = idle_right(str(shipped_trace_path()), "loop")  # what a learner reads off the shipped trace once


def shipped_figures_typed_in(path, annotation):
    return dict(SHIPPED)


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
SUITE_IDLE = suite("02", 1, ch02.check_idle_stats, IDLE_ANSWERS)


@pytest.mark.exercise("02", 1)
def test_lab02_exercise1_idle_stats(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # The made-up traces are drawn afresh on each call: every answer meets several.
    wrong = judge(SUITE_IDLE.lab, SUITE_IDLE.number, SUITE_IDLE.checker, SUITE_IDLE.answers, trials=3)
    assert not wrong, "\n".join(wrong)


@pytest.fixture(autouse=True)
def _quiet(capsys):
    yield
    capsys.readouterr()


def _flat(sweep):
    return sweep["seconds"][-1] / sweep["seconds"][0] < 2 and sweep["sizes"][-1] / sweep["sizes"][0] >= 16


def classify_right(sweep, balance):
    """Right, written differently: the work's growth and the roofline test without a division by bytes."""
    grew = sweep["sizes"][-1] >= 16 * sweep["sizes"][0]
    if grew and sweep["seconds"][-1] < 2 * sweep["seconds"][0]:
        return "overhead"
    return "compute" if sweep["flops"][-1] > balance * sweep["bytes"][-1] else "bandwidth"


def roofline_at_smallest_size(sweep, balance):
    if _flat(sweep):
        return "overhead"
    return "compute" if sweep["flops"][0] / sweep["bytes"][0] > balance else "bandwidth"


def flat_by_time_alone(sweep, balance):
    if sweep["seconds"][-1] / sweep["seconds"][0] < 2:
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] > balance else "bandwidth"


def bytes_per_flop(sweep, balance):
    if _flat(sweep):
        return "overhead"
    return "compute" if sweep["bytes"][-1] / sweep["flops"][-1] > balance else "bandwidth"


def achieved_flops_against_balance(sweep, balance):
    # compares FLOP/s (a rate) with FLOP/byte (an intensity): a unit slip
    if _flat(sweep):
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["seconds"][-1] > balance else "bandwidth"


def last_two_sizes_only(sweep, balance):
    if sweep["seconds"][-1] / sweep["seconds"][-2] < 2:
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] > balance else "bandwidth"


def by_the_order_of_calls():
    answers = iter(["overhead", "bandwidth", "compute"] * 10)
    return lambda sweep, balance: next(answers)


def by_the_size_of_the_work(sweep, balance):
    # a shortcut that knows the checker's three workloads, not the roofline
    if sweep["sizes"][-1] <= 64:
        return "overhead"
    return "compute" if sweep["sizes"][-1] <= 8192 else "bandwidth"


CLASSIFY_ANSWERS = [
    Answer("the roofline, multiplied out", "right", classify_right),
    Answer("always compute-bound", "classic", lambda sweep, balance: "compute"),
    Answer("intensity at the smallest size", "method", roofline_at_smallest_size),
    Answer("flat judged by time alone", "method", flat_by_time_alone),
    Answer("time growth of the last two sizes", "method", last_two_sizes_only),
    Answer("bytes per FLOP against FLOPs per byte", "unit", bytes_per_flop),
    Answer("achieved FLOP/s against the balance", "unit", achieved_flops_against_balance),
    Answer("labels in the order of the calls", "hard-coded", by_the_order_of_calls()),
    Answer("the checker's workloads told apart by size", "structure", by_the_size_of_the_work),
    Answer("returns None", "bad value", lambda sweep, balance: None),
    Answer("capitalised label", "bad value", lambda sweep, balance: classify_right(sweep, balance).title()),
]
SUITE_CLASSIFY = suite("02", 2, ch02.check_classify, CLASSIFY_ANSWERS)


@pytest.mark.exercise("02", 2)
def test_lab02_exercise2_classify(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_CLASSIFY.lab, SUITE_CLASSIFY.number, SUITE_CLASSIFY.checker, SUITE_CLASSIFY.answers, trials=2)
    assert not wrong, "\n".join(wrong)


def _loop(model, opt, batches, before_step=None, collect=lambda loss: loss.detach(), zero=True):
    import torch.nn.functional as F

    losses = []
    for x, y in batches:
        if zero:
            opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if before_step is None or before_step(model, loss) is not False:
            opt.step()
        losses.append(collect(loss))
    return losses


def _mask_grads(model, loss):
    keep = (loss <= ch02.EXPLODING).to(loss.dtype)
    for p in model.parameters():
        p.grad.mul_(keep)


def no_syncs_right(model, opt, batches):
    """Right, written differently: take the step, then put the old weights back where the loss exploded."""
    import torch

    losses = []
    for x, y in batches:
        saved = [p.detach().clone() for p in model.parameters()]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        keep = loss.detach() <= ch02.EXPLODING
        with torch.no_grad():
            for p, old in zip(model.parameters(), saved, strict=True):
                p.copy_(torch.where(keep, p, old))
        losses.append(loss.detach())
    return torch.stack(losses)


def stacked(loop):
    import torch

    return lambda model, opt, batches: torch.stack(loop(model, opt, batches))


def python_if_on_a_tensor(model, loss):
    if loss > ch02.EXPLODING:  # bool() of a tensor: a host round trip
        return False
    return True


def masked_loss_instead_of_grads(model, opt, batches):
    import torch
    import torch.nn.functional as F

    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss = loss * (loss <= ch02.EXPLODING).to(loss.dtype)  # the loss itself is zeroed: the wrong losses come back
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


NO_SYNC_ANSWERS = [
    Answer("gradients scaled by the mask (the solution's method)", "right", stacked(lambda m, o, b: _loop(m, o, b, _mask_grads))),
    Answer("step taken, old weights restored where it exploded", "right", no_syncs_right),
    Answer(".item() kept in the loop", "classic", lambda m, o, b: __import__("torch").tensor(ch02.train_with_syncs(m, o, b))),
    Answer("the exploding step not skipped", "classic", stacked(_loop)),
    Answer("a Python if on the loss tensor", "method", stacked(lambda m, o, b: _loop(m, o, b, python_if_on_a_tensor))),
    Answer("gradients never zeroed", "method", stacked(lambda m, o, b: _loop(m, o, b, _mask_grads, zero=False))),
    Answer("the loss zeroed instead of the gradients", "method", masked_loss_instead_of_grads),
    Answer("losses as a list of tensors", "structure", lambda m, o, b: _loop(m, o, b, _mask_grads)),
    Answer("losses read back as floats", "structure",
           lambda m, o, b: _loop(m, o, b, _mask_grads, collect=lambda loss: loss.item())),
    Answer("returns None", "bad value", lambda m, o, b: None),
    Answer("losses in another unit (summed, not averaged)", "unit",
           stacked(lambda m, o, b: _loop(m, o, b, _mask_grads, collect=lambda loss: loss.detach() * 64))),
]
SUITE_NO_SYNC = suite("02", 3, ch02.check_no_syncs, NO_SYNC_ANSWERS)


@pytest.mark.exercise("02", 3)
def test_lab02_exercise3_no_syncs(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_NO_SYNC.lab, SUITE_NO_SYNC.number, SUITE_NO_SYNC.checker, SUITE_NO_SYNC.answers)
    assert not wrong, "\n".join(wrong)


def _sweep(make_step, timer):
    import numpy as np

    batches = [2**k for k in range(13)]
    step_us = [timer(make_step(b)) for b in batches]
    return batches, step_us, float(np.median(step_us[:3]))


def _throughput(step):
    from launchlab import timing

    return timing.launch_throughput_us(step, launches=20, rounds=10).median_us


def _flat_until(batches, step_us, floor, factor=1.5, before=True):
    above = [us > factor * floor for us in step_us]
    rise = next(i for i in range(len(batches) + 1) if all(above[i:]))
    return batches[max(rise - 1, 0)] if before else batches[min(rise, len(batches) - 1)]


def flat_right(make_step):
    """Right, written differently: walk back from the largest batch while the steps stay above 1.5x the floor."""
    batches, step_us, floor = _sweep(make_step, _throughput)
    i = len(batches)
    while i > 0 and step_us[i - 1] > 1.5 * floor:
        i -= 1
    return batches[max(i - 1, 0)]


def _enqueue(step):
    from launchlab import timing

    return timing.enqueue_us(step, launches=20, rounds=10).median_us


FLAT_ANSWERS = [
    Answer("walk back from the largest batch", "right", flat_right),
    Answer("the solution's rule", "right", lambda make_step: _flat_until(*_sweep(make_step, _throughput))),
    Answer("the first batch of the rise, not the one before", "classic",
           lambda make_step: _flat_until(*_sweep(make_step, _throughput), before=False)),
    Answer("timed by enqueue cost: no synchronisation", "method",
           lambda make_step: _flat_until(*_sweep(make_step, _enqueue))),
    Answer("2.5x the floor instead of 1.5x", "method",
           lambda make_step: _flat_until(*_sweep(make_step, _throughput), factor=2.5)),
    Answer("rows counted in elements (x width 1024)", "unit",
           lambda make_step: 1024 * _flat_until(*_sweep(make_step, _throughput))),
    Answer("the reference run's 1,024 typed in", "hard-coded", lambda make_step: 1024),
    Answer("the smallest batch", "structure", lambda make_step: 1),
    Answer("as a float", "bad value", lambda make_step: float(_flat_until(*_sweep(make_step, _throughput)))),
    Answer("NaN", "bad value", lambda make_step: float("nan")),
]
SUITE_FLAT = suite("02", 4, ch02.check_flat_until, FLAT_ANSWERS)


@pytest.mark.exercise("02", 4)
@pytest.mark.gpu
def test_lab02_exercise4_flat_until(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_FLAT.lab, SUITE_FLAT.number, SUITE_FLAT.checker, SUITE_FLAT.answers, trials=2)
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("02", 4)
@pytest.mark.gpu
def test_lab02_exercise4_solution_passes_five_times_out_of_five(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")  # a FAIL raises
    for _ in range(5):
        assert ch02.check_flat_until(lambda make_step: _flat_until(*_sweep(make_step, _throughput)))
