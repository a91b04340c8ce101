"""Checkers for lab 05, "Multi-stream fork/join capture".

Exercises 1-3 read the graph you built back from the driver and compare its DAG with the intended one;
exercise 4 checks the schedule on a CPU and, on a GPU, measures it against the serial chain.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence

from .. import graphs, timing
from ..checking import CheckFailed, exercise, graph_and_output, require_cuda

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "BRANCHES",
    "DURATIONS_US",
    "capture_unjoined",
    "check_assignment",
    "check_explicit_diamond",
    "check_joined",
    "check_torch_diamond",
    "stage_kernels",
]

N = 256
DIAMOND = {"stage_a": set(), "stage_b": {"stage_a"}, "stage_c": {"stage_a"}, "stage_d": {"stage_b", "stage_c"}}
STAGES_SOURCE = r"""
extern "C" __global__ void stage_a(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
extern "C" __global__ void stage_b(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }
extern "C" __global__ void stage_c(const float* x, float* z, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = 3.0f * x[i]; }
extern "C" __global__ void stage_d(const float* y, const float* z, float* out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = y[i] + z[i]; }
"""



def _diamond_problem(shape: graphs.Topology) -> str | None:
    """What is wrong with a graph that should be the stage_a..stage_d diamond, or None."""
    if shape.kinds != ("KERNEL",) * 4:
        return f"the graph has {shape.summary()}; expected exactly 4 kernel nodes"
    found = shape.depends_on()
    if found != DIAMOND:
        wrong = [f"{k} depends on {sorted(v) or 'nothing'} (expected {sorted(DIAMOND[k]) or 'nothing'})"
                 for k, v in found.items() if v != DIAMOND.get(k)]
        return "; ".join(wrong)
    return None


# ---- exercise 1: a diamond in PyTorch ---------------------------------------------------------------------

def diamond_eager(x):
    """The computation of exercise 1: a = x + 1; b = 2a and c = 3a, independent; out = b + c."""
    a = x + 1
    return a * 2 + a * 3


@exercise("Exercise 1: capture a diamond across two streams",
          "fork with side.wait_stream(current) after computing a, compute c under torch.cuda.stream(side), "
          "join with current.wait_stream(side) before using c; capture with CUDAGraph(keep_graph=True)")
def check_torch_diamond(capture_diamond: Callable) -> str:
    """The graph has 4 kernels in a diamond (b and c independent) and computes (x + 1) * 5."""
    import torch

    require_cuda("capturing a graph")
    static_x = torch.zeros(N, device="cuda")
    captured = capture_diamond(static_x)
    graph, static_out = graph_and_output(captured)
    try:
        shape = graphs.topology(graph)
    except RuntimeError as exc:
        raise CheckFailed(f"cannot read the graph back ({exc}): create it with torch.cuda.CUDAGraph(keep_graph=True)") from None
    # PyTorch's four kernels share one name, so only the shape is compared: every node named alike
    expected = graphs.Topology(("KERNEL",) * 4, ((0, 1), (0, 2), (1, 3), (2, 3)), ("k",) * 4)
    if not graphs.equivalent(graphs.Topology(shape.kinds, shape.edges, ("k",) * shape.nodes), expected):
        raise CheckFailed(f"the graph is {shape.summary()} with edges {shape.edges}; expected a diamond: "
                          "one first node, two that depend only on it, one that depends on both")
    for seed in range(3):
        fresh = torch.randn(N, generator=torch.Generator().manual_seed(seed)).cuda()
        static_x.copy_(fresh)
        graph.replay()
        if not torch.allclose(static_out, diamond_eager(fresh), atol=1e-5):
            raise CheckFailed(f"replay with fresh input {seed + 1} differs from eager: does out come from the graph?")
    return "4 kernels in a diamond (the two middle ones independent); 3 fresh inputs match eager"


# ---- exercise 2: repair an unjoined capture (CuPy) ----------------------------------------------------------

@functools.lru_cache(maxsize=1)
def stage_kernels() -> dict:
    """The four stage kernels as CuPy RawKernels, keyed 'a' to 'd'."""
    import cupy as cp

    module = cp.RawModule(code=STAGES_SOURCE)
    return {s: module.get_function(f"stage_{s}") for s in "abcd"}


def capture_unjoined(origin, side, x, y, z, out):
    """Capture the diamond with CuPy. Ending this capture fails: find out why."""
    import cupy as cp

    k, n = stage_kernels(), cp.int32(x.size)
    with origin:
        origin.begin_capture()
        k["a"]((1,), (x.size,), (x, n), stream=origin)
        fork = cp.cuda.Event()
        fork.record(origin)
        side.wait_event(fork)
        k["b"]((1,), (x.size,), (x, y, n), stream=origin)
        k["c"]((1,), (x.size,), (x, z, n), stream=side)
        k["d"]((1,), (x.size,), (y, z, out, n), stream=origin)
        return origin.end_capture()


@exercise("Exercise 2: repair an unjoined capture",
          "stage_d needs stage_c's result, and the side stream must rejoin the origin before the capture "
          "ends: record an event on side after stage_c and make origin wait on it before stage_d")
def check_joined(capture_joined: Callable) -> str:
    """The capture ends cleanly, the graph is the diamond, and one launch computes 5 everywhere."""
    import cupy as cp

    require_cuda("capturing a graph")
    origin, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x, y, z, out = (cp.zeros(N, dtype=cp.float32) for _ in range(4))
    try:
        graph = capture_joined(origin, side, x, y, z, out)
    except Exception as exc:
        graphs.end_abandoned_capture(origin)
        graphs.end_abandoned_capture(side)
        raise CheckFailed(f"the capture failed: {graphs.first_error_line(exc)}") from None
    problem = _diamond_problem(graphs.topology(graph))
    if problem:
        raise CheckFailed(problem)
    graph.launch(origin)
    origin.synchronize()
    if not bool(cp.all(out == 5.0)):
        raise CheckFailed(f"one launch from zeros should give 5 everywhere; out[0] = {float(out[0])}")
    return "the capture ends cleanly; stage_d depends on stage_b and stage_c; the result is 5"


# ---- exercise 3: the same DAG with the explicit API ---------------------------------------------------------

@functools.lru_cache(maxsize=1)
def core_stage_kernels() -> dict:
    """The four stage kernels compiled with cuda.core, keyed 'a' to 'd'."""
    from cuda.core import Device, Program, ProgramOptions

    device = Device()
    device.set_current()
    program = Program(STAGES_SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{device.arch}"))
    compiled = program.compile("cubin")
    return {s: compiled.get_kernel(f"stage_{s}") for s in "abcd"}


def _captured_reference():
    import cupy as cp

    origin, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    buffers = [cp.zeros(N, dtype=cp.float32) for _ in range(4)]
    k, n = stage_kernels(), cp.int32(N)
    x, y, z, out = buffers
    with origin:
        origin.begin_capture()
        k["a"]((1,), (N,), (x, n), stream=origin)
        fork = cp.cuda.Event()
        fork.record(origin)
        side.wait_event(fork)
        k["b"]((1,), (N,), (x, y, n), stream=origin)
        k["c"]((1,), (N,), (x, z, n), stream=side)
        join = cp.cuda.Event()
        join.record(side)
        origin.wait_event(join)
        k["d"]((1,), (N,), (y, z, out, n), stream=origin)
        return origin.end_capture()


@exercise("Exercise 3: build the diamond with the explicit API",
          "GraphDefinition().launch(...) adds a first node; node.launch(...) adds one that depends on node; "
          "a node's .pred set takes a second dependency; join() would add an EMPTY node the capture does not have")
def check_explicit_diamond(build_diamond: Callable) -> str:
    """Your GraphDefinition is the captured diamond node for node and edge for edge, and computes 5."""
    import cupy as cp
    import numpy as np
    from cuda.core import Device, LaunchConfig

    require_cuda("building a graph")
    x, y, z, out = (cp.zeros(N, dtype=cp.float32) for _ in range(4))
    definition = build_diamond(core_stage_kernels(), LaunchConfig(grid=1, block=N), x, y, z, out, np.int32(N))
    yours, captured = graphs.topology(definition), graphs.topology(_captured_reference())
    if not graphs.equivalent(yours, captured):
        raise CheckFailed(f"yours is {yours.summary()} ({', '.join(yours.names)}; edges {yours.edges}); the "
                          f"capture is {captured.summary()} with edges {captured.edges}")
    stream = Device().create_stream()
    definition.instantiate().launch(stream)
    stream.sync()
    if not bool(cp.all(out == 5.0)):
        raise CheckFailed(f"one launch from zeros should give 5 everywhere; out[0] = {float(out[0])}")
    return "equivalent to the captured diamond, node for node and edge for edge; the result is 5"


# ---- exercise 4: choose the branches ------------------------------------------------------------------------

DURATIONS_US = (30, 28, 25, 20, 14, 12, 10, 8, 6, 5, 4, 3)
BRANCHES = 4


def makespan(assignment: Sequence[Sequence[int]], durations: Sequence[float]) -> float:
    """The time of the longest branch, if every branch runs side by side."""
    return max(sum(durations[i] for i in branch) for branch in assignment)


def _greedy_longest_first(durations: Sequence[float], branches: int) -> list[list[int]]:
    loads, assignment = [0.0] * branches, [[] for _ in range(branches)]
    for i in sorted(range(len(durations)), key=lambda i: -durations[i]):
        target = loads.index(min(loads))
        assignment[target].append(i)
        loads[target] += durations[i]
    return assignment


def _measure_branches_us(assignment: Sequence[Sequence[int]], durations: Sequence[float]) -> tuple[float, float]:
    """Capture spin kernels on the given branches and as one chain; return (parallel, serial) GPU us."""
    import cupy as cp

    from ..kernels import spinner

    spin = spinner()
    origin = cp.cuda.Stream(non_blocking=True)

    def capture(parallel: bool):
        streams = [cp.cuda.Stream(non_blocking=True) for _ in assignment]
        with origin:
            origin.begin_capture()
            fork = cp.cuda.Event()
            fork.record(origin)
            for s in streams:
                s.wait_event(fork)
            for s, branch in zip(streams, assignment, strict=True):
                for i in branch:
                    spin.launch(durations[i], stream=s if parallel else origin)
            for s in streams:
                done = cp.cuda.Event()
                done.record(s)
                origin.wait_event(done)
            return origin.end_capture()

    parallel_graph, serial_graph = capture(True), capture(False)
    with origin:
        parallel = timing.gpu_time_us(lambda: parallel_graph.launch(origin), repeats=30).median_us
        serial = timing.gpu_time_us(lambda: serial_graph.launch(origin), repeats=30).median_us
    return parallel, serial


def _checked_assignment(assign: Callable, durations: Sequence[float], branches: int, what: str) -> list[list[int]]:
    """The learner's assignment for one case, or CheckFailed saying what is wrong with it."""
    assignment = assign(list(durations), branches)
    if not isinstance(assignment, (list, tuple)) or not all(isinstance(b, (list, tuple)) for b in assignment):
        raise CheckFailed(f"{what}: return one list of task indices per branch, not {assignment!r:.80}")
    if len(assignment) > branches:
        raise CheckFailed(f"{what}: {len(assignment)} branches; at most {branches} allowed")
    placed = sorted(i for branch in assignment for i in branch)
    if placed != list(range(len(durations))):
        raise CheckFailed(f"{what}: each of the {len(durations)} tasks must appear exactly once (by its index); "
                          f"you placed {placed}")
    yours, good = makespan(assignment, durations), makespan(_greedy_longest_first(durations, branches), durations)
    if yours > 1.05 * good:
        raise CheckFailed(f"{what}: your longest branch takes {yours:.0f} us; a balanced schedule needs {good:.0f} us")
    return list(assignment)


@exercise("Exercise 4: choose the branches",
          "the branches run side by side, so the replay lasts as long as the longest branch: balance the "
          "loads (placing the longest tasks first, each on the least loaded branch, does well)")
def check_assignment(assign: Callable[[Sequence[float], int], list[list[int]]]) -> str:
    """Every task once on at most `branches` branches, the longest branch within 5% of greedy longest-first, for
    the lab's tasks and for made-up ones; on a GPU, the lab's schedule captured and its speedup measured."""
    import torch

    assignment = _checked_assignment(assign, DURATIONS_US, BRANCHES, "the lab's tasks")
    yours = makespan(assignment, DURATIONS_US)
    rng = random.Random()
    # Made-up cases, unsorted: short tasks before one long one (where placing tasks in the order given goes
    # wrong), and random ones, so no schedule written for the lab's tasks fits them.
    cases = [([1.0] * 12 + [12.0], 4)]
    for _ in range(4):
        cases.append(([rng.uniform(2, 40) for _ in range(rng.randint(8, 16))], rng.randint(2, 5)))
    for durations, branches in cases:
        _checked_assignment(assign, durations, branches, f"{len(durations)} made-up tasks on {branches} branches")
    detail = f"longest branch {yours:.0f} us of {sum(DURATIONS_US)} us of work"
    if not torch.cuda.is_available():
        return detail + " (measured only on a GPU)"
    parallel, serial = _measure_branches_us(assignment, DURATIONS_US)
    predicted = sum(DURATIONS_US) / yours
    if serial / parallel < 0.7 * predicted:
        raise CheckFailed(f"measured {serial / parallel:.2f}x over the serial chain, predicted {predicted:.2f}x")
    return detail + f"; measured {parallel:.0f} us against {serial:.0f} us serial ({serial / parallel:.2f}x)"
