"""Checkers for lab 03, "torch.compile and graph breaks".

Exercises 1, 2 and 4 run on a CPU (dynamo's graph capture is the same there); exercise 3 needs CUDA.
Compiles that only need to count graphs use dynamo's counting backend, so the checks take seconds.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable

from ... import compat, trace
from ...checking import CheckFailed, exercise

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "BuggyBlock",
    "audited_step",
    "check_bug_hunt",
    "check_isolated_break",
    "check_really_graphed",
    "check_recompiles",
    "rms_normalise",
]

log = logging.getLogger("launchlab.lab03")
SHAPES = [3, 5, 7, 9, 1, 11, 13, 2, 17, 19]  # rows of ten inputs; 1 is special to the compiler


# ---- exercise 1: the graph-break bug hunt ----------------------------------------------------------------

def _make_buggy_block():
    import torch

    @torch._dynamo.disable
    def rms_normalise(h):
        return h / h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()

    class BuggyBlock(torch.nn.Module):
        """A block with five graph breaks of five kinds planted in its forward."""

        def __init__(self, width: int = 64):
            super().__init__()
            self.fc1 = torch.nn.Linear(width, width)
            self.fc2 = torch.nn.Linear(width, width)

        def forward(self, x):
            h = self.fc1(x)
            print(f"block input {tuple(x.shape)}")        # 1. print
            scale = h.abs().max().item()                   # 2. a host round trip
            h = h / scale
            if h.mean() > 0:                               # 3. data-dependent control flow
                h = torch.relu(h)
            else:
                h = torch.tanh(h)
            log.info("activations ready")                  # 4. logging
            h = rms_normalise(h)                           # 5. a helper under torch._dynamo.disable
            return self.fc2(h)

    return BuggyBlock, rms_normalise


BuggyBlock, rms_normalise = _make_buggy_block()


BLOCK_SEED = 0  # exercise 1's original block: weights under which every planted mistake shows


def _inputs(width: int = 64):
    import torch

    gen = torch.Generator().manual_seed(3)
    # Shifted up and down so that both sides of the data-dependent branch are taken.
    return [torch.randn(8, width, generator=gen) + shift for shift in (3.0, -3.0, 0.0)]


@exercise(1,
          "find each break with compat.explain or fullgraph=True; remove the print and logging from the hot path, "
          "keep the scale as a tensor (no .item()), replace the `if` by torch.where (torch.cond compiles too, but "
          "Inductor reads its predicate on the host every call), and inline the disabled helper's arithmetic.")
def check_bug_hunt(make_fixed_block: Callable[[], object]) -> str:
    import torch

    # The original's weights are the same on every call (drawn from the global generator, they let some wrong
    # answers through for one weight draw in four); the learner's global generator is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(BLOCK_SEED)
        buggy = BuggyBlock()
    fixed = make_fixed_block()
    if not isinstance(fixed, torch.nn.Module):
        raise CheckFailed(f"make_fixed_block returned {type(fixed).__name__}; return an nn.Module")
    try:
        fixed.load_state_dict(buggy.state_dict())
    except Exception as exc:
        raise CheckFailed(f"your block must keep fc1 and fc2 as they are, so its weights load: {exc}") from None
    torch._dynamo.reset()
    whole = torch.compile(fixed, fullgraph=True, backend="eager")
    for x in _inputs():
        try:
            got = whole(x)
        except Exception as exc:
            raise CheckFailed("a graph break remains (fullgraph=True raised): "
                              f"{compat.first_line(str(exc))}") from None
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # the original's print
            want = buggy(x)
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            raise CheckFailed(f"compiled as one graph, but the output differs from the original block's "
                              f"(max difference {(got - want).abs().max().item():.3g}) for an input with mean "
                              f"{x.mean().item():+.1f}")
    report = compat.explain(fixed, _inputs()[0])
    if report.break_count:
        raise CheckFailed(f"explain still finds {report.break_count} breaks: {report.break_reasons[:1]}")
    return "one graph under fullgraph=True, outputs equal to the original block on both branches"


# ---- exercise 2: the recompile hunt ----------------------------------------------------------------------

def shape_inputs():
    """Ten inputs whose row counts differ: what a server sees when requests arrive in different batches."""
    import torch

    gen = torch.Generator().manual_seed(5)
    return [torch.randn(n, 16, generator=gen) for n in SHAPES]


def normalise_rows(x):
    """The function to compile: softmax over each row, then scaled by the row count."""
    import torch

    return torch.softmax(x, dim=-1) * x.shape[0]


class _CountingBackend:
    """A compile backend that runs graphs as they are (like CompileCounter) and counts compiles and runs."""

    def __init__(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += sum(1 for node in gm.graph.nodes if node.op == "call_function")

        def run(*args):
            self.calls += 1
            return gm.forward(*args)

        return run


@exercise(2,
          "every new row count fails a shape guard and recompiles, until the recompile limit sends the rest to "
          "eager. Compile once for any size: dynamic=True (or torch._dynamo.mark_dynamic on the first input).")
def check_recompiles(run_all: Callable) -> str:
    import torch

    torch._dynamo.reset()
    counter = _CountingBackend()
    inputs = shape_inputs()
    outputs = run_all(normalise_rows, inputs, counter)
    if counter.frame_count == 0:
        raise CheckFailed("nothing was compiled with the backend the checker passed; "
                          "use torch.compile(fn, backend=backend, ...)")
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(inputs):
        raise CheckFailed(f"return one output per input ({len(inputs)}), got {type(outputs).__name__}")
    for x, out in zip(inputs, outputs, strict=True):
        if not isinstance(out, torch.Tensor) or out.shape != x.shape or not torch.allclose(out, normalise_rows(x)):
            raise CheckFailed(f"the output for {x.shape[0]} rows differs from the eager function's")
    if counter.calls < len(inputs):
        raise CheckFailed(f"only {counter.calls} of the {len(inputs)} inputs ran through compiled code (the rest "
                          "eagerly, or past the recompile limit): every input must run compiled")
    recompiles = counter.frame_count - 1
    line = f"{counter.frame_count} compiles for {len(inputs)} shapes ({recompiles} recompiles, at most 1 allowed)"
    if recompiles > 1:
        raise CheckFailed(line)
    return line


# ---- exercise 3: did it really graph? --------------------------------------------------------------------

def mlp_with_running_mean(width: int = 256, depth: int = 8):
    """A launch-bound function of (x, running_mean): a small MLP on the GPU that also updates a running
    mean of its inputs in place, as training loops do."""
    import torch

    with torch.random.fork_rng(devices=[]):   # fixed weights, the learner's own random state untouched
        torch.random.default_generator.manual_seed(0)
        layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)]).cuda()

    def forward(x, running_mean):
        with torch.no_grad():
            running_mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
            for layer in layers:
                x = torch.nn.functional.gelu(layer(x))
            return x

    return forward


@exercise(3,
          "reduce-overhead silently falls back to launching kernels one by one when the function mutates an "
          "input it does not own; return the new running mean from the compiled function and copy it into the "
          "caller's tensor outside it. Check for cudaGraphLaunch in a trace (trace.launch_counts counts launches at "
          "every API).")
def check_really_graphed(make_graphed: Callable) -> str:
    import torch

    run = make_graphed(mlp_with_running_mean())
    eager = mlp_with_running_mean()  # same seed, same weights
    gen = torch.Generator(device="cuda").manual_seed(1)
    yours, expected = torch.zeros(256, device="cuda"), torch.zeros(256, device="cuda")
    skips_before = compat.cudagraph_skips()
    for call in range(5):
        x = torch.randn(8, 256, device="cuda", generator=gen)
        got = run(x, yours)
        want = eager(x, expected)
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-4):
            raise CheckFailed(f"call {call + 1}: your output differs from the eager function's")
        if not torch.allclose(yours, expected, rtol=1e-4, atol=1e-6):
            raise CheckFailed(f"call {call + 1}: your running_mean differs from the eager function's; it must be "
                              "updated in place, as the original does")
    skips = compat.cudagraph_skips() - skips_before
    x = torch.randn(8, 256, device="cuda", generator=gen)
    # Launches at every API: Triton's kernels go through the driver (cuLaunchKernel), not cudaLaunchKernel.
    launches = trace.launch_counts(trace.record(lambda: run(x, yours), calls=1))
    line = f"{skips} CUDA-graph skips; one call made {launches}"
    if skips or launches.graphs == 0:
        raise CheckFailed(line + " (it did not graph)")
    return line


# ---- exercise 4: a break that must stay ------------------------------------------------------------------

def audited_weights():
    """The weights of the audited step."""
    import torch

    gen = torch.Generator().manual_seed(7)
    return torch.randn(32, 32, generator=gen) / 6


def audited_step(x, w, audit):
    """The step as first written: the audit, which needs host values, sits in the middle of the hot path."""
    import torch

    h = torch.tanh(x @ w)
    audit(h.norm(dim=-1).tolist())  # the audit must see every step's row norms: this break must stay
    return torch.tanh(h @ w) + h


@exercise(4,
          "let the compiled function return what the audit needs as a tensor, and call the audit outside it; "
          "the hot path then compiles to one graph.")
def check_isolated_break(make_step: Callable) -> str:
    import torch
    from torch._dynamo.testing import CompileCounter

    w = audited_weights()
    gen = torch.Generator().manual_seed(11)
    xs = [torch.randn(4, 32, generator=gen) for _ in range(3)]
    want_audit: list = []
    wants = [audited_step(x, w, want_audit.append) for x in xs]

    torch._dynamo.reset()
    counter = CompileCounter()
    got_audit: list = []
    step = make_step(w, got_audit.append, counter)
    gots = [step(x) for x in xs]
    for got, want in zip(gots, wants, strict=True):
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            raise CheckFailed("your step's output differs from the original's")
    if len(got_audit) != len(want_audit) or not all(
            torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-4) for a, b in zip(got_audit, want_audit, strict=True)):
        raise CheckFailed(f"the audit saw {len(got_audit)} records, expected {len(want_audit)} with the same row norms")
    if counter.frame_count == 0:
        raise CheckFailed("nothing was compiled with the backend the checker passed")
    line = (f"{counter.frame_count} compiled graph(s) over {len(xs)} calls, audit called {len(got_audit)} times "
            "with the original's values")
    if counter.frame_count != 1:
        raise CheckFailed(line + " (a break still splits the hot path)")
    return line
