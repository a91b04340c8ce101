"""Checkers for lab 08, "Graphs across GPUs".

Each checker runs your function's source on two ranks started with torchrun, under a timeout that stops them
all: exercises 1 and 3 with gloo on the CPU, exercise 2 with NCCL on two GPUs. Every rank gets different
data, and the checker compares with eager collectives, so an answer that only looks right cannot pass.
`judged_together` lets one pair of ranks meet several answers to an exercise in turn (the mutation suite's way
of paying for one start-up instead of one each).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from ... import checking, rank_checks
from ...checking import CheckFailed, exercise
from ...rank_checks import RankExercise, answer_rows, answered, failed, needs_two_gpus

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_functional_all_reduce", "check_graphed_mean", "check_symmetric_clip"]

WATCHDOG_S = 20  # how long one answer may take on a rank in exercise 3 (a collective it waits on forever stops it)
SLOW_WATCHDOG_S = 120  # the same in exercises 1 and 2, whose first answer compiles or profiles
TOLERANCE = 1e-4

# ---- exercise 1: functional collectives -----------------------------------------------------------------------

_FUNCTIONAL = RankExercise('''
    from launchlab.compat import explain


    def eager_all_reduce(t):
        return checkers_all_reduce(t.clone())


    def judge(learner):
        torch.manual_seed(SEED + rank)  # different data on each rank: the sum must really combine them
        x, w, probe = torch.randn(8, 32), torch.randn(32, 32) / 6, torch.randn(8, 32)
        before = probe.clone()
        out = yours(learner, probe)  # one call, eagerly: its value, and what it did to its input
        total = eager_all_reduce(before)
        if not isinstance(out, torch.Tensor):
            return {"returned": type(out).__name__}
        row = {"input_changed": not torch.equal(probe, before), "probe_error": difference(out, total),
               "scale": total.abs().max().item(),
               "as_mean": difference(out, total / world), "as_own": difference(out, before)}
        report = yours(explain, unrolled(learner, 4), x, w)
        layered = yours(unrolled(learner, 4), x, w)
        return {**row, "graphs": report.graph_count, "breaks": len(report.break_reasons),
                "reasons": [r.splitlines()[0] for r in report.break_reasons],
                "error": difference(layered, unrolled(eager_all_reduce, 4)(x, w))}
''', "gloo", lambda: {"SEED": checking.rng().randrange(10_000), "WATCHDOG_S": SLOW_WATCHDOG_S})


@exercise(1,
          "a functional collective (torch.distributed._functional_collectives) returns the sum over every rank as a "
          "new tensor that dynamo traces into the graph; dist.all_reduce writes over x (dynamo keeps it in the graph "
          "as a functional all-reduce and a copy back), and torch._dynamo.disable breaks the graph at every call")
def check_functional_all_reduce(all_reduce_functional: Callable) -> str:
    """One call on its own: the sum over two gloo ranks, its input left alone; four unrolled layers: one graph,
    no breaks, and the eager all-reduce's answer."""
    rows, _, run = answer_rows(all_reduce_functional, _FUNCTIONAL)
    answered(rows, "all_reduce_functional")
    if len(rows) < 2:
        raise failed(run)
    for r in rows:
        where = f"rank {r['rank']}"
        if "returned" in r:
            raise CheckFailed(f"{where}: your function returned {r['returned']}, not a tensor",
                              hint="return the result: funcol.all_reduce gives a new tensor, and a function that "
                                   "only calls it returns None")
        if r["probe_error"] > TOLERANCE:
            if r["as_mean"] <= TOLERANCE:
                raise CheckFailed(f"{where}: your result is the mean over ranks, not the sum",
                                  hint="all-reduce with 'sum' and do not divide by the world size: the exercise "
                                       "asks for the sum")
            if r["as_own"] <= TOLERANCE:
                raise CheckFailed(f"{where}: your result is this rank's own x: no collective combined the ranks",
                                  hint="return the all-reduced tensor itself: a collective on a copy (x.clone()) "
                                       "leaves x as it was, and returning x returns this rank's data alone")
            relative = r["probe_error"] / max(r["scale"], 1e-30)
            raise CheckFailed(f"{where}: one call differs from the sum over ranks by {r['probe_error']:.3g} "
                              f"({relative:.2%} of its largest value)",
                              hint="the sum is right to a few digits only: all-reduce in x's own dtype, float32 "
                                   "(bfloat16 and float16 keep 3 or 4 significant digits)" if relative < 0.01 else
                                   "all-reduce with a sum over every rank: another reduction (max, mean, product) or "
                                   "a subset of the ranks gives another tensor")
        if r["input_changed"]:
            raise CheckFailed(f"{where}: your function changed its input x in place",
                              hint="return the sum as a new tensor and leave x alone: dist.all_reduce (or a "
                                   "copy_ back into x) writes over the caller's tensor; funcol.all_reduce does not")
    for r in rows:   # the layers only once every rank's single call was right: a rank wrong there is named, not its partner
        where = f"rank {r['rank']}"
        if r["breaks"] or r["graphs"] != 1:
            raise CheckFailed(f"{where}: {r['graphs']} graphs and {r['breaks']} breaks over 4 all-reduces "
                              f"(expected 1 graph, 0 breaks); first reason: {(r['reasons'] or ['none'])[0]}")
        if r["error"] > 1e-5:
            raise CheckFailed(f"{where}: four layers differ from the eager all-reduce by {r['error']:.3g}")
    return ("one call gave the sum over ranks and left its input alone; 4 all-reduces in one graph with no "
            "breaks on both ranks, equal to the eager all-reduce")


# ---- exercise 2: an all-reduce in a CUDA graph ----------------------------------------------------------------

_GRAPHED = RankExercise('''
    from launchlab import trace
    from launchlab.checking import counting_graph_calls


    def judge(learner):
        x = torch.zeros(4096, device=device)
        graph = yours(learner, x, STEPS)
        if not isinstance(graph, torch.cuda.CUDAGraph):
            return {"returned": type(graph).__name__}
        error, replays = 0.0, 0
        for trial in range(3):
            fresh = [torch.randn(4096, generator=torch.Generator().manual_seed(SEED + 10 * trial + r))
                     for r in range(world)]
            x.copy_(fresh[rank])
            with counting_graph_calls() as counts:
                yours(graph.replay)
                torch.cuda.synchronize()
            replays = max(replays, counts["replays"])
            error = max(error, (x.cpu() - sum(fresh) / world).abs().max().item())
        # Values so large that the sum over ranks is near float32's limit (3.4e38): the mean of every round stays
        # finite, a sum carried into the next round (one division at the end) overflows to inf.
        large = [1.2e38 + 1e36 * torch.rand(4096, generator=torch.Generator().manual_seed(SEED + 7 + r))
                 for r in range(world)]
        x.copy_(large[rank])
        yours(graph.replay)
        torch.cuda.synchronize()
        large_error = ((x.cpu() - sum(l / world for l in large)) / 1e38).abs().max().item()
        events = trace.record(graph.replay)
        launches = trace.launch_counts(events)  # every API: runtime and driver kernel launches, graph launches
        kernels = [i.name for i in trace.intervals(events, {"kernel"})]
        row = {"error": error, "large_error": large_error, "replays": replays, "kernels": len(kernels),
               "nccl_kernels": sum("nccl" in name.lower() for name in kernels),
               "graph_launches": launches.graphs, "kernel_launches": launches.kernels}
        try:
            graph.reset()  # free its memory before the next answer (a graph never captured has nothing to free)
        except RuntimeError:
            pass
        return row
''', "nccl", lambda: {"SEED": checking.rng().randrange(10_000), "STEPS": 4, "WATCHDOG_S": SLOW_WATCHDOG_S},
    also_alone=True)


@exercise(2,
          "warm the step up on a side stream, then capture `steps` rounds of dist.all_reduce(x) and "
          "x.div_(world) inside torch.cuda.graph; return the graph, and replay nothing yourself")
def check_graphed_mean(capture_mean: Callable) -> str:
    """Three fresh inputs per rank give the mean over ranks after one replay, which is one graph launch, no kernel
    launched outside it, running exactly one NCCL kernel per round (after the first round every rank holds the
    mean, so the value alone cannot count the rounds); an input near float32's limit stays finite (a division in
    every round); and one rank alone, where the world size is 1, gets x back (a size typed in shows)."""
    needs_two_gpus("exercises 1 and 3 run", ranks="NCCL ranks")
    rows, alone, run = answer_rows(capture_mean, _GRAPHED)
    answered(rows, "capture_mean")
    if len(rows) < 2:
        raise failed(run)
    steps = 4
    for r in rows:
        if "returned" in r:
            raise CheckFailed(f"rank {r['rank']}: capture_mean returned {r['returned']}, not a torch.cuda.CUDAGraph",
                              hint="return the torch.cuda.CUDAGraph you captured (the checker replays it)")
        if r["replays"] != 1:
            raise CheckFailed(f"rank {r['rank']}: one call of graph.replay() made {r['replays']} graph replays",
                              hint="return the torch.cuda.CUDAGraph itself: its replay runs the captured work, "
                                   "never your Python")
        if r["error"] > 1e-5:
            raise CheckFailed(f"rank {r['rank']}: after one replay x differs from the mean over ranks by "
                              f"{r['error']:.3g}: does the graph all-reduce the buffer you were given, and divide?")
        if not r["large_error"] <= 1e-6:  # NaN and inf fail too
            raise CheckFailed(f"rank {r['rank']}: with inputs near 1.2e38 one replay ends {r['large_error']:.3g} x 1e38 "
                              "away from the mean over ranks (inf: it overflowed), where the mean of every round "
                              "stays finite",
                              hint="divide in every round, right after its all-reduce: a sum carried into the next "
                                   "round grows world-fold per round and overflows, whatever one division at the end "
                                   "would have given")
        if r["graph_launches"] != 1 or r["kernel_launches"]:
            raise CheckFailed(f"rank {r['rank']}: one replay made {r['graph_launches']} graph launches and "
                              f"{r['kernel_launches']} kernel launches (runtime and driver API); everything should "
                              "be inside one graph")
        if r["nccl_kernels"] != steps:
            raise CheckFailed(f"rank {r['rank']}: one replay ran {r['nccl_kernels']} NCCL kernels for {steps} rounds",
                              hint="capture exactly `steps` rounds, each dist.all_reduce(x) then x.div_(world): after "
                                   "the first round every rank holds the mean, so the value alone cannot show a "
                                   "round left out or added")
    answered(alone, "capture_mean")
    if not alone or "failed" in alone[0]:
        raise CheckFailed("on one rank alone (world size 1), where the mean over ranks is x itself, "
                          + (alone[0]["failed"] if alone else "the run reported nothing"))
    if not alone[0]["error"] <= 1e-5:
        raise CheckFailed(f"on one rank alone (world size 1) one replay moves x by {alone[0]['error']:.3g} from the "
                          "mean over that one rank, which is x itself",
                          hint="divide by the world size the ranks were started with (dist.get_world_size() or "
                               "world), not by a number typed in: two ranks cannot tell x / 2 from x / world")
    return (f"3 fresh inputs and one near float32's limit on each of two ranks, and on one rank alone, gave the "
            f"mean after one replay; one graph launch running {rows[0]['kernels']} kernels, {steps} of them NCCL's, "
            "and no kernel launched outside it")


# ---- exercise 3: symmetric clipping ---------------------------------------------------------------------------

_CLIP = RankExercise('''
    def clipped(grad, norm):
        return grad * (MAX_NORM / norm) if norm > MAX_NORM else grad


    def judge(learner):
        def all_reduce(t, what):
            watchdog.collective(what, t.numel())
            return checkers_all_reduce(t)

        cases = []
        # rank 0 alone over the limit, both far under, both far over; each rank under it but together over (about
        # 4.1 and 3.8 for 5.6); the same with the global norm 0.1% over it, and 0.1% under it (a slack of 0.01 in
        # the test, 0.2%, shows); together under but over in squares (3.4, whose square is 11)
        for case, (scales, edge) in enumerate((([1.0, 0.01], None), ([0.01, 0.02], None), ([1.0, 2.0], None),
                                               ([0.13, 0.12], None), ([0.13, 0.12], 1.001), ([0.13, 0.12], 0.999),
                                               ([0.08, 0.07], None))):
            grads = [torch.randn(1000, generator=torch.Generator().manual_seed(SEED + 10 * case + r)) * scales[r]
                     for r in range(world)]
            if edge is not None:  # the global norm set a hair over or under the limit
                grads = [g * (edge * MAX_NORM / torch.sqrt(sum(h.norm() ** 2 for h in grads))) for g in grads]
            norms = [g.norm() for g in grads]
            total = torch.sqrt(sum(n ** 2 for n in norms))
            expected = clipped(grads[rank], total)
            slips = {"local": clipped(grads[rank], norms[rank]), "norms": clipped(grads[rank], sum(norms)),
                     "no sqrt": clipped(grads[rank], total ** 2), "mean": clipped(grads[rank], total / world ** 0.5)}
            given = grads[rank].clone()
            issued = len(watchdog.log)
            returned = yours(learner, given, MAX_NORM, all_reduce)
            row = {"case": case, "issued": watchdog.log[issued:]}
            row["steps"] = all_reduce(torch.ones(1), "step count").item()
            if not isinstance(returned, torch.Tensor):
                row["returned"] = type(returned).__name__
            else:
                row["error"] = difference(returned, expected)
                row["in_place_error"] = difference(given, expected)
                row["slips"] = [k for k, v in slips.items()
                                if difference(v, expected) > TOLERANCE and difference(returned, v) <= TOLERANCE]
                decides = {"local": norms[rank], "norms": sum(norms), "no sqrt": total ** 2,
                           "mean": total / world ** 0.5}
                row["decides_wrong"] = [k for k, v in decides.items() if bool(v > MAX_NORM) != bool(total > MAX_NORM)]
                row["clips"] = difference(grads[rank], expected) > TOLERANCE
                row["unclipped"] = row["clips"] and difference(returned, grads[rank]) <= TOLERANCE
            cases.append(row)
        return {"cases": cases}
''', "gloo", lambda: {"SEED": checking.rng().randrange(10_000), "MAX_NORM": 5.0, "WATCHDOG_S": WATCHDOG_S,
                      "TOLERANCE": TOLERANCE})

SYMMETRY_HINT = ("issue the same collectives on every rank, in the same order: all-reduce the squared norm on every "
                 "rank, every time, and only then decide from the global norm")
CLIP_SLIPS = {
    "local": "this rank decided by its own norm: all-reduce the squared norm first, then decide, and scale, by the "
             "global norm every rank now shares",
    "norms": "you added the ranks' norms: add their squared norms (all-reduce grad.norm() ** 2), then take the "
             "square root",
    "no sqrt": "the global norm is the square root of the summed squared norms: take .sqrt() after the all-reduce",
    "mean": "all-reduce sums the squared norms: do not divide by the world size",
}


UNCLIPPED_HINT = ("every rank applies the same scale, max_norm / global norm, whenever the global norm is over the "
                  "limit: a rank left its gradient as it was")
CLIP_RULE_HINT = ("your ranks agreed on their collectives; the scale is what is wrong: the global norm is the square "
                  "root of the all-reduced sum of squared norms, and only where it is more than max_norm does every "
                  "rank scale its gradient by max_norm / global norm")


def _clip_slip(cases: list[dict]) -> str | None:
    """The hint of the one slip that explains every wrong gradient of every rank, if there is one, and that went
    wrong wherever its decision to clip is wrong: a slack in the test looks like several slips in the one case at
    the limit's edge, and is right where they decide wrongly."""
    judged = [c for c in cases if "error" in c]
    wrong = [c for c in judged if c["error"] > TOLERANCE]
    if not wrong:
        return None
    for slip in CLIP_SLIPS:
        if all(slip in c["slips"] for c in wrong) and all(
                c["error"] > TOLERANCE for c in judged if slip in c["decides_wrong"]):
            return CLIP_SLIPS[slip]
    if all(c["unclipped"] for c in wrong):
        return UNCLIPPED_HINT
    extra = next((c["issued"] for c in judged if len(c["issued"]) > 1), None)
    if extra:
        return (f"your call issued {len(extra)} collectives ({', '.join(extra)}); the squared norm needs one, and an "
                "all-reduce of the gradient itself replaces each rank's gradient by the sum over ranks")
    return CLIP_RULE_HINT


@exercise(3,
          "every rank all-reduces its squared norm first (the same collective on every rank), then all ranks "
          "decide from the global norm they now share")
def check_symmetric_clip(clip_by_global_norm: Callable) -> str:
    """Seven cases (one rank over the limit, none, both, and four at the limit's edge: each rank under it but the
    global norm over, 0.1% over, 0.1% under, the global norm under it but its square over) complete on both ranks,
    each issuing the same collectives, with global-norm clipping in place."""
    rows, _, run = answer_rows(clip_by_global_norm, _CLIP)
    answered(rows, "clip_by_global_norm")
    if len(rows) < 2:  # judged alone, so `run` is this answer's
        issued: dict[str, int] = {}
        for line in run.tagged("COLLECTIVE"):
            rank = line.split()[1]
            issued[rank] = issued.get(rank, 0) + 1
        raise CheckFailed(f"the ranks did not both finish (exit {run.returncode}); collectives issued per rank through "
                          f"the all_reduce you were given: {issued or 'none'}: a rank that skips a collective leaves "
                          "its partner waiting",
                          hint=SYMMETRY_HINT)
    described = ("rank 0 over the limit", "both under", "both over", "each under, together over",
                 "each under, together 0.1% over", "together 0.1% under", "together under, in squares over")
    for first, second in zip(rows[0]["cases"], rows[1]["cases"], strict=True):
        if first["issued"] != second["issued"]:
            raise CheckFailed(f"{described[first['case']]}: rank 0 issued {first['issued'] or 'no collective'}, "
                              f"rank 1 {second['issued'] or 'no collective'}", hint=SYMMETRY_HINT)
    for r in rows:
        for row in r["cases"]:
            where = f"rank {r['rank']}, {described[row['case']]}"
            if row["steps"] != 2.0:
                raise CheckFailed(f"{where}: the step count came back {row['steps']:.1f}, not 2: the ranks' "
                                  "collectives were paired wrongly", hint=SYMMETRY_HINT)
            if "returned" in row:
                raise CheckFailed(f"{where}: your function returned {row['returned']}, not the gradient",
                                  hint="scale grad in place and return it")
            if row["error"] > TOLERANCE:
                raise CheckFailed(f"{where}: your gradient differs from global-norm clipping by {row['error']:.3g}",
                                  hint=_clip_slip([c for r in rows for c in r["cases"]]))
            if row["in_place_error"] > TOLERANCE:
                raise CheckFailed(f"{where}: you returned the clipped gradient, but the gradient you were given was "
                                  "not scaled", hint="scale grad in place (grad.mul_(scale)) and return it: the "
                                  "optimiser reads the gradients where they are")
    paired = ("with the same collectives" if any(row["issued"] for r in rows for row in r["cases"]) else
              "(your collectives went around the all_reduce you were given, so the ranks' step counts and gradients "
              "were compared, not their collectives)")
    return (f"{len(described)} cases ({', '.join(described)}) finished on both ranks {paired}, each gradient "
            "clipped in place by the global norm")


_EXERCISES = {check_functional_all_reduce.__name__: _FUNCTIONAL, check_graphed_mean.__name__: _GRAPHED,
              check_symmetric_clip.__name__: _CLIP}


def judged_together(checker: Callable, answers: Iterable[Callable]) -> AbstractContextManager[None]:
    """Inside the block, `checker` judges each of `answers` from one run of two ranks that met them all in turn
    (launchlab.rank_checks.judged_together)."""
    return rank_checks.judged_together(_EXERCISES[checker.__name__], answers)
