"""Checkers for lab 03, "torch.compile and graph breaks".

Exercises 1, 2 and 4 run on a CPU (dynamo's graph capture is the same there); exercise 3 needs CUDA.
Compiles that only need to count graphs use dynamo's counting backend, so the checks take seconds.
"""

from __future__ import annotations

import contextlib
import io
import logging
import numbers
from collections.abc import Callable

from ... import compat, trace
from ...checking import CheckFailed, exercise, require_cuda

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "SHAPES",
    "BuggyBlock",
    "audited_step",
    "check_bug_hunt",
    "check_isolated_break",
    "check_really_graphed",
    "check_recompiles",
    "normalise_rows",
    "rms_normalise",
    "shape_inputs",
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
        self.rows: list[int | None] = []   # the row count of each compiled call, in the order made

    def __call__(self, gm, example_inputs, **_):   # torch passes a mode's or options' settings on as keywords
        import torch

        self.frame_count += 1
        self.op_count += sum(1 for node in gm.graph.nodes if node.op == "call_function")

        def run(*args):
            self.calls += 1
            self.rows.append(next((a.shape[0] for a in args if isinstance(a, torch.Tensor) and a.dim()), None))
            return gm.forward(*args)

        return run


def _in_order(rows: list, shapes: list[int]) -> bool:
    """Whether the compiled calls ran on `shapes` in order: each call on the next input, or on the one before again
    (a warm-up on the first input, a function that runs as more than one graph), and every input reached."""
    done, previous = 0, None
    for n in rows:
        if done < len(shapes) and n == shapes[done]:
            done, previous = done + 1, n
        elif n != previous:
            return False
    return done == len(shapes)


@exercise(2,
          "by default the first call compiles for its exact row count; the next row count fails that shape guard and "
          "recompiles for any row count of 2 or more, and a 1-row input (1 is a size the compiler specialises) "
          "recompiles again. Compile once for any size: dynamic=True (or torch._dynamo.mark_dynamic on the first "
          "input); the 1-row input's compile is then the one recompile allowed.")
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
    if not _in_order(counter.rows, SHAPES):
        raise CheckFailed(f"your compiled function ran on row counts {counter.rows}, not on the ten inputs in the "
                          f"order given ({SHAPES})", hint="run it on every input in order, as a server meets its "
                          "batches: it cannot reorder them to put off a recompile")
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


# Inductor runs each call of its compiled code inside a profiler range of this name (CompiledFxGraph.__call__ in
# torch/_inductor/output_code.py: a cpu_op through _RecordFunctionFast in torch 2.13 and 2.14, a user_annotation where
# record_function makes it), and reduce-overhead's CUDA-graph trees copy the inputs and replay the graph inside it.
INDUCTOR_CALL = "## Call CompiledFxGraph"
# Kernel launches one call may make beside its graph launches. The solution makes 1: CUDA-graph trees copy the
# compiled function's inputs into the graph's static buffers with one torch._foreach_copy_ (cudagraph_trees.py,
# _copy_inputs_and_remove_from_src); the copy of the new mean into running_mean is a cudaMemcpyAsync, no kernel.
# An update kept eager adds 2 to 5 (x.mean(0), mul_, add_, ...). The MLP alone launches at least 16 (8 matmuls,
# 8 GELUs) when it runs eagerly: whatever launches more than this ran the MLP, or much of it, outside the graph.
LAUNCHES_BESIDE_GRAPH = 8

OUTSIDE_HINT = ("the graph must replay the MLP, not stand beside it: call fn only inside the function you compile with "
                "mode=\"reduce-overhead\", and outside it do little more than copy the new mean into running_mean")
NOT_COMPILED_HINT = ("this exercise is about the graph torch.compile(..., mode=\"reduce-overhead\") builds and replays "
                     "(Inductor's CUDA-graph trees); a torch.cuda.CUDAGraph captured by hand is lab 04's subject. "
                     "Compile a function that returns the new mean instead of writing it into its input")


def _launch_origins(events: list[dict]) -> dict[str, int]:
    """One call's launches by origin: graph and kernel launches made while Inductor's compiled code ran (inside an
    INDUCTOR_CALL range on the host) and those made anywhere else.

    Ranges and launch calls are matched by time alone, not by thread: the profiler does not name a launch call's
    thread the same way in every release, and one call of the answer launches from one thread."""
    ranges = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
              if e.get("ph") == "X" and str(e.get("name", "")).startswith(INDUCTOR_CALL)
              and not str(e.get("cat", "")).startswith("gpu")]   # not the range's copy on the GPU's row
    found = {"graphs_compiled": 0, "graphs_other": 0, "kernels_compiled": 0, "kernels_other": 0}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") != "X" or e.get("cat") not in trace.LAUNCH_CATEGORIES:
            continue
        kind = "graphs" if name.startswith(trace.GRAPH_LAUNCH_PREFIXES) else (
            "kernels" if name.startswith(trace.KERNEL_LAUNCH_PREFIXES) else None)
        if kind is None:
            continue
        start = float(e["ts"])
        inside = any(lo <= start <= hi for lo, hi in ranges)
        found[f"{kind}_{'compiled' if inside else 'other'}"] += 1
    return found


@exercise(3,
          "reduce-overhead silently falls back to launching kernels one by one when the function mutates an "
          "input it does not own; return the new running mean from the compiled function and copy it into the "
          "caller's tensor outside it. Check for cudaGraphLaunch in a trace (trace.launch_counts counts launches at "
          "every API).")
def check_really_graphed(make_graphed: Callable) -> str:
    """Same effects as fn; no CUDA-graph skip; one call's trace: a graph launch made by Inductor's compiled code, no
    graph launch from anywhere else, and at most LAUNCHES_BESIDE_GRAPH kernel launches beside the graph."""
    require_cuda("torch.compile(mode=\"reduce-overhead\") with CUDA graphs")
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
    events = trace.record(lambda: run(x, yours), calls=1)
    launches = trace.launch_counts(events)
    line = f"{skips} CUDA-graph skips; one call made {launches}"
    if skips or launches.graphs == 0:
        raise CheckFailed(line + " (it did not graph)")
    # Whether the graph is torch.compile's is read from the judged call's own trace, not from a counter or from
    # Inductor's CUDA-graph-tree state: dynamo's counters are process-wide and cumulative (they move for any compile
    # the answer makes, a reduce-overhead compile of a mere clone beside a graph of its own included, and do not
    # move when the compiled code was built in an earlier cell or read from a cache), and the tree managers of
    # torch._inductor.cudagraph_trees are private and change between releases. The trace says where each graph
    # launch of this call came from: Inductor's compiled code marks its calls with INDUCTOR_CALL (a name read in the
    # torch 2.13 and 2.14 sources and used by profiling tools since the 2.x releases before the course's 2.11;
    # tests/test_mutants_lab03.py checks that the installed torch still emits it, on a CPU).
    origins = _launch_origins(events)
    if origins["graphs_compiled"] == 0 or origins["graphs_other"]:
        raise CheckFailed(
            f"{line}, of which {origins['graphs_compiled']} from torch.compile's compiled code and "
            f"{origins['graphs_other']} from elsewhere: the graph that replays must be the one torch.compile "
            "(mode=\"reduce-overhead\") builds, not one captured by hand", NOT_COMPILED_HINT)
    line += (f", every graph launch from torch.compile's compiled code; {launches.kernels} kernel launches beside "
             f"the graph ({origins['kernels_compiled']} inside the compiled code, where CUDA-graph trees copy the "
             f"inputs into the graph's static buffers; {origins['kernels_other']} in the code around it; at most "
             f"{LAUNCHES_BESIDE_GRAPH} allowed)")
    if launches.kernels > LAUNCHES_BESIDE_GRAPH:
        raise CheckFailed(line + ": the MLP alone launches at least 16 kernels (8 matmuls, 8 GELUs) when it runs "
                          "eagerly, so much of the work ran outside the graph", OUTSIDE_HINT)
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
    if len(got_audit) != len(want_audit):
        raise CheckFailed(f"the audit saw {len(got_audit)} records over {len(xs)} steps, expected one a step")
    for i, (a, b) in enumerate(zip(got_audit, want_audit, strict=True)):
        if not (isinstance(a, list) and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, torch.Tensor))
                                            for v in a)):
            got = type(a).__name__ + (f" of {type(a[0]).__module__}.{type(a[0]).__name__}"
                                      if isinstance(a, list) and a else "")
            raise CheckFailed(f"step {i + 1}: the audit got a {got}, not a list of floats",
                              hint="the audit needs host values, as the original gives it: return the row norms as "
                                   "a tensor from the compiled function and call audit(norms.tolist()) outside it")
        got, want = (torch.tensor([float(v) for v in r], dtype=torch.float64) for r in (a, b))
        if len(a) != len(b) or not torch.allclose(got, want, rtol=1e-4):
            raise CheckFailed(f"step {i + 1}: the audit's row norms differ from the original's: {len(a)} values "
                              f"against {len(b)}" + (f", largest difference {(got - want).abs().max().item():.3g}"
                                                     if len(a) == len(b) else ""))
    if counter.frame_count == 0:
        raise CheckFailed("nothing was compiled with the backend the checker passed")
    line = (f"{counter.frame_count} compiled graph(s) over {len(xs)} calls, audit called {len(got_audit)} times "
            "with the original's values")
    if counter.frame_count != 1:
        raise CheckFailed(line + " (a break still splits the hot path)")
    return line
