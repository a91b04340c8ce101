"""Checkers for lab 07, "Capstone: the overhead ladder".

Exercises 1 and 4 check on a CPU (exercise 1 captures your cache on a GPU as well); exercises 2 and 3 capture
the decode loop and need CUDA. Every checker draws its own model, start tokens and positions, and compares
with eager decoding of the same model, so an answer that only looks right cannot pass.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .. import decoder, trace
from ..checking import CheckFailed, counting_graph_calls, exercise, number, require_cuda, warm_up_then_capture

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_attribute_idle", "check_capture_loop", "check_capture_step", "check_static_cache"]

LAB_CONFIG = decoder.DecoderConfig(layers=4, width=256, heads=4, vocab=1024, max_len=64, batch=2)
STEPS = 32
MIN_STEP_SPEEDUP = 2.0  # a captured step of LAB_CONFIG runs several times faster than eager on any recent GPU


# ---- shared: a model, its eager tokens, and the buffers a captured decode loop works in -----------------------

def _eager_tokens(model: decoder.TinyDecoder, first, steps: int = STEPS):
    import torch

    with torch.no_grad():
        return decoder.decode(decoder.greedy_step(model), first, steps)


def _buffers(config: decoder.DecoderConfig, device: str = "cuda") -> tuple:
    """The static token, position and output buffers a captured decode loop reads and writes."""
    import torch

    token = torch.zeros(config.batch, dtype=torch.long, device=device)
    pos = torch.zeros(1, dtype=torch.long, device=device)
    out = torch.full((config.batch, STEPS), -1, dtype=torch.long, device=device)
    return token, pos, out


def _same_tokens(yours, expected, what: str) -> None:
    import torch

    if tuple(yours.shape) != tuple(expected.shape) or not torch.equal(yours.cpu(), expected.cpu()):
        wrong = (yours.cpu() != expected.cpu()).nonzero().tolist() if yours.shape == expected.shape else []
        where = f"; first wrong [sequence, step]: {wrong[0]}" if wrong else ""
        raise CheckFailed(f"{what}: your tokens differ from eager decoding{where}. "
                          f"yours {yours[0, :8].tolist()}..., eager {expected[0, :8].tolist()}...")


def _graph(answer: object, what: str):
    import torch

    if not isinstance(answer, torch.cuda.CUDAGraph):
        raise CheckFailed(f"{what} must return the torch.cuda.CUDAGraph it captured, not {type(answer).__name__}")
    return answer


# ---- exercise 1: a static KV cache ---------------------------------------------------------------------------

@contextmanager
def _host_reads() -> Iterator[list[str]]:
    """Record every read of a tensor's value on the host (.item(), int(t), bool(t)) made inside the block."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    reads: list[str] = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                reads.append(str(func))
            return func(*args, **(kwargs or {}))

    with Watch():
        yield reads


@exercise("Exercise 1: write the static KV cache",
          "write `new` into `cache` at slot `pos` along dimension 2, in place (index_copy_ takes the slot as a "
          "tensor); never turn pos into a Python number, and never build a new cache")
def check_static_cache(write_kv: Callable) -> str:
    """Slot writes in place without host reads; decoding with it equals the reference; on a GPU, it captures."""
    import torch

    seed = random.randrange(1000)
    gen = torch.Generator().manual_seed(seed)
    batch, heads, slots, dim = 3, 4, 16, 8
    for slot in (0, 7, slots - 1):
        cache = torch.randn(batch, heads, slots, dim, generator=gen)
        before, address = cache.clone(), cache.data_ptr()
        new = torch.randn(batch, heads, 1, dim, generator=gen)
        with _host_reads() as reads:
            write_kv(cache, new, torch.tensor([slot]))
        if reads:
            raise CheckFailed(f"writing slot {slot} read a value back to the host ({len(reads)} time(s), e.g. "
                              ".item() or int(pos)): a captured step cannot do that, it would bake in one position")
        if cache.data_ptr() != address or cache.shape != before.shape:
            raise CheckFailed("the cache moved or changed shape: write into the cache tensor you are given")
        expected = before.clone()
        expected[:, :, slot] = new[:, :, 0]
        if not torch.equal(cache, expected):
            wrong = "other slots changed too" if torch.equal(cache[:, :, slot], new[:, :, 0]) else \
                f"slot {slot} does not hold the new keys"
            raise CheckFailed(f"after writing slot {slot}: {wrong}")
    small = decoder.TINY
    first = decoder.first_tokens(small, "cpu", seed=seed)
    yours = _eager_tokens(decoder.make_decoder(small, "cpu", write=write_kv), first, 24)
    _same_tokens(yours, _eager_tokens(decoder.make_decoder(small, "cpu"), first, 24), "24 steps on the CPU")
    detail = "3 slots written in place with no host reads; 24 decoded tokens equal the reference"
    if not torch.cuda.is_available():
        return detail + " (no GPU here: the capture check runs where there is one)"
    model = decoder.make_decoder(LAB_CONFIG, "cuda", write=write_kv)
    first = decoder.first_tokens(LAB_CONFIG, "cuda", seed=seed)
    token, pos, out = _buffers(LAB_CONFIG)
    try:
        graph = _capture_reference(lambda: _decode_step(decoder.greedy_step(model), token, pos, out), token, pos,
                                   first)
    except RuntimeError as exc:
        raise CheckFailed(f"capturing a decode step that uses your write_kv failed: {str(exc).splitlines()[0]}") from None
    _replay_steps(graph, token, pos, first, STEPS)
    _same_tokens(out, _eager_tokens(model, first), f"{STEPS} replays of a captured step using your cache")
    return detail + f"; captured in a step on the GPU, {STEPS} replays equal eager"


# The checker's own capture, used to test exercise 1's cache on the GPU (exercise 2 asks you to write yours).
def _decode_step(step: Callable, token, pos, out) -> None:
    nxt = step(token, pos)
    out.index_copy_(1, pos, nxt[:, None])
    token.copy_(nxt)
    pos.add_(1)


def _capture_reference(work: Callable[[], object], token, pos, first):
    token.copy_(first)
    pos.zero_()
    return warm_up_then_capture(work)[0]


def _replay_steps(graph, token, pos, first, steps: int) -> None:
    import torch

    token.copy_(first)
    pos.zero_()
    for _ in range(steps):
        graph.replay()
    torch.cuda.synchronize()


# ---- exercise 2: capture one decode step ---------------------------------------------------------------------

def _median_s(run: Callable[[], object], rounds: int = 5) -> float:
    import torch

    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


@exercise("Exercise 2: capture one decode step",
          "warm up on a side stream, then inside torch.cuda.graph call step(token, pos) and write its result "
          "into out at pos, into token, and advance pos: all in place, so each replay decodes the next token")
def check_capture_step(capture_step: Callable) -> str:
    """32 replays from two start tokens equal eager decoding; a replayed step is at least 2x faster than eager."""
    require_cuda("capturing a decode step")
    model = decoder.make_decoder(LAB_CONFIG, "cuda", seed=random.randrange(1000))
    step = decoder.greedy_step(model)
    token, pos, out = _buffers(LAB_CONFIG)
    graph = _graph(capture_step(step, token, pos, out), "capture_step")
    for seed in (random.randrange(1000), random.randrange(1000, 2000)):
        first = decoder.first_tokens(LAB_CONFIG, "cuda", seed=seed)
        out.fill_(-1)
        with counting_graph_calls() as counts:
            _replay_steps(graph, token, pos, first, STEPS)
        _same_tokens(out, _eager_tokens(model, first), f"{STEPS} replays from start tokens {first.tolist()}")
    eager = _median_s(lambda: decoder.decode(step, first, STEPS))
    replayed = _median_s(lambda: _replay_steps(graph, token, pos, first, STEPS))
    if eager < MIN_STEP_SPEEDUP * replayed:
        raise CheckFailed(f"{STEPS} replays take {replayed * 1e3:.2f} ms against eager {eager * 1e3:.2f} ms "
                          f"({eager / replayed:.1f}x); expected at least {MIN_STEP_SPEEDUP:g}x: is the whole step "
                          "inside the graph?")
    return (f"2 sequences of {STEPS} tokens equal eager, {counts['replays']} replays each; a replayed step "
            f"{replayed / STEPS * 1e6:.0f} us against eager {eager / STEPS * 1e6:.0f} us ({eager / replayed:.1f}x)")


# ---- exercise 3: capture the whole loop ----------------------------------------------------------------------

@exercise("Exercise 3: capture the whole decode loop",
          "inside one torch.cuda.graph, run the step of exercise 2 `steps` times; the position and token advance "
          "on the device, so one replay decodes the whole sequence")
def check_capture_loop(capture_loop: Callable) -> str:
    """One replay (one cudaGraphLaunch) per sequence decodes the same tokens as eager, for two start tokens."""
    require_cuda("capturing a decode loop")
    model = decoder.make_decoder(LAB_CONFIG, "cuda", seed=random.randrange(1000))
    token, pos, out = _buffers(LAB_CONFIG)
    graph = _graph(capture_loop(decoder.greedy_step(model), token, pos, out, STEPS), "capture_loop")
    for seed in (random.randrange(1000), random.randrange(1000, 2000)):
        first = decoder.first_tokens(LAB_CONFIG, "cuda", seed=seed)
        out.fill_(-1)

        def one_sequence(first=first):
            token.copy_(first)
            pos.zero_()
            graph.replay()

        with counting_graph_calls() as counts:
            events = trace.record(one_sequence)
        launches = trace.count(events, trace.LAUNCH_CATEGORIES, "cudaGraphLaunch")
        if launches != 1:
            raise CheckFailed(f"one sequence took {launches} graph launches; the whole loop should be one graph")
        _same_tokens(out, _eager_tokens(model, first), f"one replay from start tokens {first.tolist()}")
    kernels = trace.count(events, {"kernel"})
    return (f"2 sequences of {STEPS} tokens equal eager; each one graph launch ({counts['replays']} profiled "
            f"replays in all) running {kernels} kernels")


# ---- exercise 4: host wait or GPU gap ------------------------------------------------------------------------

def _random_kernels(rng: random.Random, n: int) -> list[tuple[float, float, float]]:
    """Kernels as (launch returned, start, end): sometimes queued ahead, sometimes late, sometimes overlapping."""
    kernels, t = [], 0.0
    for _ in range(n):
        start = t + rng.choice((0.0, rng.uniform(0.1, 3.0)))
        launched = start + rng.uniform(-5.0, 1.0)
        end = start + rng.uniform(0.5, 6.0)
        kernels.append((round(launched, 3), round(start, 3), round(end, 3)))
        t = end - rng.choice((0.0, rng.uniform(0.0, 1.0)))   # sometimes the next kernel overlaps this one
    return kernels


@exercise("Exercise 4: split the idle time",
          "walk the kernels in start order with a cursor at the end of the work so far; a gap before a kernel "
          "is host wait until its launch call returned and a GPU gap after that; overlaps count once as busy; "
          "after the last kernel the GPU waits for the host")
def check_attribute_idle(attribute_idle: Callable) -> str:
    """Hand-made cases and 200 random ones, unsorted, against the course's reference split."""
    cases = [
        ([(1.0, 2.0, 5.0)], (0.0, 6.0)),                         # waits for the launch, then 1 us GPU gap
        ([(-3.0, 1.0, 2.0), (0.5, 4.0, 5.0)], (0.0, 5.0)),       # all queued ahead: only GPU gaps
        ([(0.0, 0.0, 4.0), (1.0, 2.0, 3.0)], (0.0, 4.0)),        # overlap: busy counts once
        ([(9.0, 1.0, 2.0), (10.0, 11.0, 12.0)], (0.0, 12.0)),    # second kernel launched late
    ]
    rng = random.Random(random.randrange(2**31))
    for _ in range(200):
        kernels = _random_kernels(rng, rng.randint(1, 12))
        lo = min(k[1] for k in kernels) - rng.uniform(0, 2)
        rng.shuffle(kernels)
        cases.append((kernels, (lo, max(k[2] for k in kernels) + rng.uniform(0, 3))))
    for kernels, window in cases:
        expected = trace.attribute_idle(kernels, window)
        yours = attribute_idle(list(kernels), window)
        if not (isinstance(yours, (tuple, list)) and len(yours) == 3):
            raise CheckFailed(f"return (busy_us, host_wait_us, gpu_gap_us), not {yours!r}")
        yours = tuple(number(y, f"your {what}", "microseconds", positive=False)
                      for y, what in zip(yours, ("busy_us", "host_wait_us", "gpu_gap_us"), strict=True))
        if min(yours) < -1e-9:
            raise CheckFailed(f"kernels {kernels[:4]} in window {window}: you returned {yours}; no part of the "
                              "window can be negative")
        want = (expected.busy_us, expected.host_wait_us, expected.gpu_gap_us)
        if any(abs(y - w) > 1e-6 for y, w in zip(yours, want, strict=True)):
            shown = ", ".join(f"{w:.3f}" for w in want)
            raise CheckFailed(f"kernels {kernels[:4]}{'...' if len(kernels) > 4 else ''} in window {window}: you "
                              f"returned {tuple(round(float(y), 3) for y in yours)}, expected ({shown})")
        if abs(sum(float(y) for y in yours) - (window[1] - window[0])) > 1e-6:
            raise CheckFailed("busy + host wait + GPU gap must add up to the window")
    return f"{len(cases)} cases right, unsorted, with overlaps, late launches and work queued ahead"
