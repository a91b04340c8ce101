"""Adapters for APIs that moved between library releases, so notebooks read the same on each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BreakReport:
    """What torch._dynamo.explain found: graphs, breaks and the reason for each break."""

    graph_count: int
    break_count: int
    break_reasons: tuple[str, ...]


def explain(fn: Callable, *args, **kwargs) -> BreakReport:
    """torch._dynamo.explain across releases: explain(fn)(*args) since 2.1, explain(fn, *args) before."""
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        out = dynamo.explain(fn)(*args, **kwargs)
    except TypeError:
        out = dynamo.explain(fn, *args, **kwargs)
    if isinstance(out, tuple):  # torch < 2.1 returned a tuple whose second item was the graph count
        graphs, breaks, reasons = out[1], out[1] - 1, [str(r) for r in out[3]]
    else:
        graphs, breaks = out.graph_count, out.graph_break_count
        reasons = [getattr(r, "reason", str(r)) for r in out.break_reasons]
    return BreakReport(graphs, breaks, tuple(reasons))


def recompile_limit() -> int:
    """How many compiled versions of one frame dynamo keeps before falling back to eager."""
    import torch._dynamo.config as config

    # Called cache_size_limit before torch 2.6, recompile_limit since.
    return int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))


def first_line(reason: str) -> str:
    """The headline of a graph-break reason (newer releases add explanation, hints and links below it)."""
    return reason.strip().splitlines()[0] if reason.strip() else reason


def cudagraph_skips() -> int:
    """How many times Inductor has declined to use CUDA graphs in this process (reduce-overhead mode)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])
