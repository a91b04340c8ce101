"""Checkers for lab 02, "PyTorch dispatch overhead".

Exercises 1 to 3 run on the CPU too (a shipped GPU trace, CPU sweeps, CPU profiles); exercise 4 needs CUDA.
Each checker computes or measures its own reference in the same call.
"""

from __future__ import annotations

import json
import random
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import timing, trace
from ..checking import CheckFailed, exercise, number, within_factor

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
# Host round trips a loop must not make: the aten ops behind .item(), bool(tensor) and .tolist().
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero")
EXPLODING = 1e3  # the loop skips a step whose loss is above this
BATCHES = [2**k for k in range(0, 13)]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---- exercise 1: idle time from a trace ------------------------------------------------------------------

def _synthetic_trace(rng: random.Random, largest_gap: str) -> dict:
    """A trace the checker makes up afresh, its largest gap planted at the "lead" or the "trail" of the window.

    Every hard case is in it: kernels on two streams that overlap, memsets and a copy (GPU work, not kernels),
    a kernel that starts before the range and runs into it and one that starts after it (neither is the
    range's work), CPU events and an instant event. With the largest gap at the lead, the range ends while the
    last copy still runs, so the window extends past the range; at the trail, the range ends after a long
    stretch with no GPU work.
    """
    start = 1000.0
    events = [{"ph": "X", "cat": "kernel", "name": "before", "ts": start - 20.0, "dur": 30.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": start + 1.0, "dur": 30.0},
              {"ph": "i", "cat": "kernel", "name": "instant", "ts": start + 100.0}]
    t = start + (rng.uniform(70, 90) if largest_gap == "lead" else rng.uniform(12, 16))
    for i in range(rng.randint(8, 14)):
        dur = rng.uniform(2, 20)
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": t, "dur": dur})
        if i % 4 == 1:  # a kernel on a second stream, overlapping this one
            events.append({"ph": "X", "cat": "kernel", "name": f"side{i}", "ts": t + dur / 2, "dur": dur})
        if i % 3 == 2:  # a memset just after it: GPU work that is not a kernel
            events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": t + dur + 1.0, "dur": 4.0})
            dur += 5.0
        t += dur + rng.uniform(17, 40)
    copy_us = 40.0 if largest_gap == "lead" else 3.0  # at the lead, a long copy runs well past the range's end
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": t, "dur": copy_us})
    end = t + 1.0 if largest_gap == "lead" else t + copy_us + rng.uniform(70, 90)
    events.append({"ph": "X", "cat": "user_annotation", "name": "loop", "ts": start, "dur": end - start})
    events.append({"ph": "X", "cat": "kernel", "name": "after", "ts": end + 50, "dur": 50.0})
    rng.shuffle(events)
    return {"traceEvents": events}


def _compare_idle(yours: object, expected: trace.GpuIdle, which: str) -> str:
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
    problems = []
    if count != expected.kernel_count:
        problems.append(f"kernel_count {count!r}, expected {expected.kernel_count}")
    if not 0 <= idle <= 1:
        problems.append(f"idle_fraction {idle:.4g} is not a fraction between 0 and 1 (a percentage?)")
    elif abs(idle - expected.idle_fraction) > 0.005:
        problems.append(f"idle_fraction {idle:.4f}, expected {expected.idle_fraction:.4f}")
    if abs(gap - expected.largest_gap_us) > 0.01 * expected.largest_gap_us + 0.01:
        problems.append(f"largest_gap_us {gap:.2f}, expected {expected.largest_gap_us:.2f}")
    if problems:
        raise CheckFailed(f"{which}: " + "; ".join(problems))
    return (f"{which}: {expected.kernel_count} kernels, {expected.idle_fraction:.1%} idle, "
            f"largest gap {expected.largest_gap_us:.1f} us")


@exercise("Exercise 1: GPU idle time from a trace",
          "the window runs from the start of the 'loop' range to the end of the GPU work started in it; GPU work "
          "is every complete event of category kernel, gpu_memcpy or gpu_memset; merge overlapping intervals "
          "before adding them up, and count the gap before the first one.")
def check_idle_stats(gpu_idle_stats: Callable[[str, str], dict]) -> str:
    shipped = trace.shipped_trace_path()
    lines = [_compare_idle(gpu_idle_stats(str(shipped), "loop"), trace.gpu_idle(shipped, "loop"), "the shipped trace")]
    rng = random.Random()
    with tempfile.TemporaryDirectory() as tmp:
        for where in ("lead", "trail"):
            made_up = _synthetic_trace(rng, where)
            path = Path(tmp) / f"made_up_{where}.json"
            path.write_text(json.dumps(made_up))
            lines.append(_compare_idle(gpu_idle_stats(str(path), "loop"), trace.gpu_idle(made_up, "loop"),
                                       f"a made-up trace, largest gap at the {where}"))
    return "; ".join(lines)


# ---- exercise 2: classify workloads from their sweeps ----------------------------------------------------

def _reference_classify(sweep: dict, machine_balance: float) -> str:
    """Overhead-bound if time stays within 2x while the work grows 16x or more; else the roofline side."""
    seconds, sizes = sweep["seconds"], sweep["sizes"]
    if seconds[-1] / seconds[0] < 2 and sizes[-1] / sizes[0] >= 16:
        return "overhead"
    return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] > machine_balance else "bandwidth"


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


def machine_balance_of(sweeps: dict[str, dict]) -> float:
    """FLOPs per byte at which this machine turns from bandwidth- to compute-bound, from the two sweeps."""
    compute, bandwidth = sweeps["compute"], sweeps["bandwidth"]
    peak_flops = compute["flops"][-1] / compute["seconds"][-1]
    peak_bytes = bandwidth["bytes"][-1] / bandwidth["seconds"][-1]
    return peak_flops / peak_bytes


@exercise("Exercise 2: overhead-, bandwidth- or compute-bound?",
          "a flat sweep (time barely grows while the work grows many times) is overhead-bound; otherwise compare "
          "the work's FLOPs per byte with the machine balance (peak FLOP/s / peak bytes/s): above it, "
          "compute-bound; below it, bandwidth-bound.")
def check_classify(classify: Callable[[dict, float], str]) -> str:
    sweeps = measure_sweeps(_device())
    balance = machine_balance_of(sweeps)
    names = list(sweeps)
    random.shuffle(names)  # the order tells nothing
    lines, wrong = [], []
    for letter, truth in zip("ABC", names, strict=True):
        yours = classify({k: list(v) for k, v in sweeps[truth].items()}, balance)
        if yours not in LABELS:
            raise CheckFailed(f"classify returned {yours!r} for workload {letter}; return one of {LABELS}")
        expected = _reference_classify(sweeps[truth], balance)
        lines.append(f"workload {letter}: yours {yours!r}, expected {expected!r}")
        if yours != expected:
            wrong.append(letter)
    detail = "; ".join(lines) + f" (machine balance {balance:.1f} FLOP/byte)"
    if wrong:
        raise CheckFailed(detail)
    return detail


# ---- exercise 3: a loop without sync points --------------------------------------------------------------

def make_problem(device: str, steps: int = 12, seed: int = 0):
    """A regression model, its optimiser and batches, one batch of which makes the loss explode."""
    import torch

    torch.manual_seed(seed)  # the same initial weights for the original loop and yours
    gen = torch.Generator().manual_seed(seed)
    width = 256 if device == "cuda" else 32
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    model = model.to(device)
    batches = []
    for step in range(steps):
        x = torch.randn(64, width, generator=gen)
        y = torch.randn(64, 1, generator=gen) * (1e4 if step == steps // 2 else 1)
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


@exercise("Exercise 3: a training loop without sync points",
          "keep the losses on the device (append the tensor, torch.stack them) and replace the Python `if` on "
          "the loss by arithmetic: scale the gradients by (loss <= threshold) so a skipped step changes nothing.")
def check_no_syncs(train_without_syncs: Callable) -> str:
    import torch

    device = _device()
    ref_model, ref_opt, batches = make_problem(device)
    expected = torch.tensor(train_with_syncs(ref_model, ref_opt, batches))
    model, opt, batches = make_problem(device)

    def run():
        if device != "cuda":
            return train_without_syncs(model, opt, batches)
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # any synchronising call inside the loop raises
        try:
            return train_without_syncs(model, opt, batches)
        except RuntimeError as exc:
            if "synchroniz" in str(exc):
                raise CheckFailed(f"your loop synchronised with the GPU: {exc}") from None
            raise
        finally:
            torch.cuda.set_sync_debug_mode(previous)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses, syncs = _sync_ops_in(run)
    if syncs:
        raise CheckFailed(f"your loop still reads values back to the host: {syncs} "
                          "(.item(), bool() of a tensor or .tolist() inside the loop)")
    if not isinstance(losses, torch.Tensor):
        raise CheckFailed(f"return the losses as one tensor (torch.stack), not a {type(losses).__name__}")
    losses = losses.detach().cpu().flatten()
    if losses.shape != expected.shape or not torch.allclose(losses, expected, rtol=1e-4):
        raise CheckFailed(f"your losses differ from the original loop's: {losses.tolist()[:4]}... "
                          f"against {expected.tolist()[:4]}...")
    for mine, theirs in zip(model.parameters(), ref_model.parameters(), strict=True):
        if not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-6):
            raise CheckFailed("same losses but different final weights: did the exploding step update them?")
    where = "CUDA sync debug mode found no synchronisation" if device == "cuda" else "no .item() or bool() in the profile"
    return f"{len(batches)} steps, losses and weights equal to the original loop's, {where}"


# ---- exercise 4: where the GPU leaves the overhead-bound regime ------------------------------------------

def make_mlp_step(batch: int, width: int = 1024, depth: int = 4) -> Callable[[], object]:
    """One inference step of a small MLP on a batch of `batch` rows, on the GPU."""
    import torch

    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    mlp = torch.nn.Sequential(*layers).cuda()
    x = torch.randn(batch, width, device="cuda")

    def step():
        with torch.no_grad():
            return mlp(x)

    return step


def flat_until_batch(batches: Sequence[int], step_us: Sequence[float], tolerance: float = 1.5) -> int:
    """The last batch before the final rise: the batches after it all take over `tolerance` x the floor."""
    import numpy as np

    floor = float(np.median(step_us[:3]))
    above = [us > tolerance * floor for us in step_us]
    rise = next(i for i in range(len(batches) + 1) if all(above[i:]))
    return batches[max(rise - 1, 0)]


def _reference_flat_until(make_step: Callable[[int], Callable[[], object]]) -> int:
    """The checker's own sweep over BATCHES."""
    step_us = [timing.launch_throughput_us(make_step(b), launches=20, rounds=10).median_us for b in BATCHES]
    return flat_until_batch(BATCHES, step_us)


@exercise("Exercise 4: where your GPU leaves the overhead-bound regime",
          "sweep batch sizes from 1 to 4096 in steps of 2, time each step by launch throughput, take the floor "
          "of the three smallest, and return the batch just before the final run of batches that all take "
          "more than 1.5x the floor.")
def check_flat_until(find_flat_until: Callable[[Callable[[int], Callable[[], object]]], int]) -> str:
    yours = find_flat_until(make_mlp_step)
    if not isinstance(yours, int) or isinstance(yours, bool) or yours < 1:
        raise CheckFailed(f"find_flat_until returned {yours!r}; return a batch size (a positive int)")
    expected = _reference_flat_until(make_mlp_step)
    return within_factor(yours, expected, 2, "flat until batch")
