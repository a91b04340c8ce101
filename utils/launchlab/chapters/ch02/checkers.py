"""Checkers for lab 02, "PyTorch dispatch overhead".

Exercises 1 to 3 run on the CPU too (a shipped GPU trace, CPU sweeps, CPU profiles); exercise 4 needs CUDA.
Each checker computes or measures its own reference in the same call.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from ... import checking, kernels, timing, trace
from ...checking import CheckFailed, exercise, number, require_cuda

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "EXPLODING",
    "check_classify",
    "check_flat_until",
    "check_idle_stats",
    "check_no_syncs",
    "train_with_syncs",
]

LABELS = ("overhead", "bandwidth", "compute")
# Host round trips a loop must not make, as the profiler records them: the aten ops behind .item() and bool(tensor).
# On a CPU, checking.host_reads sees the rest (.tolist(), .cpu(), .numpy(), ...), which run no aten op there.
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero")
EXPLODING = 1e3  # the loop skips a step whose loss is above this
NEAR_BELOW, NEAR_ABOVE = 0.988, 1.012  # two planted losses, as multiples of EXPLODING: a threshold outside them shows
BATCHES = [2**k for k in range(0, 13)]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---- exercise 1: idle time from a trace ------------------------------------------------------------------

def _synthetic_trace(rng: random.Random, largest_gap: str) -> dict:
    """A trace the checker makes up afresh, its largest gap planted at the "lead" or the "trail" of the window.

    Every hard case is in it: kernels on two streams that overlap, one long kernel with a short one nested inside
    it (so a gap taken from the neighbour before, not from the latest end so far, comes out longer than any real
    one), memsets and a copy (GPU work, not kernels), a kernel that starts before the range and runs into it and
    one that starts after it (neither is the range's work), CPU events, an instant event, and a CPU op listed first
    that bears the range's name (the range is a user_annotation). With the largest gap at the lead, the range ends
    while the last copy still runs, so the window extends past the range, and a kernel starts exactly at the
    range's end; at the trail, a kernel starts exactly at the range's start and the range ends after a long stretch
    with no GPU work. A start exactly at either end of the range is in it.
    """
    start = 1000.0
    events = [{"ph": "X", "cat": "kernel", "name": "before", "ts": start - 20.0, "dur": 30.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": start + 1.0, "dur": 30.0},
              {"ph": "i", "cat": "kernel", "name": "instant", "ts": start + 100.0}]
    t = start + (rng.uniform(70, 90) if largest_gap == "lead" else rng.uniform(12, 16))
    count = rng.randint(8, 14)
    nested_at = rng.randrange(2, count - 1)
    for i in range(count):
        dur = rng.uniform(2, 20)
        if i == nested_at:  # a long kernel, a short one on another stream inside it: longer than the largest gap
            dur = rng.uniform(130, 150)
            events.append({"ph": "X", "cat": "kernel", "name": f"inside{i}", "ts": t + 1.0, "dur": 3.0})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": t, "dur": dur})
        if i % 4 == 1 and i != nested_at:  # a kernel on a second stream, overlapping this one
            events.append({"ph": "X", "cat": "kernel", "name": f"side{i}", "ts": t + dur / 2, "dur": dur})
        if i % 3 == 2:  # a memset just after it: GPU work that is not a kernel
            events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": t + dur + 1.0, "dur": 4.0})
            dur += 5.0
        t += dur + rng.uniform(17, 40)
    copy_us = 40.0 if largest_gap == "lead" else 3.0  # at the lead, a long copy runs well past the range's end
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": t, "dur": copy_us})
    end = t + 1.0 if largest_gap == "lead" else t + copy_us + rng.uniform(70, 90)
    events.append({"ph": "X", "cat": "user_annotation", "name": "loop", "ts": start, "dur": end - start})
    if largest_gap == "lead":  # at the range's very end, inside the copy's span: only the kernel count shows it
        events.append({"ph": "X", "cat": "kernel", "name": "at_end", "ts": start + (end - start), "dur": 3.0})
    else:  # at the range's very start, well before the next one: the largest gap stays at the trail
        events.append({"ph": "X", "cat": "kernel", "name": "at_start", "ts": start, "dur": 2.0})
    events.append({"ph": "X", "cat": "kernel", "name": "after", "ts": end + 50, "dur": 50.0})
    rng.shuffle(events)
    # first in the file: a CPU op with the range's name, over the kernel started before the range
    events.insert(0, {"ph": "X", "cat": "cpu_op", "name": "loop", "ts": start - 30.0, "dur": 25.0})
    return {"traceEvents": events}


Figures = tuple[int, float, float]   # kernel_count, idle_fraction, largest_gap_us


def _figures(work: Sequence[trace.Interval], window: tuple[float, float], summed: bool = False,
             kernels: int | None = None) -> Figures:
    """A window's figures from its GPU work; `summed` adds durations instead of merging overlaps."""
    lo, hi = window
    busy, gaps = trace.busy_and_gaps(work, window)
    if summed:
        busy = sum(max(min(i.end_us, hi) - max(i.start_us, lo), 0.0) for i in work)
    count = sum(i.cat == "kernel" for i in work) if kernels is None else kernels
    return count, 1 - busy / (hi - lo), max(gaps, default=0.0)


def _slips(events: Sequence[dict], annotation: str) -> dict[str, tuple[Figures, str]]:
    """What each plausible slip makes of this trace, by the name chapter 02 declares it under, with its fix."""
    cpu = trace.annotation_range(events, annotation)
    work, (lo, hi) = trace.work_of_range(events, annotation)
    gpu = trace.intervals(events, trace.GPU_CATEGORIES)

    def inside(keep: Callable[[trace.Interval], bool]) -> Figures:
        mine = [i for i in gpu if keep(i)]
        return _figures(mine, (lo, max([cpu.end_us, *(i.end_us for i in mine)])))

    kernel_work = [i for i in work if i.cat == "kernel"]
    first = min((i.start_us for i in work), default=lo)
    last = max((i.end_us for i in work), default=lo)
    right = _figures(work, (lo, hi))
    inclusive = "a start exactly at either end of the range is in it: keep work with start <= ts <= end"
    return {
        "durations summed, overlaps counted twice": (
            _figures(work, (lo, hi), summed=True),
            "merge overlapping intervals before adding them up (sort by start; while the next one starts before the "
            "current one ends, extend it), so work on two streams at once counts once"),
        "memsets and copies left out": (
            _figures(kernel_work, (lo, max([cpu.end_us, *(i.end_us for i in kernel_work)]))),
            "GPU work is every complete event of category kernel, gpu_memcpy or gpu_memset: a copy or a memset keeps "
            "the GPU busy too"),
        "window starts at the first GPU work": (
            _figures(work, (first, hi)),
            "start the window at the range's start: the stretch before the first GPU work is idle time too"),
        "window clipped at the range's end": (
            _figures(work, (lo, cpu.end_us)),
            "end the window at the later of the range's end and the end of the GPU work started in it, and divide "
            "the idle time by that window's length (dividing by the range's length gives these figures too)"),
        "window ended at the last GPU work's end (found by a blind attack)": (
            _figures(work, (lo, last)),
            "end the window at the later of the range's end and the end of the GPU work started in it: a range "
            "that outlasts its work leaves the GPU idle until it ends"),
        "the gap after the last work forgotten": (
            (*right[:2], _figures(work, (lo, last))[2]),
            "count the gap from the last GPU work's end to the window's end among the gaps"),
        "work started before the range counted": (
            inside(lambda i: i.start_us <= cpu.end_us and i.end_us > cpu.start_us),
            "keep only the GPU work that starts inside the range: work started before it belongs to earlier code"),
        "a start at the range's end left out (a half-open range)": (
            inside(lambda i: cpu.start_us <= i.start_us < cpu.end_us), inclusive),
        "a start at the range's start left out": (inside(lambda i: cpu.start_us < i.start_us <= cpu.end_us), inclusive),
        "every GPU event counted as a kernel": (
            _figures(work, (lo, hi), kernels=len(work)),
            "kernel_count counts events of category kernel only: memsets and copies are GPU work, not kernels"),
    }


def _agrees(yours: Figures, other: Figures) -> bool:
    """Whether two sets of figures agree within the checker's tolerances."""
    return (yours[0] == other[0] and abs(yours[1] - other[1]) <= 0.005
            and abs(yours[2] - other[2]) <= 0.01 * other[2] + 0.01)


def _slip_hint(seen: list[tuple[Figures, Sequence[dict]]], annotation: str) -> str | None:
    """The hint for the one slip that gives every set of figures seen (each with its trace) and is wrong on at least
    one of them; None where none does, so that two slips at once get the exercise's hint, not a wrong one."""
    from ...course import chapter

    what = {m.name: m.what for m in chapter("02").exercise(1).mistakes}
    slips = [(_slips(events, annotation), trace.gpu_idle(list(events), annotation)) for _, events in seen]
    matches = []
    for name in slips[0][0]:
        figures = [(by_name[name][0], (g.kernel_count, g.idle_fraction, g.largest_gap_us)) for by_name, g in slips]
        if all(_agrees(yours, slip) for (yours, _), (slip, _) in zip(seen, figures, strict=True)) and any(
                not _agrees(slip, right) for slip, right in figures):
            matches.append((name, slips[0][0][name][1]))
    if not matches:
        return None
    name, fix = matches[0]
    also = "".join(f"; or one that {what[other][0].lower()}{what[other][1:].rstrip('.')}" for other, _ in matches[1:])
    return (f"your figures are those of an answer that {what[name][0].lower()}{what[name][1:].rstrip('.')}{also}. "
            f"Fix: {fix}.")


def _unit_hint(yours: Figures, right: Figures, shipped: Figures | None) -> str | None:
    """The hint for figures in the wrong unit, or the shipped trace's figures handed back for another trace."""
    if shipped is not None and _agrees(yours, shipped) and not _agrees(right, shipped):
        return ("your figures are the shipped trace's, on a trace the checker made up: compute them from the file "
                "at `path`, whatever trace it is")
    if _agrees((yours[0], yours[1] / 100, yours[2]), right):
        return "idle_fraction is a fraction between 0 and 1, not a percentage: divide by 100"
    if _agrees((yours[0], yours[1], yours[2] * 1e3), right):
        return "largest_gap_us is in microseconds, the unit of the trace's ts and dur: leave it unconverted"
    return None


def _read_figures(yours: object, which: str) -> Figures:
    """The learner's dict as figures, or CheckFailed saying what is wrong with its form."""
    if not isinstance(yours, dict):
        raise CheckFailed(f"{which}: gpu_idle_stats returned {type(yours).__name__}; return a dict")
    missing = {"kernel_count", "idle_fraction", "largest_gap_us"} - set(yours)
    if missing:
        raise CheckFailed(f"{which}: your dict lacks {sorted(missing)}")
    count = yours["kernel_count"]
    if isinstance(count, bool) or not isinstance(count, int) and not (isinstance(count, float) and count.is_integer()):
        raise CheckFailed(f"{which}: kernel_count is {count!r}; count the kernels (an int)")
    idle = number(yours["idle_fraction"], f"{which}: idle_fraction", positive=False)
    gap = number(yours["largest_gap_us"], f"{which}: largest_gap_us", "microseconds")
    return int(count), idle, gap


def _idle_problems(yours: Figures, expected: trace.GpuIdle) -> list[str]:
    """What differs between the learner's figures and the reference's, each in words."""
    count, idle, gap = yours
    problems = []
    if count != expected.kernel_count:
        problems.append(f"kernel_count {count!r}, expected {expected.kernel_count}")
    if not 0 <= idle <= 1:
        problems.append(f"idle_fraction {idle:.4g} is not a fraction between 0 and 1 (a percentage?)")
    elif abs(idle - expected.idle_fraction) > 0.005:
        problems.append(f"idle_fraction {idle:.4f}, expected {expected.idle_fraction:.4f}")
    if abs(gap - expected.largest_gap_us) > 0.01 * expected.largest_gap_us + 0.01:
        problems.append(f"largest_gap_us {gap:.2f}, expected {expected.largest_gap_us:.2f}"
                        + (" (milliseconds? the trace's times are microseconds)"
                           if abs(gap * 1e3 - expected.largest_gap_us) <= 0.01 * expected.largest_gap_us else ""))
    return problems


def _figures_or_none(gpu_idle_stats: Callable, path: str, which: str) -> Figures | None:
    """The learner's figures for another trace, for the hint alone: None where the answer cannot give them."""
    try:
        return _read_figures(gpu_idle_stats(path, "loop"), which)
    except Exception:   # the failure being reported is another trace's; this one only informs the hint
        return None


@exercise(1,
          "the window runs from the start of the 'loop' range (the user_annotation event of that name) to the later "
          "of the range's end and the end of the GPU work started in it; GPU work is every complete event of "
          "category kernel, gpu_memcpy or gpu_memset; merge overlapping intervals before adding them up (a gap "
          "starts where the latest end so far is), and count the gaps before the first work and after the last.")
def check_idle_stats(gpu_idle_stats: Callable[[str, str], dict]) -> str:
    shipped = trace.shipped_trace_path()
    known = trace.gpu_idle(shipped, "loop")
    known = (known.kernel_count, known.idle_fraction, known.largest_gap_us)   # a made-up trace's figures differ
    rng = checking.rng()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        traces = [("the shipped trace", str(shipped), trace.load_events(shipped))]
        for where in ("lead", "trail"):
            made_up = _synthetic_trace(rng, where)
            path = Path(tmp) / f"made_up_{where}.json"
            path.write_text(json.dumps(made_up))
            traces.append((f"a made-up trace, largest gap at the {where}", str(path), made_up["traceEvents"]))
        for k, (which, path, events) in enumerate(traces):
            expected = trace.gpu_idle(list(events), "loop")
            yours = _read_figures(gpu_idle_stats(path, "loop"), which)
            problems = _idle_problems(yours, expected)
            if problems:
                right = (expected.kernel_count, expected.idle_fraction, expected.largest_gap_us)
                others = [(_figures_or_none(gpu_idle_stats, p, w), e) for j, (w, p, e) in enumerate(traces) if j != k]
                seen = [(yours, events), *((f, e) for f, e in others if f is not None)]
                raise CheckFailed(f"{which}: " + "; ".join(problems),
                                  hint=_unit_hint(yours, right, known if k else None) or _slip_hint(seen, "loop"))
            lines.append(f"{which}: {expected.kernel_count} kernels, {expected.idle_fraction:.1%} idle, "
                         f"largest gap {expected.largest_gap_us:.1f} us")
    return "; ".join(lines)


# ---- exercise 2: classify workloads from their sweeps ----------------------------------------------------

FAR_ABOVE = 4  # a step that takes more than this many times what its work needs at the peaks is overhead-bound


def _reference_classify(sweep: dict, peak_flops: float, peak_bytes: float) -> str:
    """At the largest size: overhead-bound if the time is more than FAR_ABOVE times the roofline's (the larger of
    FLOPs at peak FLOP/s and bytes at peak bytes/s); else compute-bound if its FLOPs per byte exceed the machine
    balance, bandwidth-bound if not."""
    seconds, flops, nbytes = sweep["seconds"][-1], sweep["flops"][-1], sweep["bytes"][-1]
    if seconds > FAR_ABOVE * max(flops / peak_flops, nbytes / peak_bytes):
        return "overhead"
    return "compute" if flops / nbytes > peak_flops / peak_bytes else "bandwidth"


def measure_sweeps(device: str) -> dict[str, dict]:
    """Three real workloads, each swept over its own sizes: per-step seconds, FLOPs and bytes."""
    import torch

    gpu = device == "cuda"

    def sweep(sizes: Sequence[int], make: Callable[[int], Callable[[], object]],
              flops: Callable[[int], float], nbytes: Callable[[int], float]) -> dict:
        seconds = []
        for n in sizes:
            run = make(n)
            seconds.append(timing.launch_throughput_us(run, launches=20, rounds=5).median_us * 1e-6)
        return {"sizes": list(sizes), "seconds": seconds, "flops": [flops(n) for n in sizes],
                "bytes": [nbytes(n) for n in sizes]}

    def tiny_chain(n: int):
        x = torch.ones(n, device=device)
        return lambda: [x.mul_(1.0) for _ in range(10)]

    def add(n: int):
        x, y = torch.ones(n, device=device), torch.ones(n, device=device)
        z = torch.empty_like(x)
        return lambda: torch.add(x, y, out=z)

    def matmul(n: int):
        a = torch.randn(n, n, device=device)
        c = torch.empty_like(a)
        return lambda: torch.mm(a, a, out=c)

    return {
        "overhead": sweep([1, 4, 16, 64], tiny_chain, lambda n: 10 * n, lambda n: 80 * n),
        "bandwidth": sweep([2**k for k in ((22, 24, 26) if gpu else (18, 20, 22))], add,
                           lambda n: n, lambda n: 12 * n),
        "compute": sweep((1024, 2048, 4096) if gpu else (128, 256, 512), matmul,
                         lambda n: 2 * n**3, lambda n: 12 * n**2),
    }


def peaks_of(sweeps: dict[str, dict]) -> tuple[float, float]:
    """This machine's peak FLOP/s and peak bytes/s, from the largest matmul and the largest add of the sweeps."""
    compute, bandwidth = sweeps["compute"], sweeps["bandwidth"]
    return compute["flops"][-1] / compute["seconds"][-1], bandwidth["bytes"][-1] / bandwidth["seconds"][-1]


def _planted_sweeps(rng: random.Random) -> list[tuple[str, dict, float, float]]:
    """Sweeps whose answer is known by construction, each with the peaks (FLOP/s, bytes/s) it is judged at: a flat
    chain of tiny kernels; a flat step that streams the same large weights at every batch (a batch-1 decode: flat,
    yet bandwidth-bound); steps at a few times their roofline on both sides of FAR_ABOVE; a matmul whose intensity
    grows with its size, judged at machine balances on both sides of it; a streaming one."""
    peak_flops, peak_bytes = 5e13 * rng.uniform(0.8, 1.2), 3e12 * rng.uniform(0.8, 1.2)
    batches = [1, 4, 16, 64]
    tiny = {"sizes": batches, "seconds": [10e-6 * rng.uniform(1, 1.3) for _ in batches],
            "flops": [1e3 * n for n in batches], "bytes": [8e3 * n for n in batches]}
    rows = [1, 2, 4, 16]
    weights = 64e6 * rng.uniform(1, 2)  # float32 weights every batch reads once: 2 FLOPs per weight per row
    decode_bytes = [weights + 8e3 * n for n in rows]
    decode = {"sizes": rows, "seconds": [b / peak_bytes * rng.uniform(1.1, 1.3) for b in decode_bytes],
              "flops": [weights / 4 * 2 * n for n in rows], "bytes": decode_bytes}
    cases = [("flat chain of tiny kernels", tiny, peak_flops, peak_bytes),
             ("flat decode that streams its weights", decode, peak_flops, peak_bytes)]
    for times in (rng.uniform(3.9, 3.98), rng.uniform(4.02, 4.1)):  # within 2.5% under and over FAR_ABOVE
        sizes = [2**18, 2**20, 2**22]
        sweep = {"sizes": sizes, "flops": [float(n) for n in sizes], "bytes": [12.0 * n for n in sizes],
                 # a launch's few microseconds set the smallest size's time: it alone would read as overhead
                 "seconds": [max(12.0 * n / peak_bytes * times, 8e-6) for n in sizes]}
        cases.append((f"streaming add at {times:.1f}x its roofline", sweep, peak_flops, peak_bytes))
    # overhead-bound with both terms of the roofline alike (the roofline is their larger, not their sum), and a
    # chain of tiny matmuls, overhead-bound above the machine balance (the overhead test comes first)
    sizes = [2**18, 2**20, 2**22]
    nbytes = [12.0 * n for n in sizes]
    alike = {"sizes": sizes, "bytes": nbytes, "flops": [0.9 * b * peak_flops / peak_bytes for b in nbytes],
             "seconds": [b / peak_bytes * rng.uniform(5, 7) for b in nbytes]}
    cases.append(("step at 5-7x a roofline whose FLOP and byte times are alike", alike, peak_flops, peak_bytes))
    balance = peak_flops / peak_bytes
    chain = {"sizes": batches, "bytes": [4e3 * n for n in batches],
             "flops": [4e3 * n * balance * rng.uniform(2, 4) for n in batches],
             "seconds": [20e-6 * rng.uniform(1, 1.3) for _ in batches]}
    cases.append(("chain of tiny matmuls", chain, peak_flops, peak_bytes))
    sizes = [128, 512, 2048]
    matmul = {"sizes": sizes, "flops": [2.0 * n**3 for n in sizes], "bytes": [12.0 * n**2 for n in sizes]}
    intensity = matmul["flops"][-1] / matmul["bytes"][-1]
    # machine balances far from the matmul's intensity on both sides, and within 2-5% of it on both sides
    for balance in (intensity * rng.uniform(0.3, 0.7), intensity * rng.uniform(1.5, 3),
                    intensity / rng.uniform(1.02, 1.05), intensity * rng.uniform(1.02, 1.05)):
        flops_rate = balance * peak_bytes  # the balance set through the FLOP peak, bytes/s unchanged
        roofline = [max(f / flops_rate, b / peak_bytes) for f, b in zip(matmul["flops"], matmul["bytes"], strict=True)]
        cases.append((f"matmul at machine balance {balance:.3g}",
                      {**matmul, "seconds": [t * rng.uniform(1.1, 1.5) for t in roofline]}, flops_rate, peak_bytes))
    # Both thresholds met exactly: "more than" and "exceed" are strict. Powers of two make every way of writing
    # the test (a ratio, a product, the balance first) land exactly on the threshold, with no rounding to tip it.
    tie_flops, tie_bytes, sizes = 2.0**45, 2.0**40, [2**18, 2**20, 2**22]
    at_far = {"sizes": sizes, "flops": [float(n) for n in sizes], "bytes": [4.0 * n for n in sizes],
              "seconds": [FAR_ABOVE * 4.0 * n / tie_bytes for n in sizes]}
    at_balance = {"sizes": sizes, "flops": [32.0 * n for n in sizes], "bytes": [float(n) for n in sizes],
                  "seconds": [2.0 * n / tie_bytes for n in sizes]}
    cases += [("step at exactly 4x its roofline", at_far, tie_flops, tie_bytes),
              ("step exactly at the machine balance", at_balance, tie_flops, tie_bytes)]
    return cases


@exercise(2,
          "at the largest size, the roofline's time is the larger of FLOPs / peak FLOP/s and bytes / peak bytes/s; "
          "more than 4 times that is overhead-bound; otherwise compute-bound if FLOPs per byte exceed peak FLOP/s "
          "over peak bytes/s (the machine balance), else bandwidth-bound.")
def check_classify(classify: Callable[[dict, float, float], str]) -> str:
    sweeps = measure_sweeps(_device())
    peak_flops, peak_bytes = peaks_of(sweeps)
    names = list(sweeps)
    checking.rng().shuffle(names)  # the order tells nothing
    lines, wrong = [], []
    for letter, truth in zip("ABC", names, strict=True):
        yours = classify({k: list(v) for k, v in sweeps[truth].items()}, peak_flops, peak_bytes)
        if yours not in LABELS:
            raise CheckFailed(f"classify returned {yours!r} for workload {letter}; return one of {LABELS}")
        expected = _reference_classify(sweeps[truth], peak_flops, peak_bytes)
        lines.append(f"workload {letter}: yours {yours!r}, expected {expected!r}")
        if yours != expected:
            wrong.append(letter)
    detail = "; ".join(lines) + (f" (peaks {peak_flops / 1e12:.3g} TFLOP/s, {peak_bytes / 1e9:.0f} GB/s: machine "
                                 f"balance {peak_flops / peak_bytes:.1f} FLOP/byte)")
    if wrong:
        raise CheckFailed(detail)
    planted = _planted_sweeps(checking.rng())
    checking.rng().shuffle(planted)  # their order tells nothing either
    for name, sweep, flops_rate, bytes_rate in planted:
        given = {k: list(v) for k, v in sweep.items()}
        yours = classify(given, flops_rate, bytes_rate)
        if given != sweep:
            raise CheckFailed(f"{detail}; but classify changed the {name} sweep it was given",
                              hint="read the sweep, do not sort, reverse or extend its lists: the caller still uses it")
        expected = _reference_classify(sweep, flops_rate, bytes_rate)
        if yours != expected:
            hint = ("flat is not the test: a step that streams the same weights at every batch is flat and "
                    "bandwidth-bound; set its time against its roofline" if name.startswith("flat decode") else
                    "both tests are strict: overhead-bound only at more than 4 times the roofline's time, compute-bound "
                    "only where FLOPs per byte exceed the balance; use > where you used >=" if " exactly " in name
                    else None)
            raise CheckFailed(f"{detail}; but a made-up {name} sweep at {flops_rate / 1e12:.3g} TFLOP/s and "
                              f"{bytes_rate / 1e9:.0f} GB/s: yours {yours!r}, expected {expected!r}", hint=hint)
    return detail + f"; and {len(planted)} made-up sweeps, flat ones among them, around and exactly on each threshold"


# ---- exercise 3: a loop without sync points --------------------------------------------------------------

def make_problem(device: str, steps: int = 12, seed: int = 0):
    """A regression model, its optimiser and batches, one batch of which makes the loss explode."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    width = 256 if device == "cuda" else 32
    # The same initial weights for the original loop and yours, drawn without touching your own random state.
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    model = model.to(device)
    # Targets scaled so each batch's loss is its mean square: one batch explodes far past EXPLODING, and two sit
    # just either side of it (0.988x must step, 1.012x must not; over seeds each lands within about 1.1% of that),
    # so only a skip at EXPLODING gives the same run: 1024 or 1.2e3 typed in for 1e3 shows. One more explodes to
    # infinity, as real losses do, and its gradients with it: a skip that multiplies them by 0 writes NaN.
    scale = {steps // 2: 1e4, steps // 4: (NEAR_BELOW * EXPLODING) ** 0.5, 3 * steps // 4: (NEAR_ABOVE * EXPLODING) ** 0.5,
             1: float("inf")}
    batches = []
    for step in range(steps):
        x = torch.randn(64, width, generator=gen)
        y = torch.randn(64, 1, generator=gen)
        if step in scale:
            y = y / y.square().mean().sqrt() * scale[step] if scale[step] < float("inf") else torch.full_like(y, scale[step])
        batches.append((x.to(device), y.to(device)))
    return model, torch.optim.SGD(model.parameters(), lr=1e-3), batches


def train_with_syncs(model, opt, batches) -> list[float]:
    """The loop as first written: it reads every loss back to decide whether to step."""
    import torch.nn.functional as F

    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        if losses[-1] > EXPLODING:  # skip the step: a host round trip per iteration
            continue
        opt.step()
    return losses


def _sync_ops_in(fn: Callable[[], object]) -> tuple[object, dict[str, int]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    counts: dict[str, int] = {}
    for e in prof.events():
        if e.name in SYNC_OPS:
            counts[e.name] = counts.get(e.name, 0) + 1
    return out, counts


HOST_HINT = ("keep every value on the device: no .item(), .tolist(), .cpu(), .numpy(), float(), int(), bool() or "
             "`if` on a tensor, no print of one, no torch.tensor(list of losses); collect the losses as tensors "
             "(torch.stack) and skip a step on the device: p.grad.masked_fill_(loss > threshold, 0.0) for every parameter")


AHEAD_MS = 500  # the spin queued before your loop on a GPU: far longer than 12 steps take to enqueue


def _behind_a_spin(train: Callable, model, opt, batches, spin_cycles: int, judged: Callable):
    """Your loop run behind a queued spin, under sync debug mode: (losses, host ms, spin ms, whether the spin was
    over when your loop returned). Your batches hold NaN until the spin ends, then their values, written on the
    current stream: a loop on a stream of its own that does not wait for the current one computes on NaN."""
    import torch

    values = [(x.clone(), y.clone()) for x, y in batches]
    for x, y in batches:
        x.fill_(float("nan"))
        y.fill_(float("nan"))
    torch.cuda.synchronize()  # the NaN in place before the spin starts
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call inside the loop raises
    began, spun = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        began.record()
        torch.cuda._sleep(spin_cycles)
        spun.record()
        for (x, y), (x_value, y_value) in zip(batches, values, strict=True):
            x.copy_(x_value)
            y.copy_(y_value)
        start = time.perf_counter()
        out = judged(train(model, opt, batches))
        host_ms = (time.perf_counter() - start) * 1e3
    except RuntimeError as exc:
        if "synchroniz" in str(exc):
            raise CheckFailed(f"your loop synchronised with the GPU: {exc}", hint=HOST_HINT) from None
        raise
    finally:
        torch.cuda.set_sync_debug_mode(previous)
        waited = spun.query()  # the spin already over: your loop's return waited for it
        torch.cuda.synchronize()  # the spin never outlives the check, whatever your loop did
    return out, host_ms, began.elapsed_time(spun), waited


INF_HINT = ("your weights turned NaN after the step whose loss was infinite: its gradients are infinite, and a "
            "multiply by 0 gives NaN (inf x 0); masked_fill_ or torch.where puts 0 in their place")
STREAM_HINT = ("NaN losses on a GPU: most often the loop ran on a stream of its own that did not wait for the "
               "current one, and read the batches before the current stream had written them; run it on the current "
               "stream, or call wait_stream first")


def _plain_floats(t) -> list[float]:
    """A tensor's values as Python floats, through PyTorch's C tensor type (which no answer can patch)."""
    import torch

    base = torch._C.TensorBase
    return base.tolist(base.flatten(base.cpu(base.detach(t))))


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    """torch.allclose's rule for one pair of floats (NaN never close, equal infinities close)."""
    return a == b or abs(a - b) <= atol + rtol * abs(b)


def _load_into(model, opt, fresh_model, fresh_opt) -> None:
    """Put a fresh problem's weights and optimiser state into the objects your loop is handed, in place."""
    import torch

    with torch.no_grad():
        for mine, theirs in zip(model.parameters(), fresh_model.parameters(), strict=True):
            mine.copy_(theirs)
            mine.grad = None
    opt.load_state_dict(fresh_opt.state_dict())


@exercise(3,
          "keep the losses on the device (append the tensor, torch.stack them) and replace the Python `if` on "
          "the loss by a mask on the device: zero every gradient where loss > threshold "
          "(p.grad.masked_fill_(loss > threshold, 0.0)), so a skipped step changes nothing.")
def check_no_syncs(train_without_syncs: Callable) -> str:
    import torch

    device = _device()
    # A problem drawn per check, so nothing computed ahead of it matches; yours gets copies of the batches.
    seed = checking.rng().randrange(1 << 30)
    ref_model, ref_opt, batches = make_problem(device, seed=seed)
    expected = torch.tensor(train_with_syncs(ref_model, ref_opt, batches))
    model, opt, _ = make_problem(device, seed=seed)
    stepped = list(model.parameters())  # the tensors the optimiser steps, taken before your code runs
    yours = [(x.clone(), y.clone()) for x, y in batches]

    def judged(out):
        # A plain tensor, read while the watch is on: a subclass could run the loop again when it is read.
        if type(out) is not torch.Tensor:
            raise CheckFailed(f"return the losses as one plain tensor (torch.stack), not a {type(out).__name__}")
        return out.detach().float().clone()

    if device == "cuda":
        # One untimed run of your loop on a copy of the problem: the first launch of each of its kernels loads it,
        # and loading a kernel may wait for the GPU, which is not your loop's doing.
        warm_model, warm_opt, _ = make_problem(device, seed=seed)
        train_without_syncs(warm_model, warm_opt, [(x.clone(), y.clone()) for x, y in batches])
        torch.cuda.synchronize()

    def run():
        if device != "cuda":  # what the sync debug mode sees on a GPU, read from the calls and operations
            with checking.host_reads() as reads:
                out = judged(train_without_syncs(model, opt, yours))
            if reads:
                raise CheckFailed("your loop reads values back to the host: " + ", ".join(
                    f"{what} ({n} time{'s' * (n > 1)})" for what, n in reads.most_common()) +
                    "; on a GPU each one waits for the GPU", hint=HOST_HINT)
            return out
        # Room in the allocator's pools first (a cudaMalloc in your loop is no wait of yours), then a spin queued
        # ahead of your loop: a wait through any library (CuPy, DLPack, a raw copy) that PyTorch's sync debug
        # mode cannot see would end after it, so the spin must still be running when your loop returns.
        for size in (64 << 20, 1 << 20):  # one block in each pool, freed at once: the allocator keeps it
            torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        spin_cycles = kernels.torch_sleep_cycles(AHEAD_MS)
        for attempt in range(2):
            out, host_ms, spin_ms, waited = _behind_a_spin(train_without_syncs, model, opt, yours, spin_cycles, judged)
            if not waited:
                return out
            if spin_ms >= AHEAD_MS / 2:
                break
            if attempt:  # short twice: the checker cannot tell, and says so rather than blame your loop
                raise CheckFailed(f"the checker could not judge your loop: its {AHEAD_MS} ms spin ran only "
                                  f"{spin_ms:.0f} ms on this GPU, twice; run the check again")
            # The spin ran short of what was asked (clocks that changed since the calibration): no verdict on you
            # from it; once more on a fresh copy of the problem, with the spin stretched to what was meant.
            spin_cycles = int(spin_cycles * AHEAD_MS / max(spin_ms, 1.0))
            fresh_model, fresh_opt, _ = make_problem(device, seed=seed)
            _load_into(model, opt, fresh_model, fresh_opt)
            yours[:] = [(x.clone(), y.clone()) for x, y in batches]
        raise CheckFailed(f"your loop waited for the GPU: it returned after {host_ms:.0f} ms, once a {spin_ms:.0f} ms "
                          "kernel queued before it had finished, so something in it read a value back (through "
                          "PyTorch or another library)", hint=HOST_HINT)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses, syncs = _sync_ops_in(run)
    if syncs:
        raise CheckFailed(f"your loop still reads values back to the host: {syncs} "
                          "(.item(), bool() of a tensor or .tolist() inside the loop)", hint=HOST_HINT)
    # Read through PyTorch's C tensor type, compared as Python floats: a torch.allclose, Tensor.tolist, .cpu or
    # .flatten your code patched does not decide the verdict.
    floats = _plain_floats
    losses = torch._C.TensorBase.flatten(torch._C.TensorBase.cpu(losses))
    if losses.shape != expected.shape:
        raise CheckFailed(f"your loop returned {losses.numel()} losses for {expected.numel()} steps: one per step")
    pairs = zip(floats(losses), floats(expected), strict=True)  # the shapes are equal: checked just above
    differs = [i for i, (a, b) in enumerate(pairs) if not _close(a, b, 1e-4, 1e-8)]
    if differs:
        step = differs[0]  # the first step that differs
        nan = any(v != v for v in floats(losses))
        raise CheckFailed(f"your losses differ from the original loop's from step {step} on: {losses[step]:.6g} "
                          f"against {expected[step]:.6g} (the original's loss there, step by step: "
                          f"{', '.join(f'{v:.4g}' for v in floats(expected)[max(step - 1, 0):step + 2])})",
                          hint=INF_HINT if nan and any(v == float("inf") for v in floats(expected)[:step + 1])
                          else STREAM_HINT if nan and device == "cuda" else None)
    for mine, theirs in zip(stepped, ref_model.parameters(), strict=True):
        pairs = zip(floats(mine), floats(theirs), strict=True)
        if not all(_close(a, b, 1e-4, 1e-6) for a, b in pairs):
            raise CheckFailed("same losses but different final weights: did the exploding step update them?")
    where = ("CUDA sync debug mode found no synchronisation" if device == "cuda" else
             "no host read (.item(), .tolist(), .cpu(), .numpy(), float(), int(), bool(), ...) in the loop")
    return f"{len(batches)} steps, losses and weights equal to the original loop's, {where}"


# ---- exercise 4: where the GPU leaves the overhead-bound regime ------------------------------------------

# The steps the checker hands your function spin for a time it planted: flat up to a batch it draws, then growing
# with the batch, so the answer is known exactly and no second, noisy sweep of the checker's own decides it. Two
# of the three smallest batches are off the floor, one slow and one fast (batch 1 always, with batch 2 in one
# sweep and batch 4 in the other), so only the median of the three is the floor: the first, the fastest, the
# slowest, the mean or the unsorted middle of them is not. Two sweeps a call, at two different knees.
PLANTED_FLOOR_US = 40.0  # well above a launch's cost, so launch throughput measures the planted time
PLANTED_KNEES = (64, 128, 256, 512)
SMALLEST = (1, 2, 4)  # the lab's sweep starts at batch 1: its floor is the median of these three
FLOOR_SLOW, FLOOR_FAST = 3.0, 0.6  # the two of them off the floor, as multiples of it
LAB_BATCHES = tuple(2**k for k in range(13))


def planted_step_us(batch: int, knee: int, floor_us: float = PLANTED_FLOOR_US, off_floor: dict | None = None) -> float:
    """The planted time of one step: floor_us up to `knee` rows, floor_us * batch / knee past it, and
    floor_us * off_floor[batch] at the small batches off the floor."""
    if off_floor and batch in off_floor:
        return floor_us * off_floor[batch]
    return floor_us * max(1.0, batch / knee)


def off_floor_batches(rng, other: int) -> dict[int, float]:
    """Batch 1 and SMALLEST[other] off the floor, one of them slow and the other fast (drawn which)."""
    slow_first = rng.random() < 0.5
    return {SMALLEST[0]: FLOOR_SLOW if slow_first else FLOOR_FAST,
            SMALLEST[other]: FLOOR_FAST if slow_first else FLOOR_SLOW}


def planted_steps(knee: int, floor_us: float = PLANTED_FLOOR_US,
                  off_floor: dict | None = None) -> Callable[[int], Callable[[], object]]:
    """A make_step whose step spins planted_step_us(batch, knee, ...)."""
    from ...kernels import spinner

    spin = spinner()

    def make_step(batch: int) -> Callable[[], object]:
        duration_us = planted_step_us(batch, knee, floor_us, off_floor)
        return lambda: spin.launch(duration_us)

    return make_step


def flat_until_batch(batches: Sequence[int], step_us: Sequence[float], tolerance: float = 1.5,
                     floor: Callable | None = None) -> int:
    """The last batch before the final rise: the batches after it all take over `tolerance` x the floor, the
    median of the three smallest (or floor(those three) for a slip)."""
    import numpy as np

    floor_us = float(np.median(step_us[:3])) if floor is None else floor(list(step_us[:3]))
    above = [us > tolerance * floor_us for us in step_us]
    rise = next(i for i in range(len(batches) + 1) if all(above[i:]))
    return batches[max(rise - 1, 0)]


FLOOR_SLIPS = {"the first batch": lambda s: s[0], "the fastest": min, "the slowest": max,
               "the mean": lambda s: sum(s) / len(s), "the unsorted middle": lambda s: s[1], "the third": lambda s: s[2]}
FLOOR_HINT = ("take the floor as the median of the three smallest batches' times: here one of them is slow and one "
              "fast, so the first, the fastest, the slowest, the mean or the unsorted middle of them is not the floor")


@exercise(4,
          "sweep batch sizes from 1 to 4096 in steps of 2, time each step by launch throughput, take the floor "
          "of the three smallest, and return the batch just before the final run of batches that all take "
          "more than 1.5x the floor.")
def check_flat_until(find_flat_until: Callable[[Callable[[int], Callable[[], object]]], int]) -> str:
    """Your sweep finds the knee the checker planted in steps of known GPU time, twice (drawn afresh each call)."""
    require_cuda("timing steps on the GPU")
    rng = checking.rng()
    knees = rng.sample(PLANTED_KNEES, 2)
    lines = []
    for other, knee in zip((1, 2), knees, strict=True):
        off_floor = off_floor_batches(rng, other)
        yours = find_flat_until(planted_steps(knee, off_floor=off_floor))
        if isinstance(yours, bool) or not isinstance(yours, int) or yours < 1:
            raise CheckFailed(f"find_flat_until returned {yours!r}; return a batch size (a positive int)")
        apart = ", ".join(f"{b} ({f:g}x)" for b, f in off_floor.items())
        where = (f"the checker planted steps of {PLANTED_FLOOR_US:.0f} us up to batch {knee} (but at batches "
                 f"{apart}), {2 * PLANTED_FLOOR_US:.0f} us at {2 * knee}, growing with the batch past it")
        if yours == knee:
            lines.append(f"found batch {knee}: {where}")
            continue
        lab_sweep = [planted_step_us(b, knee, off_floor=off_floor) for b in LAB_BATCHES]
        floor_slip = any(flat_until_batch(LAB_BATCHES, lab_sweep, floor=f) == yours for f in FLOOR_SLIPS.values())
        if yours == 2 * knee:
            detail, hint = "one step too far", "return the batch *before* the rising run"
        elif yours == knee // 2:
            detail, hint = "one step too early", "the knee is the last batch at the floor"
        else:
            detail, hint = f"expected {knee}", None
        if floor_slip:
            hint = FLOOR_HINT + (f" (or: {hint})" if hint else "")
        raise CheckFailed(f"yours {yours}, {detail}: {where}", hint)
    return "; ".join(lines)
