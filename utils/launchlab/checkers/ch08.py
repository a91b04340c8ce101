"""Checkers for lab 08, "Graphs across GPUs".

Each checker runs your function's source on two ranks started with torchrun, under a timeout that stops them
all: exercises 1 and 3 with gloo on the CPU, exercise 2 with NCCL on two GPUs. Every rank gets different
data, and the checker compares with eager collectives, so an answer that only looks right cannot pass.
"""

from __future__ import annotations

import inspect
import random
import textwrap
from collections.abc import Callable

from ..checking import CheckFailed, exercise
from ..env import gpu_count
from ..ranks import RankRun, run_ranks

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_functional_all_reduce", "check_graphed_mean", "check_symmetric_clip"]

RANK_TIMEOUT_S = 240
WATCHDOG_S = 20

PRELUDE = """
import sys
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from launchlab.ranks import Watchdog, init, result, shutdown, unrolled
"""


def _program(fn: Callable, body: str, **constants: object) -> str:
    """A rank program: imports, the learner's function as written, the checker's constants, then `body`."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise CheckFailed(f"cannot read the source of {getattr(fn, '__name__', fn)!r} ({exc}); define it with "
                          "`def` in a notebook cell") from None
    lines = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return f"{PRELUDE}\n{source}\nLEARNER = {fn.__name__}\n{lines}\n{textwrap.dedent(body)}"


def _run(program: str, backend: str) -> RankRun:
    run = run_ranks(program, nprocs=2, args=(backend,), timeout_s=RANK_TIMEOUT_S, echo=False)
    if not run.ok and not run.timed_out and len(run.results()) < 2:
        # Once in a while on a loaded machine a gloo rank dies while the group forms, before any code of the
        # learner's ran: run it again, so a verdict never rests on that. Code that fails fails twice.
        run = run_ranks(program, nprocs=2, args=(backend,), timeout_s=RANK_TIMEOUT_S, echo=False)
    if any("NotImplementedError" in line for line in run.lines):
        raise NotImplementedError("your function still raises NotImplementedError in the ranks")
    if run.timed_out:
        raise CheckFailed(f"the ranks did not finish within {RANK_TIMEOUT_S} s and were stopped")
    # Both ranks reported: a failure after that is in the library's teardown, not in the learner's code.
    if not run.ok and len(run.results()) < 2:
        errors = [line for line in run.lines if "Error" in line or "WATCHDOG" in line]
        raise CheckFailed(f"the ranks failed (exit {run.returncode}): " + (errors[-1][:300] if errors else
                          "; ".join(run.lines[-3:])[:300]))
    return run


def _per_rank(run: RankRun) -> list[dict]:
    rows = sorted(run.results(), key=lambda r: r["rank"])
    if len(rows) != 2:
        raise CheckFailed(f"expected a result from each of 2 ranks, got {len(rows)}")
    return rows


# ---- exercise 1: functional collectives -----------------------------------------------------------------------

@exercise("Exercise 1: replace the disabled all-reduce with a functional one",
          "return funcol.all_reduce(x, 'sum', dist.group.WORLD): it returns a new tensor and dynamo traces it, "
          "where dist.all_reduce works in place behind a graph break")
def check_functional_all_reduce(all_reduce_functional: Callable) -> str:
    """Four unrolled layers on two gloo ranks: one graph, no breaks, and the eager all-reduce's answer."""
    program = _program(all_reduce_functional, """
        rank, world, device = init(sys.argv[1])
        torch.manual_seed(SEED + rank)  # different data on each rank: the sum must really combine them
        x, w = torch.randn(8, 32), torch.randn(32, 32) / 6

        def eager_all_reduce(t):
            t = t.clone()
            dist.all_reduce(t)
            return t

        from launchlab.compat import explain
        report = explain(unrolled(LEARNER, 4), x, w)
        yours, expected = unrolled(LEARNER, 4)(x, w), unrolled(eager_all_reduce, 4)(x, w)
        result(rank=rank, graphs=report.graph_count, breaks=len(report.break_reasons),
               error=(yours - expected).abs().max().item(), reasons=[r.splitlines()[0] for r in report.break_reasons])
        dist.destroy_process_group()
    """, SEED=random.randrange(10_000))
    rows = _per_rank(_run(program, "gloo"))
    for r in rows:
        if r["breaks"] or r["graphs"] != 1:
            raise CheckFailed(f"rank {r['rank']}: {r['graphs']} graphs and {r['breaks']} breaks over 4 all-reduces "
                              f"(expected 1 graph, 0 breaks); first reason: {(r['reasons'] or ['none'])[0]}")
        if r["error"] > 1e-5:
            raise CheckFailed(f"rank {r['rank']}: differs from the eager all-reduce by {r['error']:.3g}")
    return "4 all-reduces in one graph with no breaks on both ranks, equal to the eager all-reduce"


# ---- exercise 2: an all-reduce in a CUDA graph ----------------------------------------------------------------

@exercise("Exercise 2: capture an all-reduce in a CUDA graph",
          "warm the step up on a side stream, then capture `steps` rounds of dist.all_reduce(x) and "
          "x.div_(world) inside torch.cuda.graph; return the graph, and replay nothing yourself")
def check_graphed_mean(capture_mean: Callable) -> str:
    """Three fresh inputs per rank give the mean over ranks after one replay, which is one graph launch."""
    if gpu_count() < 2:
        raise CheckFailed(f"this exercise runs 2 NCCL ranks, one per GPU, and this machine has {gpu_count()} GPU(s)")
    program = _program(capture_mean, """
        from launchlab import trace
        rank, world, device = init(sys.argv[1])
        x = torch.zeros(4096, device=device)
        graph = LEARNER(x, STEPS)
        if not isinstance(graph, torch.cuda.CUDAGraph):
            raise TypeError(f"capture_mean returned {type(graph).__name__}, not a torch.cuda.CUDAGraph")
        error = 0.0
        for trial in range(3):
            fresh = [torch.randn(4096, generator=torch.Generator().manual_seed(SEED + 10 * trial + r)) for r in range(world)]
            x.copy_(fresh[rank])
            graph.replay()
            torch.cuda.synchronize()
            error = max(error, (x.cpu() - sum(fresh) / world).abs().max().item())
        events = trace.record(graph.replay)
        result(rank=rank, error=error, graph_launches=trace.count(events, trace.LAUNCH_CATEGORIES, "cudaGraphLaunch"),
               kernel_launches=trace.count(events, trace.LAUNCH_CATEGORIES, "cudaLaunchKernel"))
        graph.reset()
        shutdown()
    """, SEED=random.randrange(10_000), STEPS=4)
    rows = _per_rank(_run(program, "nccl"))
    for r in rows:
        if r["error"] > 1e-5:
            raise CheckFailed(f"rank {r['rank']}: after one replay x differs from the mean over ranks by "
                              f"{r['error']:.3g}: does the graph all-reduce the buffer you were given, and divide?")
        if r["graph_launches"] != 1 or r["kernel_launches"]:
            raise CheckFailed(f"rank {r['rank']}: one replay made {r['graph_launches']} graph launches and "
                              f"{r['kernel_launches']} kernel launches; everything should be inside one graph")
    return "3 fresh inputs on each rank gave the mean after one replay; one graph launch, no eager kernels"


# ---- exercise 3: symmetric clipping ---------------------------------------------------------------------------

@exercise("Exercise 3: make the clipping symmetric",
          "every rank all-reduces its squared norm first (the same collective on every rank), then all ranks "
          "decide from the global norm they now share")
def check_symmetric_clip(clip_by_global_norm: Callable) -> str:
    """Three cases (one rank over the limit, none, both) complete on both ranks with global-norm clipping."""
    program = _program(clip_by_global_norm, """
        rank, world, device = init(sys.argv[1])
        watchdog = Watchdog(rank, WATCHDOG_S)

        def all_reduce(t, what):
            watchdog.collective(what, t.numel())
            dist.all_reduce(t)
            return t

        rows = []
        for case, scales in enumerate(([1.0, 0.01], [0.01, 0.02], [1.0, 2.0])):
            grads = [torch.randn(1000, generator=torch.Generator().manual_seed(SEED + 10 * case + r)) * scales[r]
                     for r in range(world)]
            total = torch.sqrt(sum((g ** 2).sum() for g in grads))
            expected = grads[rank] * (MAX_NORM / total) if total > MAX_NORM else grads[rank]
            yours = LEARNER(grads[rank].clone(), MAX_NORM, all_reduce)
            steps = all_reduce(torch.ones(1), "step count")
            rows.append({"case": case, "error": (yours - expected).abs().max().item(), "steps": steps.item()})
        watchdog.finish()
        result(rank=rank, rows=rows, collectives=watchdog.log)
        dist.destroy_process_group()
    """, SEED=random.randrange(10_000), MAX_NORM=5.0, WATCHDOG_S=WATCHDOG_S)
    run = run_ranks(program, nprocs=2, args=("gloo",), timeout_s=RANK_TIMEOUT_S, echo=False)
    if any("NotImplementedError" in line for line in run.lines):
        raise NotImplementedError("your function still raises NotImplementedError in the ranks")
    if run.timed_out or len(run.results()) < 2:
        issued: dict[str, int] = {}
        for line in run.tagged("COLLECTIVE"):
            rank = line.split()[1]
            issued[rank] = issued.get(rank, 0) + 1
        raise CheckFailed(f"the ranks did not both finish (exit {run.returncode}); collectives issued per rank: "
                          f"{issued or 'none'}: a rank that skips a collective leaves its partner waiting")
    described = ("rank 0 over the limit", "both under", "both over")
    for r in _per_rank(run):
        for row in r["rows"]:
            if row["steps"] != 2.0:
                raise CheckFailed(f"rank {r['rank']}, {described[row['case']]}: the step count came back "
                                  f"{row['steps']:.1f}, not 2: the ranks' collectives were paired wrongly")
            if row["error"] > 1e-4:
                raise CheckFailed(f"rank {r['rank']}, {described[row['case']]}: your gradient differs from "
                                  f"global-norm clipping by {row['error']:.3g}")
    return f"3 cases ({', '.join(described)}) finished on both ranks, each clipped by the global norm"
