"""Checkers for lab 07, "Capstone: the overhead ladder".

Exercises 1 and 4 check on a CPU (exercise 1 captures your cache on a GPU as well); exercises 2 and 3 capture
the decode loop and need CUDA. Every checker draws its own model, start tokens and positions, and compares
with eager decoding of the same model, so an answer that only looks right cannot pass.
"""

from __future__ import annotations

import random
import statistics
import time
import warnings
from collections.abc import Callable

from ... import checking, decoder, trace
from ...checking import (
    CheckFailed,
    counting_graph_calls,
    exercise,
    number,
    require_cuda,
    warm_up_then_capture,
)

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_attribute_idle", "check_capture_loop", "check_capture_step", "check_filled_attention",
           "check_static_cache"]

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


def _same_tokens(yours, expected, what: str, hint: str | None = None) -> None:
    import torch

    if tuple(yours.shape) != tuple(expected.shape) or not torch.equal(yours.cpu(), expected.cpu()):
        wrong = (yours.cpu() != expected.cpu()).nonzero().tolist() if yours.shape == expected.shape else []
        where = f"; first wrong [sequence, step]: {wrong[0]}" if wrong else ""
        raise CheckFailed(f"{what}: your tokens differ from eager decoding{where}. "
                          f"yours {yours[0, :8].tolist()}..., eager {expected[0, :8].tolist()}...", hint=hint)


def _graph(answer: object, what: str):
    import torch

    if not isinstance(answer, torch.cuda.CUDAGraph):
        raise CheckFailed(f"{what} must return the torch.cuda.CUDAGraph it captured, not {type(answer).__name__}")
    return answer


# ---- exercise 1: a static KV cache ---------------------------------------------------------------------------

HOST_READ_HINT = ("pass pos to the write as a tensor (cache.index_copy_(2, pos, new)); .item(), int(pos), "
                  "pos.tolist() read the position on the host, and a captured step would keep the one it saw")


@exercise(1,
          "write `new` into `cache` at slot `pos` along dimension 2, in place (index_copy_ takes the slot as a "
          "tensor); never turn pos into a Python number, and never build a new cache")
def check_static_cache(write_kv: Callable) -> str:
    """Slot writes in place without host reads; decoding with it equals the reference; on a GPU, it captures."""
    import torch

    rng = checking.rng()
    seed = rng.randrange(1000)
    gen = torch.Generator().manual_seed(seed)
    batch, heads, slots, dim = 3, 4, 16, 8
    for slot in (0, rng.randrange(1, slots - 1), slots - 1):
        cache = torch.randn(batch, heads, slots, dim, generator=gen)
        before, address = cache.clone(), cache.data_ptr()
        new = torch.randn(batch, heads, 1, dim, generator=gen)
        pos = torch.tensor([slot])
        new_before = new.clone()
        with checking.host_reads() as reads:
            returned = write_kv(cache, new, pos)
        if reads:
            raise CheckFailed(f"writing slot {slot} read a value back to the host ({', '.join(sorted(reads))}): "
                              "a captured step cannot do that, it would bake in one position", hint=HOST_READ_HINT)
        if cache.data_ptr() != address or cache.shape != before.shape:
            raise CheckFailed("the cache moved or changed shape: write into the cache tensor you are given",
                              hint="write in place into the storage you are given (index_copy_, or an indexed "
                                   "assignment); never rebind cache.data or resize it")
        if pos.tolist() != [slot] or not torch.equal(new, new_before):
            raise CheckFailed(f"writing slot {slot} changed pos or new: write_kv must change the cache alone",
                              hint="leave pos and new as they are: the decode loop advances pos once per step, and "
                                   "every layer writes its keys and values at the same position")
        expected = before.clone()
        expected[:, :, slot] = new[:, :, 0]
        if torch.equal(cache, expected):
            continue
        if torch.equal(cache, before):
            fresh = isinstance(returned, torch.Tensor) and returned.data_ptr() != address
            raise CheckFailed(f"after writing slot {slot} the cache you were given is unchanged" +
                              (" (you returned a new tensor)" if fresh else ""),
                              hint="write in place into the cache you are given: a new tensor (torch.cat, "
                                   "index_copy without the underscore, a clone) changes shape or address, and the "
                                   "model keeps reading the old one")
        changed = [j for j in range(slots) if not torch.equal(cache[:, :, j], before[:, :, j])]
        if len(changed) == 1 and changed[0] != slot and torch.equal(cache[:, :, changed[0]], new[:, :, 0]):
            raise CheckFailed(f"slot {changed[0]} holds the new keys, not slot {slot}",
                              hint="write at slot pos itself: slots count from 0, and pos is the position of the "
                                   "token this step decodes" if changed[0] == slot + 1 else
                                   "write at the slot pos holds, whatever it is: the checker draws its positions")
        if torch.allclose(cache[:, :, slot], before[:, :, slot] + new[:, :, 0]):
            raise CheckFailed(f"slot {slot} holds what it held plus the new keys",
                              hint="write the keys (index_copy_), do not add them (index_add_): a slot that held "
                                   "anything, a cache reused for a new sequence, would keep it")
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
        raise CheckFailed(f"capturing a decode step that uses your write_kv failed: {str(exc).splitlines()[0]}",
                          hint=HOST_READ_HINT) from None
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


# ---- exercises 2 and 3: the step a learner captures, watched --------------------------------------------------

NO_WARM_UP_HINT = ("run the step once before capturing (on a side stream: side.wait_stream(current), then back): "
                   "a model's first call initialises lazily (library handles, workspaces, tuning), which a "
                   "capture cannot record")
EAGER_HINT = ("return the torch.cuda.CUDAGraph itself and let its replay do the work: a replay runs the captured "
              "kernels, never your Python")


class _WatchedStep:
    """The decode step handed to a learner: counts its Python calls, and refuses a first call inside a capture,
    as a real model's first call would (it initialises lazily: library handles, workspaces, autotuning)."""

    def __init__(self, step: Callable):
        self.step, self.calls = step, 0

    def __call__(self, token, pos):
        import torch

        if self.calls == 0 and torch.cuda.is_current_stream_capturing():
            raise CheckFailed("the step's first call came inside the capture: nothing warmed it up",
                              hint=NO_WARM_UP_HINT)
        self.calls += 1
        return self.step(token, pos)


def _no_eager_steps(step: _WatchedStep, before: int, what: str) -> None:
    if step.calls != before:
        raise CheckFailed(f"{what} called the step in Python {step.calls - before} time(s): the work ran eagerly, "
                          "not from the graph", hint=EAGER_HINT)


def _diagnosis(out, pos, whole_loop: bool) -> str | None:
    """The hint for the likeliest slip when a captured decode's tokens are wrong (out as the replays left it)."""
    written = out != -1
    if int(written.all(dim=0).sum()) == 1 and int(written.any(dim=0).sum()) == 1:  # one column, every sequence
        if int(pos.item()) == 0:
            return ("every step wrote the same column: advance pos in place inside the graph (pos.add_(1)); "
                    "`pos = pos + 1` binds a new tensor and leaves the buffer the next replay reads as it was")
        if whole_loop:
            return "a replay decoded one token only: run the step `steps` times inside one torch.cuda.graph block"
        return ("every replay wrote the same column of out: write at column pos, the position tensor "
                "(out.index_copy_(1, pos, nxt[:, None])), not at a column fixed when you captured")
    if not bool(written.all()):
        return ("some columns of out were never written: store each step's token in the out you were given, in "
                "place, at column pos (out.index_copy_(1, pos, nxt[:, None])); a new tensor bound to the name "
                "out never reaches the checker's buffer")
    return None


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


@exercise(2,
          "warm up on a side stream, then inside torch.cuda.graph call step(token, pos) and write its result "
          "into out at pos, into token, and advance pos: all in place, so each replay decodes the next token")
def check_capture_step(capture_step: Callable) -> str:
    """32 replays from two start tokens equal eager decoding, one graph replay per token and no step run in
    Python; a replayed step is at least 2x faster than eager."""
    require_cuda("capturing a decode step")
    model = decoder.make_decoder(LAB_CONFIG, "cuda", seed=checking.rng().randrange(1000))
    step = _WatchedStep(decoder.greedy_step(model))
    token, pos, out = _buffers(LAB_CONFIG)
    graph = _graph(capture_step(step, token, pos, out), "capture_step")
    for seed in (checking.rng().randrange(1000), checking.rng().randrange(1000, 2000)):
        first = decoder.first_tokens(LAB_CONFIG, "cuda", seed=seed)
        out.fill_(-1)
        calls = step.calls
        with counting_graph_calls() as counts:
            _replay_steps(graph, token, pos, first, STEPS)
        _no_eager_steps(step, calls, f"{STEPS} replays of your graph")
        if counts["replays"] != STEPS:
            raise CheckFailed(f"{STEPS} calls of graph.replay() made {counts['replays']} graph replays: one replay "
                              "should be one step", hint=EAGER_HINT)
        _same_tokens(out, _eager_tokens(model, first), f"{STEPS} replays from start tokens {first.tolist()}",
                     hint=_diagnosis(out, pos, whole_loop=False))
    eager = _median_s(lambda: decoder.decode(step.step, first, STEPS))
    replayed = _median_s(lambda: _replay_steps(graph, token, pos, first, STEPS))
    if eager < MIN_STEP_SPEEDUP * replayed:
        raise CheckFailed(f"{STEPS} replays take {replayed * 1e3:.2f} ms against eager {eager * 1e3:.2f} ms "
                          f"({eager / replayed:.1f}x); expected at least {MIN_STEP_SPEEDUP:g}x: is the whole step "
                          "inside the graph?")
    return (f"2 sequences of {STEPS} tokens equal eager, {counts['replays']} replays each and no step run in "
            f"Python; a replayed step {replayed / STEPS * 1e6:.0f} us against eager {eager / STEPS * 1e6:.0f} us "
            f"({eager / replayed:.1f}x)")


# ---- exercise 3: capture the whole loop ----------------------------------------------------------------------

LOOP_STEPS = (20, 24, 28)  # exercise 3 draws its steps here: fewer than out's 32 columns, so `steps` must be used


@exercise(3,
          "inside one torch.cuda.graph, run the step of exercise 2 `steps` times; the position and token advance "
          "on the device, so one replay decodes the whole sequence")
def check_capture_loop(capture_loop: Callable) -> str:
    """One replay (one cudaGraphLaunch, no step run in Python) per sequence decodes the same `steps` tokens as
    eager, for two start tokens; `steps` is drawn per call, and the columns of out after it stay unwritten."""
    require_cuda("capturing a decode loop")
    import torch

    steps = checking.rng().choice(LOOP_STEPS)
    model = decoder.make_decoder(LAB_CONFIG, "cuda", seed=checking.rng().randrange(1000))
    step = _WatchedStep(decoder.greedy_step(model))
    token, pos, out = _buffers(LAB_CONFIG)
    graph = _graph(capture_loop(step, token, pos, out, steps), "capture_loop")
    captured_steps = step.calls
    one_graph = ("capture all `steps` steps inside one torch.cuda.graph block; replaying a one-step graph in a "
                 "Python loop is exercise 2 again")
    for profiled, seed in enumerate((checking.rng().randrange(1000), checking.rng().randrange(1000, 2000))):
        first = decoder.first_tokens(LAB_CONFIG, "cuda", seed=seed)
        out.fill_(-1)

        def one_sequence(first=first):
            token.copy_(first)
            pos.zero_()
            graph.replay()
            torch.cuda.synchronize()

        calls = step.calls
        if profiled:
            events = trace.record(one_sequence)
            launches = trace.count(events, trace.LAUNCH_CATEGORIES, "cudaGraphLaunch")
            if launches != 1:
                raise CheckFailed(f"one sequence took {launches} graph launches; the whole loop should be one graph",
                                  hint=one_graph)
        else:
            with counting_graph_calls() as counts:
                one_sequence()
            if counts["replays"] != 1:
                raise CheckFailed(f"one call of graph.replay() made {counts['replays']} graph replays; the whole "
                                  "loop should be one graph", hint=one_graph)
        _no_eager_steps(step, calls, "a replay of your graph")
        if bool((out[:, steps:] != -1).any()):
            raise CheckFailed(f"a replay wrote tokens past column {steps - 1}: with steps={steps} it should decode "
                              f"{steps} tokens", hint="loop `steps` times, the number you are given; out has room "
                              "for more tokens than the checker asks for")
        _same_tokens(out[:, :steps], _eager_tokens(model, first, steps),
                     f"one replay of {steps} steps from start tokens {first.tolist()}",
                     hint=_diagnosis(out[:, :steps], pos, whole_loop=True))
    kernels = trace.count(events, {"kernel"})
    return (f"2 sequences of {steps} tokens equal eager, each one graph replay (one launch, {kernels} kernels) with "
            f"no step run in Python; {captured_steps} step calls while capturing")


# ---- exercise 4: host wait or GPU gap ------------------------------------------------------------------------

def _random_kernels(rng: random.Random, n: int) -> list[tuple[float, float, float]]:
    """Kernels as (launch returned, start, end): sometimes queued ahead, sometimes late, sometimes overlapping,
    sometimes starting together with the one before (launched at another moment)."""
    kernels, t = [], 0.0
    for _ in range(n):
        start = t + rng.choice((0.0, rng.uniform(0.1, 3.0)))
        if kernels and rng.random() < 0.2:
            start = kernels[-1][1]   # a tie: of kernels starting together, the first launched decides
        launched = start + rng.uniform(-5.0, 1.0)
        end = start + rng.uniform(0.5, 6.0)
        kernels.append((round(launched, 3), round(start, 3), round(end, 3)))
        t = end - rng.choice((0.0, rng.uniform(0.0, 1.0)))   # sometimes the next kernel overlaps this one
    return kernels


def _split_by_slices(kernels: list[tuple[float, float, float]], window: tuple[float, float]) -> tuple[float, ...]:
    """The checker's own (busy, host wait, GPU gap), by brute force and independent of the library: cut the window
    at every start, end and launch return inside it and judge each slice alone. A slice is busy if a kernel runs
    through it; otherwise the kernel that starts next decides (of those starting together, the first launched):
    host wait while its launch call has not returned, a GPU gap once it has; with none to come, host wait.
    Kernels are clipped to the window, and one with nothing left inside it takes no part."""
    lo, hi = window
    inside = [(launched, max(start, lo), min(end, hi)) for launched, start, end in kernels
              if min(end, hi) > max(start, lo)]
    cuts = sorted({lo, hi, *(t for k in inside for t in k if lo < t < hi)})
    parts = [0.0, 0.0, 0.0]
    for a, b in zip(cuts, cuts[1:], strict=False):
        mid = (a + b) / 2
        if any(start < mid < end for _, start, end in inside):
            parts[0] += b - a
            continue
        later = [(start, launched) for launched, start, _ in inside if start > mid]
        parts[1 if not later or min(later)[1] > mid else 2] += b - a
    return tuple(parts)


def _random_window(rng: random.Random, kernels: list[tuple[float, float, float]]) -> tuple[float, float]:
    """A window around the kernels, or one whose edges cut through them (kernels reaching outside it, or lying
    wholly outside it)."""
    first, last = min(k[1] for k in kernels), max(k[2] for k in kernels)
    middle = (first + last) / 2
    lo = first - rng.uniform(0, 2) if rng.random() < 0.5 else rng.uniform(first, middle)
    hi = last + rng.uniform(0, 3) if rng.random() < 0.5 else rng.uniform(middle, last)
    return round(lo, 3), round(max(hi, lo + 0.5), 3)


@exercise(4,
          "walk the kernels in start order (of kernels starting together, the first launched first), clipped to "
          "the window, with a cursor at the end of the work so far; a gap before a kernel is host wait until its "
          "launch call returned and a GPU gap after that; overlaps count once as busy; after the last kernel the "
          "GPU waits for the host")
def check_attribute_idle(attribute_idle: Callable) -> str:
    """Hand-made cases and 200 random ones, unsorted, some with windows cutting through kernels and some with
    kernels starting together, against the checker's own brute-force split (the library's split is private: a
    lab never hands out its answer)."""
    cases = [
        ([(1.0, 2.0, 5.0)], (0.0, 6.0)),                         # waits for the launch, then 1 us GPU gap
        ([(-3.0, 1.0, 2.0), (0.5, 4.0, 5.0)], (0.0, 5.0)),       # all queued ahead: only GPU gaps
        ([(0.0, 0.0, 4.0), (1.0, 2.0, 3.0)], (0.0, 4.0)),        # overlap: busy counts once
        ([(9.0, 1.0, 2.0), (10.0, 11.0, 12.0)], (0.0, 12.0)),    # second kernel launched late
        ([(-1.0, -2.0, 1.0), (2.0, 3.0, 8.0)], (0.0, 6.0)),      # clipped: one begins before lo, one ends after hi
        ([(-5.0, -4.0, -1.0), (0.5, 1.0, 2.0), (6.0, 7.0, 9.0)], (0.0, 5.0)),   # two wholly outside take no part
        ([(-3.0, -2.0, 9.0)], (0.0, 5.0)),                       # one kernel through the whole window
        ([(2.5, 3.0, 4.0), (1.0, 3.0, 5.0)], (0.0, 6.0)),        # starting together: the first launched decides,
        ([(1.0, 3.0, 4.0), (2.5, 3.0, 5.0)], (0.0, 6.0)),        # ...whichever of them ends first
        ([(0.5, 1.0, 2.0), (8.0, 9.0, 10.0)], (3.0, 6.0)),       # no kernel inside: the GPU waits for the host
        ([], (0.0, 5.0)),                                        # no kernel at all: the same
        ([(4.0, 6.0, 9.0), (0.0, 1.0, 2.0)], (0.0, 6.0)),        # one starting at hi takes no part: the tail is
        ([(-2.0, -1.0, 0.0), (2.0, 3.0, 4.0)], (0.0, 5.0)),      # ...host wait; one ending at lo takes none either
    ]
    rng = checking.rng()
    for _ in range(200):
        kernels = _random_kernels(rng, rng.randint(1, 12))
        window = _random_window(rng, kernels)
        rng.shuffle(kernels)
        cases.append((kernels, window))
    for kernels, window in cases:
        want = _split_by_slices(kernels, window)
        yours = attribute_idle(list(kernels), window)
        if not (isinstance(yours, (tuple, list)) and len(yours) == 3):
            raise CheckFailed(f"return (busy_us, host_wait_us, gpu_gap_us), not {yours!r}")
        yours = tuple(number(y, f"your {what}", "microseconds", positive=False)
                      for y, what in zip(yours, ("busy_us", "host_wait_us", "gpu_gap_us"), strict=True))
        if min(yours) < -1e-9:
            raise CheckFailed(f"kernels {kernels[:4]} in window {window}: you returned {yours}; no part of the "
                              "window can be negative")
        if any(abs(y - w) > 1e-6 for y, w in zip(yours, want, strict=True)):
            shown = ", ".join(f"{w:.3f}" for w in want)
            raise CheckFailed(f"kernels {kernels[:4]}{'...' if len(kernels) > 4 else ''} in window {window}: you "
                              f"returned {tuple(round(float(y), 3) for y in yours)}, expected ({shown})")
        if abs(sum(float(y) for y in yours) - (window[1] - window[0])) > 1e-6:
            raise CheckFailed("busy + host wait + GPU gap must add up to the window")
    return (f"{len(cases)} cases right, unsorted, with overlaps, late launches, work queued ahead, kernels "
            "starting together and windows cutting through kernels")


# ---- exercise 5: attention over the filled cache only ---------------------------------------------------------

FILLED_HINT = ("one program per (sequence, query head): load that sequence's pos from GPU memory, walk slots "
               "0..pos in blocks with an online softmax (running maximum and sum), load with a mask so no slot past "
               "pos is ever read, and read KV head h // (Hq // Hkv); never turn pos into a Python number")
FILLED_FLAT = 3.0   # a sequence at its first slots must take under a third of the time of one that fills the cache


def _masked_reference(q, k, v, pos):
    """Attention of q [B, Hq, D] over slots 0..pos[b] of k, v [B, Hkv, T, D], in float32, the rest masked."""
    import torch
    import torch.nn.functional as F

    mask = torch.arange(k.shape[2], device=q.device)[None, :] <= pos[:, None]          # [B, T]
    return F.scaled_dot_product_attention(q.float()[:, :, None], k.float(), v.float(), attn_mask=mask[:, None, None],
                                          enable_gqa=True)[:, :, 0]


def _poisoned(k, v, pos):
    """Copies of k and v with every slot past each sequence's pos set to NaN."""
    import torch

    past = torch.arange(k.shape[2], device=k.device)[None, :] > pos[:, None]           # [B, T]
    k, v = k.clone(), v.clone()
    k[past[:, None, :, None].expand_as(k)] = float("nan")
    v[past[:, None, :, None].expand_as(v)] = float("nan")
    return k, v


def _attend(attention: Callable, q, k, v, pos, what: str):
    """Your attention once, in sync debug mode: a read of pos back to the host fails with a clear message."""
    import torch

    torch.cuda.synchronize()
    with warnings.catch_warnings():  # PyTorch's note that the mode is a prototype, once per process: not yours
        warnings.filterwarnings("ignore", message="Synchronization debug mode")
        torch.cuda.set_sync_debug_mode("error")
    try:
        return attention(q, k, v, pos)
    except RuntimeError as exc:
        if "synchroniz" not in str(exc):
            raise
        raise CheckFailed(f"{what}: your attention synchronised with the GPU, most often a read of pos back to the "
                          f"host ({str(exc).splitlines()[0]})",
                          hint="keep pos on the GPU: pass the tensor to your kernel and tl.load it there; .item(), "
                               "int(pos), .tolist() and slicing by pos wait for the GPU, and a graph would keep "
                               "the length it saw") from None
    finally:
        torch.cuda.set_sync_debug_mode(0)


def _replay_ms(graph, pos, value: int, replays: int = 20) -> float:
    """Median over 3 rounds of one replay's GPU time, with every sequence at slot `value`."""
    import torch

    pos.fill_(value)
    graph.replay()
    samples = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / replays)
    return statistics.median(samples)


@exercise(5, FILLED_HINT)
def check_filled_attention(filled_attention: Callable) -> str:
    """Equal to masked attention at positions that start, end and cross blocks, each sequence its own; no NaN
    from the slots past pos; no host read of pos; one captured graph serves every position; a sequence at its
    first slots takes under a third of the time of one that fills a long cache. float32 references in full
    precision whatever your TF32 setting; the cache the check made is given back when it ends."""
    require_cuda("attention in a Triton kernel")
    import torch

    try:
        with checking.no_tf32():
            return _judge_filled(filled_attention)
    finally:
        torch.cuda.empty_cache()


def _judge_filled(filled_attention: Callable) -> str:
    import torch

    rng = checking.rng()
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    kv_heads = rng.choice((2, 4))              # at least two, so h % Hkv and h // (Hq // Hkv) pick different heads
    heads = kv_heads * rng.choice((2, 4))
    dim, slots, batch = rng.choice((16, 32, 64)), rng.randrange(90, 200), rng.choice((2, 3))
    q = torch.randn(batch, heads, dim, generator=gen).cuda()
    k = torch.randn(batch, kv_heads, slots, dim, generator=gen).cuda()
    v = torch.randn(batch, kv_heads, slots, dim, generator=gen).cuda()
    edges = sorted({0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, slots - 1, rng.randrange(slots)} & set(range(slots)))
    tolerance = 1e-4 * dim ** 0.5
    pos = torch.zeros(batch, dtype=torch.long, device="cuda")
    draws = []
    for p in edges:                             # each sequence its own position: this one, and two others
        draws.append([p] + [rng.randrange(slots) for _ in range(batch - 1)])
        rng.shuffle(draws[-1])
    for where in draws:
        pos.copy_(torch.tensor(where))
        k_in, v_in = _poisoned(k, v, pos)
        got = _attend(filled_attention, q, k_in, v_in, pos, f"positions {where}")
        want = _masked_reference(q, k, v, pos)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape) or not got.is_cuda:
            raise CheckFailed(f"positions {where}: return y shaped {tuple(want.shape)} on the GPU, not "
                              f"{type(got).__name__} {tuple(getattr(got, 'shape', ()))}")
        bad = got.float().isnan().any(dim=(1, 2))
        if bad.any():
            b = int(bad.nonzero()[0])
            clean = _attend(filled_attention, q, k, v, pos, f"positions {where}")
            if clean.float()[b].isnan().any():
                raise CheckFailed(f"positions {where}: sequence {b} (pos {where[b]}) gives NaN even with no NaN in the "
                                  "cache: a softmax over no slots is 0 / 0",
                                  hint="attend over slots 0..pos, pos included: at pos 0 the one filled slot is slot 0")
            raise CheckFailed(f"positions {where} in a cache of {slots} slots: NaN in sequence {b}'s output: your "
                              f"attention read slots past its pos ({where[b]}), which hold NaN here",
                              hint="load with a mask (mask=t <= pos) so a slot past pos is never read: a masked "
                                   "softmax still multiplies what it loads by zero, and 0 * NaN is NaN")
        error = (got.float() - want).abs().amax(dim=(1, 2))
        if not bool((error <= tolerance).all()):
            b = int((~(error <= tolerance)).nonzero()[0])
            raise CheckFailed(f"positions {where}: sequence {b} (pos {where[b]}) differs from attention over slots "
                              f"0..{where[b]} by {float(error[b]):.3g}")
    # One graph for every position: pos changed in place between replays.
    static_q, static_k, static_v = q.clone(), k.clone(), v.clone()
    pos.fill_(edges[0])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_y = filled_attention(static_q, static_k, static_v, pos)
    except RuntimeError as exc:
        raise CheckFailed(f"capturing your attention failed: {str(exc).splitlines()[0]}", hint=FILLED_HINT) from None
    for where in draws:
        pos.copy_(torch.tensor(where))
        graph.replay()
        error = (static_y.float() - _masked_reference(q, k, v, pos)).abs().max().item()
        if not error <= tolerance:
            raise CheckFailed(f"one captured graph, positions changed to {where}: differs by {error:.3g}: the "
                              "graph kept the length it saw at capture", hint=FILLED_HINT)
    # A long cache in bfloat16: right values far past the short cache's slots, in q's dtype; then the bytes read
    # follow the position, timed in a graph at the first slots against all of them.
    long_slots = 65536
    cuda_gen = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))  # your default generator untouched
    qq = torch.randn(2, 32, 64, device="cuda", dtype=torch.bfloat16, generator=cuda_gen)
    kk, vv = (torch.randn(2, 8, long_slots, 64, device="cuda", dtype=torch.bfloat16, generator=cuda_gen)
              for _ in range(2))
    long_pos = torch.tensor([long_slots - 1, rng.randrange(long_slots // 4, long_slots - 1)], device="cuda")
    where = long_pos.tolist()
    got = _attend(filled_attention, qq, kk, vv, long_pos, f"a cache of {long_slots} slots, positions {where}")
    if not isinstance(got, torch.Tensor) or got.dtype != qq.dtype or tuple(got.shape) != tuple(qq.shape):
        raise CheckFailed(f"a bfloat16 cache of {long_slots} slots: return y shaped {tuple(qq.shape)} in q's dtype "
                          f"(torch.bfloat16), not {getattr(got, 'dtype', type(got).__name__)} "
                          f"{tuple(getattr(got, 'shape', ()))}", hint="allocate y like q (torch.empty_like(q)) and "
                          "store into it; accumulate in float32 inside the kernel")
    want = _masked_reference(qq, kk, vv, long_pos)
    error = (got.float() - want).abs().max().item()
    if not error <= 0.05 * want.abs().max().item() + 1e-3:
        raise CheckFailed(f"a bfloat16 cache of {long_slots} slots, positions {where}: differs from attention over "
                          f"slots 0..pos by {error:.3g} (the answer's largest value is {want.abs().max().item():.3g})",
                          hint="walk every filled block, up to pos however long the cache: no fixed number of blocks "
                               "and no window")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        filled_attention(qq, kk, vv, long_pos)
    short_ms, full_ms = _replay_ms(graph, long_pos, 63), _replay_ms(graph, long_pos, long_slots - 1)
    if not short_ms * FILLED_FLAT < full_ms:
        raise CheckFailed(f"a cache of {long_slots} slots: {short_ms * 1e3:.1f} us a call at pos 63 against "
                          f"{full_ms * 1e3:.1f} us at pos {long_slots - 1} ({full_ms / short_ms:.1f}x): your attention "
                          "takes about as long whatever the position, so it reads (or walks) the whole cache",
                          hint="loop only over the blocks up to pos (range(0, pos + 1, BLOCK)): zeroing or masking "
                               "the slots past pos still reads them")
    return (f"{len(draws)} position sets of {slots} slots, {heads} query heads on {kv_heads} KV heads, each sequence "
            f"its own pos: equal to masked attention, no NaN from the slots past pos, no host read, one graph for every "
            f"position; {long_slots} slots: {short_ms * 1e3:.1f} us at pos 63 against {full_ms * 1e3:.1f} us full "
            f"({full_ms / short_ms:.0f}x)")
