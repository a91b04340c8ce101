"""Checkers for lab 11, "Communication inside graphs".

Exercise 1 runs your all-reduce's source, with the Triton kernels it launches, on two NCCL ranks started with
torchrun, under a watchdog per rank and a deadline for the run: nothing hangs the notebook. Every rank holds
different data, and each knows every rank's input, so each checks the sum itself. The races an idle GPU never
shows are provoked: one rank writes its input late (a sleep captured before its copy), and one rank reads slowly
(while it reads, a kernel of the checker's pulls from its peer over the same link). Exercise 2 runs on a CPU,
on tables planted so that no plausible wrong rule gets every size right.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from ... import checking, rank_checks
from ...checking import CheckFailed, exercise
from ...env import gpu_count
from ...rank_checks import RankExercise, answer_rows, answered

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["MARGIN", "check_one_shot", "check_path_choice"]

WATCHDOG_S = 60         # one answer on one rank: Triton compiles, four graphs, a trace; a wait never answered stops it
LATE_CYCLES = 100_000   # the late rank's sleep before it writes its input (about 50 us at Hopper's clock)
SLOWER_THAN_LIBRARY = 2.0  # your kernel's time per 4 KB all-reduce may be at most this many times the library's
MARGIN = 0.10           # exercise 2: leave NCCL only for a path at least this much faster (its median)

# ---- exercise 1: a one-shot all-reduce over symmetric memory -------------------------------------------------

_ONE_SHOT = RankExercise('''
    SIZES = (2048, 777, 2 ** 21)  # 4 KB of bfloat16; an odd size no block divides; 4 MB, past a grid's worth
    CALLS = 4                     # calls per captured graph
    GROUP = dist.group.WORLD.group_name
    MOST = max(SIZES)
    library_buffer = symm_mem.empty(2048, dtype=torch.bfloat16, device=device)
    symm_mem.rendezvous(library_buffer, GROUP)
    ballast = symm_mem.empty(64 << 20, dtype=torch.bfloat16, device=device)  # 128 MB a slow reader's peer serves
    ballast_handle = symm_mem.rendezvous(ballast, GROUP)
    pulled = torch.empty_like(ballast)
    low = torch.cuda.Stream(priority=0)
    high = torch.cuda.Stream(priority=-1)


    @triton.jit
    def _pull(ptrs, dst, numel, peer: tl.constexpr, BLOCK: tl.constexpr):
        """Copy the peer's ballast here: load on the link the slow reader's own reads use."""
        src = tl.load(ptrs.to(tl.pointer_type(tl.uint64)) + peer).to(tl.pointer_type(tl.bfloat16))
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < numel), mask=offs < numel)


    def pull_from_peer():
        """On this rank, a long pull from the next rank's memory, on a low-priority stream."""
        with torch.cuda.stream(low):
            n = ballast.numel()
            _pull[(triton.cdiv(n, 4096),)](ballast_handle.buffer_ptrs_dev, pulled, n, peer=(rank + 1) % world,
                                           BLOCK=4096)


    def stage(name):
        say(f"STAGE rank={rank} {name}")


    def every_input(seed, n):
        gens = [torch.Generator(device=device).manual_seed(seed * 10 + r) for r in range(world)]
        return [torch.randn(n, generator=g, device=device).to(torch.bfloat16) for g in gens]


    def sum_of(inputs):
        return sum(t.float() for t in inputs).to(torch.bfloat16)


    def wrongness(out, inputs):
        """How far out is from the sum, and which slip it matches."""
        want = sum_of(inputs).float()
        got = out.float()
        unwritten = int(torch.isnan(got).sum())
        return {"error": (got - want).abs().nan_to_num(float("inf")).max().item(), "unwritten": unwritten,
                "as_mean": (got - want / world).abs().max().item(),
                "as_own": (got - inputs[rank].float() * world).abs().max().item()}


    def judge(learner):
        buffer = symm_mem.empty(MOST + 8192, dtype=torch.bfloat16, device=device)
        handle = symm_mem.rendezvous(buffer, GROUP)
        outs = torch.full((CALLS, MOST + 8192), float("nan"), dtype=torch.bfloat16, device=device)
        row = {"eager": [], "graphs": []}
        seed = SEED
        for n in SIZES:  # one call each, eagerly, then a second at once: a signal left set shows in the second
            for call in range(2):
                stage(f"eager call {call + 1} at {n} elements")
                seed += 1
                inputs = every_input(seed, n)
                buffer[:n].copy_(inputs[rank])
                outs[0].fill_(float("nan"))
                yours(learner, buffer[:n], handle, outs[0, :n])
                torch.cuda.synchronize()
                found = wrongness(outs[0, :n], inputs)
                found.update(n=n, call=call + 1, spilled=int((~torch.isnan(outs[0, n:].float())).sum()))
                row["eager"].append(found)
        for n in (2048, 2 ** 21):
            for case in ("late writer", "slow reader"):
                for odd in range(world):  # each rank in turn writes late, or reads slowly
                    stage(f"{case} (rank {odd}) at {n} elements: capture")
                    inputs_static = torch.empty(CALLS, n, dtype=torch.bfloat16, device=device)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.stream(high):
                        with torch.cuda.graph(graph, stream=high):
                            for i in range(CALLS):
                                if case == "late writer" and rank == odd:
                                    torch.cuda._sleep(LATE_CYCLES)
                                buffer[:n].copy_(inputs_static[i])
                                learner(buffer[:n], handle, outs[i, :n])
                    worst = {"error": 0.0, "unwritten": 0}
                    for replay in range(3):
                        stage(f"{case} (rank {odd}) at {n} elements: replay {replay + 1}")
                        seed += 1
                        every = [every_input(seed * 100 + i, n) for i in range(CALLS)]
                        for i in range(CALLS):
                            inputs_static[i].copy_(every[i][rank])
                        torch.cuda.synchronize()
                        dist.barrier()
                        if case == "slow reader" and rank == odd:
                            pull_from_peer()
                        with torch.cuda.stream(high):
                            graph.replay()
                        torch.cuda.synchronize()
                        for i in range(CALLS):
                            found = wrongness(outs[i, :n], every[i])
                            worst["error"] = max(worst["error"], found["error"])
                            worst["unwritten"] = max(worst["unwritten"], found["unwritten"])
                    row["graphs"].append({"case": case, "odd": odd, "n": n, **worst})
                    del graph
        stage("timing at 4 KB")
        row.update(time_against_library(learner, buffer, handle, outs))
        stage("trace")
        names = [i.name for i in trace.intervals(trace.record(lambda: learner(buffer[:2048], handle, outs[0, :2048])),
                                                 {"kernel"})]
        row["kernels"] = names
        torch.cuda.synchronize()
        return row


    def time_against_library(learner, buffer, handle, outs):
        """us per 4 KB all-reduce, yours and the library's one-shot, each a copy in and the all-reduce, 20 to a
        graph, replayed back to back."""
        n, rounds = 2048, 20
        source = torch.randn(n, device=device).to(torch.bfloat16)

        def yours_once():
            buffer[:n].copy_(source)
            learner(buffer[:n], handle, outs[0, :n])

        def library_once():
            library_buffer.copy_(source)
            torch.ops.symm_mem.one_shot_all_reduce_out(library_buffer, "sum", GROUP, outs[1, :n])

        timed = {}
        for name, once in (("yours_us", yours_once), ("library_us", library_once)):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(rounds):
                    once()
            for _ in range(2):
                graph.replay()
            torch.cuda.synchronize()
            dist.barrier()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(11)]
            marks[0].record()
            for i in range(10):
                graph.replay()
                marks[i + 1].record()
            torch.cuda.synchronize()
            timed[name] = statistics.median(a.elapsed_time(b) * 1e3 / rounds for a, b in zip(marks, marks[1:]))
            del graph
        return timed
''', "nccl", lambda: {"SEED": checking.rng().randrange(10_000), "WATCHDOG_S": WATCHDOG_S, "LATE_CYCLES": LATE_CYCLES},
    imports='''
    import statistics
    import triton
    import triton.language as tl
    import torch.distributed._symmetric_memory as symm_mem
    from launchlab import trace
    from launchlab.child import say
    ''')

LIBRARY_KERNELS = ("nccl", "c10d", "symmetric_memory")  # NCCL's kernels and PyTorch's symmetric-memory ones
RACE_HINTS = {
    "late writer": ("wait at entry: announce on every peer's signal pad that your input is in, then wait for every "
                    "peer's announcement on yours, before reading any peer's buffer"),
    "slow reader": ("wait again before returning: once you return, your caller may overwrite your buffer, and a "
                    "slower peer may still be reading it; a second barrier after the sum keeps it until every peer "
                    "has read"),
}


def _hung_where(run) -> str:
    """The last stage each rank reported before the run stopped."""
    last: dict[str, str] = {}
    for line in run.tagged("STAGE"):
        words = line.split(" ", 2)
        if len(words) == 3:
            last[words[1]] = words[2]
    return "; ".join(f"{who.replace('=', ' ')}: {what}" for who, what in sorted(last.items())) or "before any call"


@exercise(1,
          "in one Triton kernel: a barrier over the signal pads (announce to every peer, then wait for every peer, "
          "and consume each signal, so the next call starts clean), the sum of every rank's buffer in float32 over "
          "all of numel (a loop or enough programs, masked at the tail), then the same barrier again before "
          "returning")
def check_one_shot(one_shot_all_reduce: Callable) -> str:
    """Three sizes eagerly, twice each; in graphs of 4 calls at 4 KB and 4 MB, each rank in turn writing late and
    each in turn reading slowly, three replays each: every output the bfloat16 sum of every rank's input, nothing
    written past it; no library collective; at 4 KB at most 2x the library one-shot's time in the same graph."""
    if gpu_count() < 2:
        raise CheckFailed(f"this exercise {checking.NEEDS_GPU} for each of its 2 ranks, and this machine has "
                          f"{gpu_count()}; run this cell on a machine with 2 NVIDIA GPUs linked by NVLink "
                          "(exercise 2 runs here)")
    rows, _, run = answer_rows(one_shot_all_reduce, _ONE_SHOT)
    answered(rows, "one_shot_all_reduce")
    if len(rows) < 2:
        where = _hung_where(run) if run is not None else "unknown"
        stopped = run is not None and (run.timed_out or run.tagged("WATCHDOG"))
        if stopped:
            raise CheckFailed(f"the ranks did not finish and were stopped by the watchdog; last stage per rank: "
                              f"{where}",
                              hint="a wait that no peer answers never ends: consume each signal as you wait for it "
                                   "(set it back to 0), or the next call finds it still set; and wait only for "
                                   "signals your peers send in the same call")
        raise rank_checks.failed(run)
    for r in rows:
        where = f"rank {r['rank']}"
        for e in r["eager"]:
            at = f"{where}, call {e['call']} at {e['n']:,} elements"
            if e["unwritten"]:
                raise CheckFailed(f"{at}: {e['unwritten']:,} of the {e['n']:,} outputs were never written",
                                  hint="cover all of numel: loop over it in each program (tl.range from the "
                                       "program's start, stepping by the grid), or launch enough programs")
            if e["spilled"]:
                raise CheckFailed(f"{at}: {e['spilled']:,} values written past the end of out",
                                  hint="mask every load and store at the tail: offsets < numel")
            if not e["error"] <= 0.0:
                if e["as_mean"] == 0.0:
                    raise CheckFailed(f"{at}: out is the mean over ranks, not the sum",
                                      hint="sum the ranks' buffers; do not divide by the world size")
                if e["as_own"] <= 0.0:
                    raise CheckFailed(f"{at}: out is this rank's own input times the world size",
                                      hint="read every peer's buffer through handle.buffer_ptrs_dev: the ranks hold "
                                           "different data")
                hint = RACE_HINTS["late writer"] if e["call"] == 2 else None
                raise CheckFailed(f"{at}: out differs from the sum of every rank's input by {e['error']:.3g} "
                                  "(expected bit for bit: a float32 sum of two bfloat16 values, rounded once)",
                                  hint=hint)
    for r in rows:
        for g in r["graphs"]:
            if g["unwritten"] or not g["error"] <= 0.0:
                who = "writes its input late" if g["case"] == "late writer" else "reads slowly"
                raise CheckFailed(f"rank {r['rank']}: in a graph of 4 calls at {g['n']:,} elements where rank "
                                  f"{g['odd']} {who}, outputs differ from the sum by {g['error']:.3g}"
                                  + (f" ({g['unwritten']:,} never written)" if g["unwritten"] else ""),
                                  hint=f"{RACE_HINTS[g['case']]}; and {RACE_HINTS['slow reader' if g['case'] == 'late writer' else 'late writer']}")
    for r in rows:
        library = [k for k in r["kernels"] if any(word in k.lower() for word in LIBRARY_KERNELS)]
        if library:
            raise CheckFailed(f"rank {r['rank']}: one call ran the library's kernel {library[0][:80]!r}",
                              hint="write the all-reduce as a Triton kernel of your own: the exercise is the "
                                   "barrier and the sum, not a call to the library's")
    ratio = max(r["yours_us"] / r["library_us"] for r in rows)
    if not ratio <= SLOWER_THAN_LIBRARY:  # NaN fails too
        raise CheckFailed(f"at 4 KB, in a graph of 20 copies and all-reduces, yours takes {rows[0]['yours_us']:.1f} "
                          f"us an all-reduce against the library one-shot's {rows[0]['library_us']:.1f} us "
                          f"({ratio:.2f}x; at most {SLOWER_THAN_LIBRARY}x)",
                          hint="a few programs (one per 4,096 elements, 32 at most) each with its own signal slots; "
                               "no host work in the call: launch one kernel")
    return (f"3 sizes eagerly, twice each, and graphs at 4 KB and 4 MB with each rank in turn late and slow: every "
            f"output the exact sum; at 4 KB {rows[0]['yours_us']:.1f} us an all-reduce against the library "
            f"one-shot's {rows[0]['library_us']:.1f} us ({ratio:.2f}x)")


def judged_together(checker: Callable, answers: Iterable[Callable]) -> AbstractContextManager[None]:
    """Inside the block, `checker` judges each of `answers` from one run of two ranks that met them all in turn."""
    return rank_checks.judged_together({check_one_shot.__name__: _ONE_SHOT}[checker.__name__], answers)


# ---- exercise 2: the path per message size --------------------------------------------------------------------

PATHS = ("nccl", "nccl symmetric", "one-shot", "two-shot")
SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)


def _medians(samples: list[dict]) -> dict[tuple[int, str], float]:
    found: dict[tuple[int, str], list[float]] = {}
    for s in samples:
        if math.isfinite(s["us"]):
            found.setdefault((s["bytes"], s["path"]), []).append(s["us"])
    return {key: statistics.median(values) for key, values in found.items()}


def reference_choice(samples: list[dict]) -> dict[int, str]:
    """The rule exercise 2 states: per size, NCCL unless a path's median is at least MARGIN lower than NCCL's;
    then the lowest median."""
    medians = _medians(samples)
    chosen = {}
    for size in sorted({s["bytes"] for s in samples}):
        here = {path: us for (b, path), us in medians.items() if b == size}
        best = min(here, key=here.get)
        chosen[size] = best if "nccl" not in here or here[best] <= (1 - MARGIN) * here["nccl"] else "nccl"
    return chosen


def _planted(r: random.Random) -> tuple[list[dict], str]:
    """Samples where each plausible wrong rule picks wrong at some size, with what was planted where."""
    medians = {  # the true medians: NCCL stays at 4 KB (7% is within the margin), one-shot at 64 KB, two-shot later
        4 << 10: {"nccl": 10.0, "nccl symmetric": 9.3, "one-shot": 9.6, "two-shot": 11.0},
        64 << 10: {"nccl": 12.0, "nccl symmetric": 11.6, "one-shot": 10.4, "two-shot": 12.5},
        1 << 20: {"nccl symmetric": float("nan"), "nccl": 20.0, "one-shot": 19.0, "two-shot": 16.0},
        16 << 20: {"nccl": 90.0, "nccl symmetric": 86.0, "one-shot": 130.0, "two-shot": 78.0},
    }
    groups = []
    for size, paths in medians.items():
        for path, median in paths.items():
            # seven samples in the order taken: a warm-up's slow one first, then five around the median, one lucky
            spread = [median * (1.02 if path == "nccl" else 1.6), *(median * f for f in (1.0, 0.99, 1.01, 0.995, 1.005)),
                      median * (0.5 if path == "two-shot" and size == 64 << 10 else 0.97)]
            if path == "two-shot" and size == 16 << 20:
                spread[3] = median * 9  # an outlier on the winner: its mean loses, its median does not
            if path == "nccl symmetric" and size == 16 << 20:
                spread[2] = median * 0.3  # another lucky sample
            groups.append([{"path": path, "bytes": size, "us": us} for us in spread])
    # Taken round by round, in a random order of paths within a round, except that the failed path comes first:
    # where NaN is kept, a NaN met first wins every comparison (min, sorted) instead of losing by luck.
    failed = [g for g in groups if math.isnan(g[0]["us"])]
    others = [g for g in groups if g not in failed]
    rows = []
    for k in range(7):
        r.shuffle(others)
        rows += [g[k] for g in failed + others]
    return rows, "a failed path (NaN) at 1 MB, first samples slowed by warm-up, lucky samples, an outlier"


@exercise(2,
          "per size: each path's median over its finite samples (NaN: the path failed there); keep NCCL unless "
          "another path's median is at least 10% lower than NCCL's, and then take the lowest")
def check_path_choice(fastest_path: Callable) -> str:
    """Planted samples for four sizes and four paths in shuffled order: the answer must name the right path for
    every size, keyed by bytes."""
    r = checking.rng()
    samples, what = _planted(r)
    want = reference_choice(samples)
    given = [dict(s) for s in samples]
    got = fastest_path(given)
    if given != samples:
        raise CheckFailed("your function changed the samples it was given", hint="read the samples; do not edit them")
    if not isinstance(got, dict):
        raise CheckFailed(f"fastest_path returned {type(got).__name__}, not a dict of bytes -> path")
    if set(got) != set(want):
        kb = {size // 1024 for size in want}
        hint = "key the answer by the sizes in bytes, as the samples give them" if set(got) == kb else None
        raise CheckFailed(f"your answer's sizes are {sorted(got)}, the samples' are {sorted(want)} (bytes)", hint=hint)
    for size in sorted(want):
        if got[size] != want[size]:
            raise CheckFailed(f"at {size:,} bytes you chose {got[size]!r}; the rule chooses {want[size]!r} "
                              f"(samples: {what})")
    return f"the right path at each of {len(want)} sizes ({what})"
