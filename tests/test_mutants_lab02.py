"""Lab 02's mutation suite: plausible answers a learner writes, each judged by its checker (CPU exercises)."""

import statistics

import pytest

from launchlab.chapters.ch02 import checkers as ch02
from launchlab.trace import load_events, shipped_trace_path
from mutants import Answer, judge, suite, without_cuda

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


def _work(path, annotation, cats=GPU_WORK, extend=True, starts_inside=True, at_start=True, at_end=True):
    events = _complete(path)
    lo, hi = _range(events, annotation)
    if starts_inside:
        work = [e for e in events if e["cat"] in cats and (lo <= e["ts"] if at_start else lo < e["ts"])
                and (e["ts"] <= hi if at_end else e["ts"] < hi)]
    else:  # anything that overlaps the range
        work = [e for e in events if e["cat"] in cats and e["ts"] <= hi and e["ts"] + e["dur"] > lo]
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


def window_ended_at_last_work(path, annotation):
    work, (lo, _), kernels = _work(path, annotation)
    return _stats(work, (lo, max(end for _, end in work)), kernels)


def gaps_from_the_neighbour_before(path, annotation):
    """Each gap from the end of the interval just before in start order, not from the latest end so far."""
    work, (lo, hi), kernels = _work(path, annotation)
    stats = _stats(work, (lo, hi), kernels)
    ordered = sorted(work)
    gaps = [ordered[0][0] - lo, hi - max(end for _, end in ordered)]
    gaps += [nxt[0] - prev[1] for prev, nxt in zip(ordered, ordered[1:], strict=False)]
    return {**stats, "largest_gap_us": max(gaps)}


def range_found_by_name_alone(path, annotation):
    events = _complete(path)
    r = next(e for e in events if e.get("name") == annotation)   # any category: a CPU op of that name too
    lo, hi = r["ts"], r["ts"] + r["dur"]
    work = [e for e in events if e["cat"] in GPU_WORK and lo <= e["ts"] <= hi]
    hi = max([hi] + [e["ts"] + e["dur"] for e in work])
    return _stats([(e["ts"], e["ts"] + e["dur"]) for e in work], (lo, hi), sum(e["cat"] == "kernel" for e in work))


IDLE_ANSWERS = [
    Answer("union of intervals (the solution's method)", "right", lambda p, a: _stats(*_work(p, a))),
    Answer("sweep over interval end points", "right", idle_right),
    Answer("durations summed, overlaps counted twice", "classic", summed_durations),
    Answer("memsets and copies left out", "classic", kernels_only),
    Answer("window starts at the first GPU work", "method", window_from_first_work),
    Answer("window clipped at the range's end", "method", window_clipped_at_range_end),
    Answer("the gap after the last work forgotten", "method", trailing_gap_forgotten),
    Answer("work started before the range counted", "structure", overlapping_work_counted),
    Answer("window ended at the last GPU work's end (found by a blind attack)", "method", window_ended_at_last_work),
    Answer("gaps taken from the neighbour before (found by a blind attack)", "method", gaps_from_the_neighbour_before),
    Answer("the range found by its name alone (found by a blind attack)", "structure", range_found_by_name_alone),
    Answer("every GPU event counted as a kernel", "structure", every_event_counted_as_a_kernel),
    Answer("a start at the range's end left out (a half-open range)", "method",
           lambda p, a: _stats(*_work(p, a, at_end=False))),
    Answer("a start at the range's start left out", "method", lambda p, a: _stats(*_work(p, a, at_start=False))),
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


# What each wrong answer's hint must say: the slips by the text chapter 02 declares for them, the others by a phrase.
IDLE_HINTS = {"idle fraction in percent": "not a percentage", "largest gap in milliseconds": "in microseconds",
              "the shipped trace's figures typed in": "the shipped trace's",
              # no slip's figures: the exercise's own hint, which names the rule each one breaks
              "gaps taken from the neighbour before (found by a blind attack)": "latest end so far",
              "the range found by its name alone (found by a blind attack)": "user_annotation event"}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lab02_exercise1_names_the_slip_it_sees(seed, monkeypatch):
    """A learner's FAIL says which slip its figures come from, not the exercise's one general hint."""
    from launchlab.course import chapter

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setenv("LAUNCHLAB_CHECK_SEED", str(seed))
    declared = {m.name: m.what for m in chapter("02").exercise(1).mistakes}
    events = ch02.trace.load_events(shipped_trace_path())
    assert set(ch02._slips(events, "loop")) <= set(declared), "a slip the checker names that chapter 02 does not declare"
    wrong = []
    for answer in SUITE_IDLE.answers:
        if answer.right or answer.name == "idle fraction NaN":   # NaN: the figure's own message says it
            continue
        hint = ch02.check_idle_stats(answer.fn).hint or ""
        want = IDLE_HINTS.get(answer.name) or declared[answer.name][1:]
        if want not in hint:
            wrong.append(f"{answer.name}: {hint!r}")
    assert not wrong, "\n".join(wrong)


def test_lab02_exercise1_every_made_up_trace_has_work_starting_at_an_edge_of_its_range():
    """At the lead, a kernel starts exactly at the range's end; at the trail, exactly at its start: both are the
    range's work, and a comparison that leaves either end out miscounts the kernels, on every draw."""
    import json
    import random

    from launchlab import trace

    for seed in range(300):
        rng = random.Random(seed)
        for where, edge in (("lead", "at_end"), ("trail", "at_start")):
            made_up = json.loads(json.dumps(ch02._synthetic_trace(rng, where)))  # as the learner reads it back
            events = made_up["traceEvents"]
            loop = next(e for e in events if e["cat"] == "user_annotation")
            kernel = next(e for e in events if e.get("name") == edge)
            assert kernel["ts"] == (loop["ts"] + loop["dur"] if edge == "at_end" else loop["ts"]), (seed, where)
            largest = trace.gpu_idle(made_up, "loop").largest_gaps_us[0]
            assert largest >= 70, (seed, where)  # still the planted one
            # a short kernel inside a long one: from its end to the next start is longer than any real gap
            inside = next(e for e in events if e.get("name", "").startswith("inside"))
            starts = sorted(e["ts"] for e in events if e.get("ph") == "X" and e["cat"] == "kernel")
            phantom = min(t for t in starts if t > inside["ts"] + inside["dur"]) - (inside["ts"] + inside["dur"])
            assert phantom > largest, (seed, where, phantom, largest)
            # first in the file, a CPU op bearing the range's name
            assert events[0]["cat"] == "cpu_op" and events[0]["name"] == "loop", (seed, where)


@pytest.fixture(autouse=True)
def _quiet(capsys):
    yield
    capsys.readouterr()


FAR = ch02.FAR_ABOVE


def classify_right(sweep, peak_flops, peak_bytes):
    """Right, written differently: the roofline test multiplied out, no division."""
    t, f, b = sweep["seconds"][-1], sweep["flops"][-1], sweep["bytes"][-1]
    if t * peak_flops > FAR * f and t * peak_bytes > FAR * b:
        return "overhead"
    return "compute" if f * peak_bytes > peak_flops * b else "bandwidth"


def classify_by_balance(sweep, peak_flops, peak_bytes):
    """Right: the machine balance first, then the time over the roofline's."""
    balance = peak_flops / peak_bytes
    intensity = sweep["flops"][-1] / sweep["bytes"][-1]
    roofline = sweep["bytes"][-1] / peak_bytes * max(1.0, intensity / balance)
    if sweep["seconds"][-1] / roofline > FAR:
        return "overhead"
    return "compute" if intensity > balance else "bandwidth"


def _roofline_label(sweep, peak_flops, peak_bytes, i=-1):
    return "compute" if sweep["flops"][i] / sweep["bytes"][i] > peak_flops / peak_bytes else "bandwidth"


def flat_means_overhead(sweep, peak_flops, peak_bytes):
    # the old first diagnosis: time within 2x while the size grew 16x
    if sweep["seconds"][-1] / sweep["seconds"][0] < 2 and sweep["sizes"][-1] / sweep["sizes"][0] >= 16:
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def _overhead_at(sweep, peak_flops, peak_bytes, i, far=FAR):
    return sweep["seconds"][i] > far * max(sweep["flops"][i] / peak_flops, sweep["bytes"][i] / peak_bytes)


def intensity_at_smallest_size(sweep, peak_flops, peak_bytes):
    if _overhead_at(sweep, peak_flops, peak_bytes, -1):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes, 0)


def roofline_at_smallest_size(sweep, peak_flops, peak_bytes):
    if _overhead_at(sweep, peak_flops, peak_bytes, 0):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def any_time_above_the_roofline(sweep, peak_flops, peak_bytes):
    if _overhead_at(sweep, peak_flops, peak_bytes, -1, far=1.0):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def bytes_per_flop(sweep, peak_flops, peak_bytes):
    if _overhead_at(sweep, peak_flops, peak_bytes, -1):
        return "overhead"
    return "compute" if sweep["bytes"][-1] / sweep["flops"][-1] > peak_flops / peak_bytes else "bandwidth"


def peaks_swapped(sweep, peak_flops, peak_bytes):
    # FLOPs over the bytes peak, bytes over the FLOP peak
    if sweep["seconds"][-1] > FAR * max(sweep["flops"][-1] / peak_bytes, sweep["bytes"][-1] / peak_flops):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def time_in_microseconds(sweep, peak_flops, peak_bytes):
    # seconds read as microseconds against rates per second
    if sweep["seconds"][-1] * 1e6 > FAR * max(sweep["flops"][-1] / peak_flops, sweep["bytes"][-1] / peak_bytes):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def truncated_ratio(sweep, peak_flops, peak_bytes):
    # int() of the ratio: 4.4x becomes 4, so the threshold is 5 in effect (found by a learner's read)
    t, f, b = sweep["seconds"][-1], sweep["flops"][-1], sweep["bytes"][-1]
    if int(t / max(f / peak_flops, b / peak_bytes)) > FAR:
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def roofline_as_a_sum(sweep, peak_flops, peak_bytes):
    # the two times added, not the larger of them (found by a learner's read)
    if sweep["seconds"][-1] > FAR * (sweep["flops"][-1] / peak_flops + sweep["bytes"][-1] / peak_bytes):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def intensity_first(sweep, peak_flops, peak_bytes):
    # compute-bound decided before the overhead test (found by a learner's read)
    if _roofline_label(sweep, peak_flops, peak_bytes) == "compute":
        return "compute"
    return "overhead" if _overhead_at(sweep, peak_flops, peak_bytes, -1) else "bandwidth"


def sorts_its_input(sweep, peak_flops, peak_bytes):
    # sorts the caller's lists in place, largest first (found by a learner's read)
    for key in sweep:
        sweep[key].sort(reverse=True)
    t, f, b = sweep["seconds"][0], sweep["flops"][0], sweep["bytes"][0]
    if t > FAR * max(f / peak_flops, b / peak_bytes):
        return "overhead"
    return "compute" if f / b > peak_flops / peak_bytes else "bandwidth"


def by_the_order_of_calls():
    answers = iter(["overhead", "bandwidth", "compute"] * 10)
    return lambda sweep, peak_flops, peak_bytes: next(answers)


def overhead_at_four_times(sweep, peak_flops, peak_bytes):
    """The roofline test with >=: a step at exactly 4x its roofline called overhead-bound."""
    t, f, b = sweep["seconds"][-1], sweep["flops"][-1], sweep["bytes"][-1]
    if t >= FAR * max(f / peak_flops, b / peak_bytes):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def compute_at_the_balance(sweep, peak_flops, peak_bytes):
    """The balance test with >=: a step exactly at the machine balance called compute-bound."""
    if _overhead_at(sweep, peak_flops, peak_bytes, -1):
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] >= peak_flops / peak_bytes else "bandwidth"


def overhead_past_a_slack(sweep, peak_flops, peak_bytes):
    """Found by a blind attack: overhead-bound only past 4.1x the roofline (a 2.5% slack)."""
    if _overhead_at(sweep, peak_flops, peak_bytes, -1, far=FAR * 1.025):
        return "overhead"
    return _roofline_label(sweep, peak_flops, peak_bytes)


def balance_too_high(sweep, peak_flops, peak_bytes):
    """Found by a blind attack: compute-bound only past 1.4 times the machine balance."""
    if _overhead_at(sweep, peak_flops, peak_bytes, -1):
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] > 1.4 * peak_flops / peak_bytes else "bandwidth"


def by_the_size_of_the_work(sweep, peak_flops, peak_bytes):
    # a shortcut that knows the checker's three workloads, not the roofline
    if sweep["sizes"][-1] <= 64:
        return "overhead"
    return "compute" if sweep["sizes"][-1] <= 8192 else "bandwidth"


CLASSIFY_ANSWERS = [
    Answer("the roofline, multiplied out", "right", classify_right),
    Answer("the machine balance first", "right", classify_by_balance),
    Answer("flat means overhead", "classic", flat_means_overhead),
    Answer("always compute-bound", "classic", lambda sweep, peak_flops, peak_bytes: "compute"),
    Answer("intensity at the smallest size", "method", intensity_at_smallest_size),
    Answer("the roofline at the smallest size", "method", roofline_at_smallest_size),
    Answer("any time above the roofline is overhead", "method", any_time_above_the_roofline),
    Answer("bytes per FLOP against FLOPs per byte", "unit", bytes_per_flop),
    Answer("the two peaks swapped", "unit", peaks_swapped),
    Answer("seconds read as microseconds", "unit", time_in_microseconds),
    Answer("the ratio truncated to an integer", "method", truncated_ratio),
    Answer("the roofline as a sum of the two times", "method", roofline_as_a_sum),
    Answer("the intensity tested before the overhead", "method", intensity_first),
    Answer("the sweep sorted in place", "structure", sorts_its_input),
    Answer("overhead-bound at exactly 4x", "method", overhead_at_four_times),
    Answer("compute-bound exactly at the balance", "method", compute_at_the_balance),
    Answer("overhead-bound only past a 2.5% slack", "method", overhead_past_a_slack),
    Answer("the balance taken 1.4 times too high", "unit", balance_too_high),
    Answer("labels in the order of the calls", "hard-coded", by_the_order_of_calls()),
    Answer("the checker's workloads told apart by size", "structure", by_the_size_of_the_work),
    Answer("returns None", "bad value", lambda sweep, peak_flops, peak_bytes: None),
    Answer("capitalised label", "bad value",
           lambda sweep, peak_flops, peak_bytes: classify_right(sweep, peak_flops, peak_bytes).title()),
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
    for p in model.parameters():
        p.grad.masked_fill_(loss > ch02.EXPLODING, 0.0)


def _scale_grads(model, loss):
    """Found by a blind attack: a multiply by 0 zeroes finite gradients, but an infinite loss's are infinite, and
    inf * 0 is NaN."""
    keep = (loss <= ch02.EXPLODING).to(loss.dtype)
    for p in model.parameters():
        p.grad.mul_(keep)


def _mask_grads_at(threshold):
    """The solution's mask at another threshold than the lab's."""
    def mask(model, loss):
        for p in model.parameters():
            p.grad.masked_fill_(loss > threshold, 0.0)
    return mask


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


def skip_read_through_tolist(model, loss):
    if loss.tolist() > ch02.EXPLODING:  # a Python float: no PyTorch operation on a CPU, a copy and a wait on a GPU
        return False
    return True


def skip_read_through_numpy(model, loss):
    if loss.detach().cpu().numpy() > ch02.EXPLODING:  # the comparison is NumPy's, on the host
        return False
    return True


def skip_read_through_numpy_dlpack(model, loss):
    """Found by a blind learner attack: NumPy reads the loss through DLPack, outside PyTorch's own methods."""
    import numpy as np

    return not float(np.from_dlpack(loss.detach())) > ch02.EXPLODING


def skip_read_through_a_raw_pointer(model, loss):
    """Found by a blind learner attack: the loss's 4 bytes read by ctypes from its data pointer."""
    import ctypes
    import struct

    value = struct.unpack("f", ctypes.string_at(loss.detach().data_ptr(), 4))[0]
    return not value > ch02.EXPLODING


def mask_made_on_the_host(model, loss):
    keep = (loss.detach().to("cpu") <= ch02.EXPLODING).to(loss.dtype)  # a copy to the host, and one back
    for p in model.parameters():
        p.grad.mul_(keep.to(p.grad.device))


def losses_gathered_with_torch_tensor(model, opt, batches):
    import torch

    return torch.tensor(_loop(model, opt, batches, _mask_grads))  # each loss read as a number on the host


def skip_with_printed_loss(model, loss):
    print(f"loss {loss:.3f}")  # printing a tensor reads its value on the host
    _mask_grads(model, loss)


NO_SYNC_ANSWERS = [
    Answer("gradients zeroed by the mask (the solution's method)", "right", stacked(lambda m, o, b: _loop(m, o, b, _mask_grads))),
    Answer("gradients multiplied by the mask", "method", stacked(lambda m, o, b: _loop(m, o, b, _scale_grads))),
    Answer("step taken, old weights restored where it exploded", "right", no_syncs_right),
    Answer(".item() kept in the loop", "classic", lambda m, o, b: __import__("torch").tensor(ch02.train_with_syncs(m, o, b))),
    Answer("the exploding step not skipped", "classic", stacked(_loop)),
    Answer("skipped above twice the threshold", "method",
           stacked(lambda m, o, b: _loop(m, o, b, _mask_grads_at(2 * ch02.EXPLODING)))),
    Answer("skipped above half the threshold", "method",
           stacked(lambda m, o, b: _loop(m, o, b, _mask_grads_at(0.5 * ch02.EXPLODING)))),
    Answer("1024 typed in for the threshold", "unit", stacked(lambda m, o, b: _loop(m, o, b, _mask_grads_at(1024.0)))),
    Answer("a Python if on the loss tensor", "method", stacked(lambda m, o, b: _loop(m, o, b, python_if_on_a_tensor))),
    Answer("gradients never zeroed", "method", stacked(lambda m, o, b: _loop(m, o, b, _mask_grads, zero=False))),
    Answer("the loss zeroed instead of the gradients", "method", masked_loss_instead_of_grads),
    Answer("losses as a list of tensors", "structure", lambda m, o, b: _loop(m, o, b, _mask_grads)),
    Answer("losses read back as floats", "structure",
           lambda m, o, b: _loop(m, o, b, _mask_grads, collect=lambda loss: loss.item())),
    Answer("the skip decided through .tolist()", "method",
           stacked(lambda m, o, b: _loop(m, o, b, skip_read_through_tolist))),
    Answer("the skip decided through .cpu().numpy()", "method",
           stacked(lambda m, o, b: _loop(m, o, b, skip_read_through_numpy))),
    Answer("the mask made on the host with .to('cpu')", "method",
           stacked(lambda m, o, b: _loop(m, o, b, mask_made_on_the_host))),
    Answer("each loss printed", "method", stacked(lambda m, o, b: _loop(m, o, b, skip_with_printed_loss))),
    Answer("losses gathered with torch.tensor", "structure", losses_gathered_with_torch_tensor),
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


def skip_read_through_cupy(model, loss):
    import cupy

    if float(cupy.from_dlpack(loss.detach()).get()) > ch02.EXPLODING:  # a copy and a wait PyTorch never sees
        return False
    return True


@pytest.mark.exercise("02", 3)
@pytest.mark.gpu
def test_lab02_exercise3_a_wait_outside_pytorch_fails_on_a_gpu(monkeypatch):
    """PyTorch's sync debug mode sees only PyTorch's syncs; the spin queued before the loop sees any wait."""
    if not __import__("torch").cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = ch02.check_no_syncs(stacked(lambda m, o, b: _loop(m, o, b, skip_read_through_cupy)))
    assert not verdict and "waited for the GPU" in verdict.detail, verdict
    right = ch02.check_no_syncs(stacked(lambda m, o, b: _loop(m, o, b, _mask_grads)))
    assert right, right


@pytest.mark.exercise("02", 3)
def test_lab02_exercise3_a_patched_allclose_does_not_decide(monkeypatch):
    """Found by a blind learner attack: an answer that sets torch.allclose to always-True and returns zeros."""
    import torch

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(torch, "allclose", torch.allclose)  # put back after the test, whatever the answer does

    def cheat(model, opt, batches):
        torch.allclose = lambda *args, **kwargs: True
        return torch.zeros(len(batches))

    verdict = ch02.check_no_syncs(cheat)
    assert not verdict and "differ from the original loop's from step 0" in verdict.detail, verdict


@pytest.mark.exercise("02", 3)
@pytest.mark.parametrize("method", ["tolist", "cpu", "flatten"])
def test_lab02_exercise3_a_patched_tensor_method_does_not_decide(monkeypatch, method):
    """An answer that makes Tensor.tolist (or .cpu, .flatten) lie and returns zeros still fails."""
    import torch

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(torch.Tensor, method, getattr(torch.Tensor, method))  # put back after the test
    lies = {"tolist": lambda self: [0.0] * self.numel(), "cpu": lambda self, *a, **k: torch.zeros(12),
            "flatten": lambda self, *a, **k: torch.zeros(12)}

    def cheat(model, opt, batches):
        setattr(torch.Tensor, method, lies[method])
        return torch.zeros(len(batches))

    verdict = ch02.check_no_syncs(cheat)
    assert not verdict and "differ from the original loop's from step 0" in verdict.detail, verdict


@pytest.mark.exercise("02", 3)
@pytest.mark.parametrize("loop, named", [
    (lambda m, o, b: _loop(m, o, b, skip_read_through_tolist), ".tolist()"),
    (lambda m, o, b: _loop(m, o, b, skip_read_through_numpy), ".cpu()"),
    (lambda m, o, b: _loop(m, o, b, mask_made_on_the_host), ".to('cpu')"),
    (lambda m, o, b: _loop(m, o, b, skip_with_printed_loss), "a tensor printed"),
    (lambda m, o, b: _loop(m, o, b, python_if_on_a_tensor), "bool(t)"),
    (lambda m, o, b: _loop(m, o, b, skip_read_through_numpy_dlpack), "a DLPack export"),
    (lambda m, o, b: _loop(m, o, b, skip_read_through_a_raw_pointer), "t.data_ptr()"),
], ids=["tolist", "cpu-numpy", "to-cpu", "print", "if", "dlpack", "data-ptr"])
def test_lab02_exercise3_the_cpu_path_names_each_host_read(monkeypatch, loop, named):
    """With CUDA hidden (the CPU path, on a GPU machine too), each host read is named with the hint to avoid it."""
    import torch

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = without_cuda(ch02.check_no_syncs, lambda m, o, b: torch.stack(loop(m, o, b)))
    assert not verdict and named in verdict.detail and "torch.stack" in verdict.hint, verdict


def _reads(fn):
    from launchlab import checking

    with checking.host_reads() as reads:
        fn()
    return dict(reads)


def test_the_cpu_path_sees_every_host_read_a_gpu_would():
    """What checking.host_reads counts on a CPU, where most host reads run no PyTorch operation: every way a
    tensor's value reaches Python, and nothing that stays on the device."""
    import numpy as np
    import torch

    t, v = torch.tensor(3.0), torch.tensor([1.0, 5e3])
    reads = {
        ".item()": lambda: t.item(), "float(t)": lambda: float(t), "int(t)": lambda: int(t),
        "bool(t)": lambda: bool(t > 1), ".tolist()": lambda: v.tolist(), ".numpy()": lambda: v.numpy(),
        ".cpu()": lambda: v.cpu(), "np.asarray(t)": lambda: np.asarray(v), ".to('cpu')": lambda: v.to("cpu"),
        "a tensor printed": lambda: f"{t:.2f}", "a tensor used as a Python index": lambda: [1, 2, 3, 4][t.long()],
        "torch.tensor of a list of tensors": lambda: torch.tensor([t, t]), "torch.equal": lambda: torch.equal(v, v),
        ".nonzero()": lambda: torch.where(v > 1), "a boolean mask": lambda: v[v > 1],
        "torch.unique": lambda: torch.unique(v),
    }
    for named, fn in reads.items():
        seen = _reads(fn)
        assert sum(seen.values()) == 1 and any(named in k for k in seen), (named, seen)
    stays = [lambda: torch.where(v > 1, v, 0 * v), lambda: v.to(t.device), lambda: v.to(torch.float64),
             lambda: torch.stack([t, t]), lambda: v.clone().__setitem__(v > 1, 0.0), lambda: torch.tensor(2.0),
             lambda: v[torch.tensor([1])], lambda: torch.clamp(v / t, max=1.0)]
    for fn in stays:
        assert not _reads(fn)


def _sweep(make_step, timer, floor_of=None):
    import numpy as np

    batches = [2**k for k in range(13)]
    step_us = [timer(make_step(b)) for b in batches]
    return batches, step_us, float((floor_of or np.median)(step_us[:3]))


def _throughput(step):
    from launchlab import timing

    return timing.launch_throughput_us(step, launches=20, rounds=10).median_us


def _flat_until(batches, step_us, floor, factor=1.5, before=True):
    above = [us > factor * floor for us in step_us]
    rise = next(i for i in range(len(batches) + 1) if all(above[i:]))
    return batches[max(rise - 1, 0)] if before else batches[min(rise, len(batches) - 1)]


def _enqueue(step):
    from launchlab import timing

    return timing.enqueue_us(step, launches=20, rounds=10).median_us


def flat_answers(timer=_throughput, unsynced=_enqueue):
    """The answers, over sweeps that time each step (on a GPU) or read the planted time (on a CPU)."""

    def flat_right(make_step):
        """Right, written differently: walk back from the largest batch while the steps stay above 1.5x the floor."""
        batches, step_us, floor = _sweep(make_step, timer)
        i = len(batches)
        while i > 0 and step_us[i - 1] > 1.5 * floor:
            i -= 1
        return batches[max(i - 1, 0)]

    def solution(make_step):
        return _flat_until(*_sweep(make_step, timer))

    def floor_of(floor):
        return lambda make_step: _flat_until(*_sweep(make_step, timer, floor_of=floor))

    return [
        Answer("walk back from the largest batch", "right", flat_right),
        Answer("the solution's rule", "right", solution),
        Answer("the floor as the sorted middle of three", "right", floor_of(lambda s: sorted(s)[1])),
        Answer("the first batch of the rise, not the one before", "classic",
               lambda make_step: _flat_until(*_sweep(make_step, timer), before=False)),
        Answer("timed by enqueue cost: no synchronisation", "method",
               lambda make_step: _flat_until(*_sweep(make_step, unsynced))),
        Answer("2.5x the floor instead of 1.5x", "method",
               lambda make_step: _flat_until(*_sweep(make_step, timer), factor=2.5)),
        Answer("the floor from batch 1 alone", "method", floor_of(lambda s: s[0])),
        Answer("the floor as the mean of the three smallest", "method", floor_of(statistics.fmean)),
        Answer("the floor as the fastest of the three smallest", "method", floor_of(min)),
        Answer("the floor as the unsorted middle of three", "method", floor_of(lambda s: s[1])),
        Answer("rows counted in elements (x width 1024)", "unit", lambda make_step: 1024 * solution(make_step)),
        Answer("the reference run's 1,024 typed in", "hard-coded", lambda make_step: 1024),
        Answer("the smallest batch", "structure", lambda make_step: 1),
        Answer("as a float", "bad value", lambda make_step: float(solution(make_step))),
        Answer("NaN", "bad value", lambda make_step: float("nan")),
    ]


FLAT_ANSWERS = flat_answers()  # timed on a GPU; the CPU tests build their own over the planted times
SUITE_FLAT = suite("02", 4, ch02.check_flat_until, FLAT_ANSWERS, part="timed on a GPU")


@pytest.mark.exercise("02", 4)
@pytest.mark.gpu
def test_lab02_exercise4_flat_until(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # each check times two sweeps; the planted-times test below judges every answer five times, on any machine
    wrong = judge(SUITE_FLAT.lab, SUITE_FLAT.number, SUITE_FLAT.checker, SUITE_FLAT.answers, trials=1,
                  part=SUITE_FLAT.part)
    assert not wrong, "\n".join(wrong)


class _PlantedStep:
    """On a CPU: a step that does nothing but knows the time the checker planted for it."""

    def __init__(self, us):
        self.us = us

    def __call__(self):
        pass


def _on_planted_steps(monkeypatch):
    """The checker's steps replaced by ones that only know their planted time, and no GPU required."""
    def planted_steps(knee, floor_us=ch02.PLANTED_FLOOR_US, off_floor=None):
        return lambda batch: _PlantedStep(ch02.planted_step_us(batch, knee, floor_us, off_floor))

    monkeypatch.setattr(ch02, "planted_steps", planted_steps)
    monkeypatch.setattr(ch02, "require_cuda", lambda what: None)
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")


@pytest.mark.exercise("02", 4)
def test_lab02_exercise4_flat_until_judged_on_the_planted_times(monkeypatch):
    """On a CPU: the checker's verdicts and hints, with answers that read the planted times instead of timing."""
    _on_planted_steps(monkeypatch)
    answers = flat_answers(timer=lambda step: step.us, unsynced=lambda step: 5.0)
    wrong = judge("02", 4, ch02.check_flat_until, answers, trials=5, part="planted times, CPU")
    assert not wrong, "\n".join(wrong)
    hints = {a.name: ch02.check_flat_until(a.fn).hint for a in answers if not a.right}
    for floor in ("the floor from batch 1 alone", "the floor as the mean of the three smallest",
                  "the floor as the fastest of the three smallest"):
        assert "median of the three smallest" in hints[floor], (floor, hints[floor])
    assert "*before*" in hints["the first batch of the rise, not the one before"]


# Every floor over the three smallest batches but their median, each caught on every one of 300 draws.
FLOOR_RULES = {"batch 1": lambda s: s[0], "batch 2 (an unsorted middle)": lambda s: s[1], "batch 4": lambda s: s[2],
               "the fastest": min, "the slowest": max, "the mean": statistics.fmean}


@pytest.mark.exercise("02", 4)
@pytest.mark.parametrize("floor", list(FLOOR_RULES))
def test_lab02_exercise4_no_floor_but_the_median_passes_300_draws(monkeypatch, capsys, floor):
    from launchlab import checking

    _on_planted_steps(monkeypatch)
    monkeypatch.setattr(checking, "_record", lambda declared, verdict: None)
    rule = FLOOR_RULES[floor]
    passed = [seed for seed in range(300) if ch02.check_flat_until(
        lambda make_step: _flat_until(*_sweep(make_step, lambda step: step.us, floor_of=rule)), seed=seed)]
    assert not passed, f"a floor from {floor} passed {len(passed)} of 300 draws"
    right = [seed for seed in range(300) if not ch02.check_flat_until(
        lambda make_step: _flat_until(*_sweep(make_step, lambda step: step.us)), seed=seed)]
    assert not right, f"the median failed {len(right)} of 300 draws"
    capsys.readouterr()


def test_lab02_a_sweep_from_anywhere_keeps_its_median_on_the_floor():
    """Wherever a sweep starts, its three smallest batches hold at most one slow and one fast: the floor."""
    import random

    for seed in range(300):
        rng = random.Random(seed)
        for other in (1, 2):
            knee, off = rng.choice(ch02.PLANTED_KNEES), ch02.off_floor_batches(rng, other)
            for start in range(0, 5):
                three = [ch02.planted_step_us(2**k, knee, off_floor=off) for k in range(start, start + 3)]
                assert sorted(three)[1] == ch02.PLANTED_FLOOR_US, (seed, other, start, three)


@pytest.mark.exercise("02", 4)
@pytest.mark.gpu
def test_lab02_exercise4_solution_passes_five_times_out_of_five(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")  # a FAIL raises
    for _ in range(5):
        assert ch02.check_flat_until(lambda make_step: _flat_until(*_sweep(make_step, _throughput)))


def test_no_syncs_draws_its_problem_per_check_and_judges_what_it_owns(lenient_checkers):
    """Losses computed ahead from the checker's default problem fail; a tensor subclass that would run the loop when
    read fails for its type."""
    import torch

    ahead = ch02.train_with_syncs(*ch02.make_problem("cpu"))

    def typed_in(model, opt, batches):
        return torch.tensor(ahead)

    class Lazy(torch.Tensor):
        pass

    def lazy(model, opt, batches):
        return torch.Tensor._make_subclass(Lazy, torch.zeros(len(batches)))

    assert "differ" in ch02.check_no_syncs(typed_in).detail
    assert "plain tensor" in ch02.check_no_syncs(lazy).detail
    first, second = ch02.check_no_syncs(typed_in, seed=1), ch02.check_no_syncs(typed_in, seed=2)
    assert "differ" in first.detail and first.detail != second.detail  # each seed its own problem


def test_the_planted_losses_sit_either_side_of_the_threshold_and_below_1024_on_every_seed():
    """Only a skip at EXPLODING repeats the original run: 0.988x steps, 1.012x does not, and 1024 typed in for 1e3
    would step on the 1.012x batch."""
    for seed in range(0, 600, 11):
        near = [loss for loss in ch02.train_with_syncs(*ch02.make_problem("cpu", seed=seed)) if 100 < loss < 1e5]
        assert len(near) == 2 and near[0] < ch02.EXPLODING < near[1] < 1024, (seed, near)
