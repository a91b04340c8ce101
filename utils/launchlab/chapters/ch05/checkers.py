"""Checkers for lab 05, "Multi-stream fork/join capture".

Exercises 1-3 read the graph you built back from the driver and compare its DAG with the intended one;
exercise 4 checks the schedule on a CPU and, on a GPU, measures it against the serial chain.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence

from ... import checking, graphs, timing
from ...checking import CheckFailed, exercise, graph_and_output, require_cuda

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



def _diamond_problem(shape: graphs.Topology) -> tuple[str, str | None] | None:
    """What is wrong with a graph that should be the stage_a..stage_d diamond, and the hint for that mistake;
    None when it is the diamond."""
    if shape.kinds != ("KERNEL",) * 4 or sorted(shape.names) != sorted(DIAMOND):
        extra = [k for k in shape.kinds if k != "KERNEL"]
        hint = ("join() and event nodes are not needed: a node with two predecessors (node_d.pred.add(node_c)) "
                "is the join" if extra else "launch each of the four stages exactly once")
        return f"the graph has {shape.summary()} ({', '.join(shape.names)}); expected exactly 4 kernel nodes", hint
    found = shape.depends_on()
    if found == DIAMOND:
        return None
    wrong = "; ".join(f"{k} depends on {sorted(v) or 'nothing'} (expected {sorted(DIAMOND[k]) or 'nothing'})"
                      for k, v in sorted(found.items()) if v != DIAMOND.get(k))
    if shape.is_chain():
        hint = "everything ran on one stream, a chain: launch stage_c on the side stream, forked after stage_a"
    elif not found["stage_c"] or not found["stage_b"]:
        hint = "a middle stage does not wait for stage_a: fork (record the event the side stream waits on) after stage_a"
    elif not DIAMOND["stage_d"] <= found["stage_d"]:
        hint = "stage_d must wait for both middle stages: join the side stream back (an event recorded after stage_c " \
               "that origin waits on) before stage_d"
    else:
        hint = "stage_b and stage_c must not depend on each other, and stage_d only on them"
    return wrong, hint


def _diamond_diagnosis(shape: graphs.Topology) -> str | None:
    """For graphs whose kernels all share one name (PyTorch's): which fork/join mistake the shape shows."""
    n = shape.nodes
    ins, outs = [0] * n, [0] * n
    for a, b in shape.edges:
        outs[a] += 1
        ins[b] += 1
    if n != 4:
        return ("the graph should hold exactly the four kernels a, b, c and out: compute each once inside the capture, "
                "out = b + c included")
    if shape.is_chain():
        # The hint names the fork's place too: a fork before a = x + 1 is the other mistake to rule out.
        return ("the kernels form a chain, as if everything ran on one stream: compute c = a * 3 under "
                "torch.cuda.stream(side), forked with side.wait_stream(torch.cuda.current_stream()) after a = x + 1, "
                "not before")
    if ins.count(0) > 1:
        return ("a kernel depends on nothing: fork the side stream (side.wait_stream(current)) after a = x + 1, not "
                "before, so c waits for a")
    if outs.count(0) > 1:
        return "the branches never meet: compute out = b + c after torch.cuda.current_stream().wait_stream(side)"
    return None


def _capture_failure_hint(exc: BaseException) -> str | None:
    """The fork/join mistake a failed capture's error betrays, if any."""
    text = graphs.first_error_line(exc).lower()
    if "unjoined" in text:
        return ("the side stream's work must rejoin the capturing stream before the capture ends: make the origin "
                "wait on the side stream after its last kernel and before the kernel that uses its result")
    if "not permitted when stream is capturing" in text or "isolation" in text or "invalidated" in text \
            or "previous error during capture" in text:
        return ("the side stream was never forked into the capture: make it wait on the capturing stream (after "
                "the first kernel) before launching anything on it")
    return None


def _captured(capture: Callable, *args, cleanup=()):
    """Run the learner's capture; a failed capture becomes a CheckFailed naming the fork/join mistake it betrays."""
    try:
        return capture(*args)
    except NotImplementedError:
        raise
    except Exception as exc:
        for stream in cleanup:
            graphs.end_abandoned_capture(stream)
        raise CheckFailed(f"the capture failed: {graphs.first_error_line(exc)}", hint=_capture_failure_hint(exc)) from None


# ---- exercise 1: a diamond in PyTorch ---------------------------------------------------------------------

def diamond_eager(x):
    """The computation of exercise 1: a = x + 1; b = 2a and c = 3a, independent; out = b + c."""
    a = x + 1
    return a * 2 + a * 3


_capture_streams: dict = {}   # device -> the capture stream the check gives torch.cuda.graph, made once


@contextlib.contextmanager
def _capture_stream_of_its_own():
    """For the check, torch.cuda.graph's default capture stream is one that no torch.cuda.Stream() call returns.

    torch.cuda.Stream() hands out a pool's 32 streams in turn, and torch.cuda.graph's default capture stream is one
    of them: about one call in 32 returns that very stream, and a right fork (side stream made inside the answer
    or before it) becomes a chain. A high-priority stream comes from another pool."""
    import torch

    device = torch.cuda.current_device()
    if device not in _capture_streams:
        _capture_streams[device] = torch.cuda.Stream(device, priority=-1)
    before = torch.cuda.graph.default_capture_stream
    torch.cuda.graph.default_capture_stream = _capture_streams[device]
    try:
        yield
    finally:
        torch.cuda.graph.default_capture_stream = before


def _torch_capture_read_back(capture_diamond: Callable):
    """Capture the learner's diamond on fresh zeros: (its static input, its graph, its output, its shape)."""
    import torch

    static_x = torch.zeros(N, device="cuda")
    graph, static_out = graph_and_output(_captured(capture_diamond, static_x))
    if not (isinstance(static_out, torch.Tensor) and static_out.is_cuda and tuple(static_out.shape) == (N,)):
        raise CheckFailed(f"out should be the CUDA tensor of {N} values the capture wrote, not "
                          f"{type(static_out).__name__}{tuple(getattr(static_out, 'shape', ()))}",
                          hint="return (graph, out) with out = b + c computed inside the capture")
    try:
        shape = graphs.topology(graph)
    except RuntimeError as exc:
        raise CheckFailed(f"cannot read the graph back ({exc})",
                          hint="create the graph with torch.cuda.CUDAGraph(keep_graph=True)") from None
    return static_x, graph, static_out, shape


@exercise(1,
          "fork with side.wait_stream(current) after computing a, compute c under torch.cuda.stream(side), "
          "join with current.wait_stream(side) before using c; capture with CUDAGraph(keep_graph=True)")
def check_torch_diamond(capture_diamond: Callable) -> str:
    """The graph has 4 kernels in a diamond (b and c independent, read from its edges) and computes (x + 1) * 5
    for fresh inputs, replayed."""
    import torch

    require_cuda("capturing a graph")
    with _capture_stream_of_its_own():
        static_x, graph, static_out, shape = _torch_capture_read_back(capture_diamond)
    # PyTorch's four kernels share one name, so only the shape is compared: every node named alike
    expected = graphs.Topology(("KERNEL",) * 4, ((0, 1), (0, 2), (1, 3), (2, 3)), ("k",) * 4)
    if not graphs.equivalent(graphs.Topology(shape.kinds, shape.edges, ("k",) * shape.nodes), expected):
        raise CheckFailed(f"the graph is {shape.summary()} with edges {shape.edges}; expected a diamond: "
                          "one first node, two that depend only on it, one that depends on both",
                          hint=_diamond_diagnosis(shape))
    generator = torch.Generator().manual_seed(checking.rng().randrange(1 << 30))
    for trial in range(3):
        fresh = torch.randn(N, generator=generator).cuda()
        before = static_out.clone()
        static_x.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.allclose(static_out, diamond_eager(fresh), atol=1e-5):
            unchanged = torch.equal(static_out, before)
            raise CheckFailed(f"replay with fresh input {trial + 1} differs from eager (out[0] = "
                              f"{float(static_out[0]):.4g}, eager {float(diamond_eager(fresh)[0]):.4g})",
                              hint="out did not change when the graph replayed: return the tensor b + c wrote inside "
                                   "the capture, not a copy or a tensor made outside it" if unchanged else None)
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


def _random_input():
    """(x on the GPU, its copy on the host): N random float32 values, fresh each call (from checking.rng)."""
    import cupy as cp
    import numpy as np

    x0 = checking.numpy_generator().standard_normal(N).astype(np.float32)
    return cp.asarray(x0), x0


def _diamond_buffers(what: str):
    """Once a CUDA GPU is known to be there for `what`: x (random, and its host copy), y, z and out (zeros) on the
    GPU, finished before the check goes on: they are written on the default stream, which the non-blocking streams
    the graph is launched on do not wait for (on a busy GPU, out's zeroing could land after the graph's result)."""
    require_cuda(what)
    import cupy as cp

    (x, x0), y, z, out = _random_input(), *(cp.zeros(N, dtype=cp.float32) for _ in range(3))
    cp.cuda.Device().synchronize()
    return x, x0, y, z, out


def _check_diamond_result(out, x0) -> None:
    """One launch turns x0 into x0 + 1 and out into 5 (x0 + 1); fail saying how it did not."""
    import numpy as np

    got, want = out.get(), (x0 + np.float32(1)) * np.float32(5)
    if np.allclose(got, want, atol=1e-4):
        return
    if not got.any():
        raise CheckFailed("after one launch, out is still all zeros",
                          hint="launch the stages on the arrays you were given (x, y, z, out), not on new ones")
    raise CheckFailed(f"after one launch out[0] = {got[0]:.4g}; stage_d of the diamond gives 5 (x + 1) = {want[0]:.4g}",
                      hint="pass each stage its own arrays: stage_a(x), stage_b(x, y), stage_c(x, z), "
                           "stage_d(y, z, out), with one thread per element")


@exercise(2,
          "stage_d needs stage_c's result, and the side stream must rejoin the origin before the capture "
          "ends: record an event on side after stage_c and make origin wait on it before stage_d")
def check_joined(capture_joined: Callable) -> str:
    """The capture ends cleanly, the graph is the diamond (read from its edges), and one launch computes
    5 (x + 1) for a random x."""
    import cupy as cp

    x, x0, y, z, out = _diamond_buffers("capturing a graph")
    origin, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    graph = _captured(capture_joined, origin, side, x, y, z, out, cleanup=(origin, side))
    if not (hasattr(graph, "launch") and hasattr(graph, "graph")):
        raise CheckFailed(f"return the CuPy graph that origin.end_capture() gives, not {type(graph).__name__}")
    problem = _diamond_problem(graphs.topology(graph))
    if problem:
        raise CheckFailed(problem[0], hint=problem[1])
    graph.launch(origin)
    origin.synchronize()
    _check_diamond_result(out, x0)
    return "the capture ends cleanly; stage_d depends on stage_b and stage_c; one launch gives 5 (x + 1)"


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


@exercise(3,
          "GraphDefinition().launch(...) adds a first node; node.launch(...) adds one that depends on node; "
          "a node's .pred set takes a second dependency; join() would add an EMPTY node the capture does not have")
def check_explicit_diamond(build_diamond: Callable) -> str:
    """Your GraphDefinition equals the captured diamond node for node and edge for edge; one launch: 5 (x + 1)."""
    import numpy as np
    from cuda.core import Device, LaunchConfig

    x, x0, y, z, out = _diamond_buffers("building a graph")
    definition = build_diamond(core_stage_kernels(), LaunchConfig(grid=1, block=N), x, y, z, out, np.int32(N))
    if not (hasattr(definition, "nodes") and hasattr(definition, "instantiate")):
        raise CheckFailed(f"return the GraphDefinition, not {type(definition).__name__}",
                          hint="return the definition itself, before instantiate(): the checker reads its nodes")
    yours, captured = graphs.topology(definition), graphs.topology(_captured_reference())
    if not graphs.equivalent(yours, captured):
        problem = _diamond_problem(yours)
        raise CheckFailed(f"yours is {yours.summary()} ({', '.join(yours.names)}; edges {yours.edges}); the "
                          f"capture is {captured.summary()} with edges {captured.edges}",
                          hint=problem[1] if problem else None)
    stream = Device().create_stream()
    definition.instantiate().launch(stream)
    stream.sync()
    _check_diamond_result(out, x0)
    return "equivalent to the captured diamond, node for node and edge for edge; one launch gives 5 (x + 1)"


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

    from ...kernels import spinner

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
        raise CheckFailed(f"{what}: {len(assignment)} branches; at most {branches} allowed",
                          hint="return at most `branches` lists, one per stream of the graph: several tasks share a "
                               "branch and run one after another on it")
    placed = sorted(i for branch in assignment for i in branch)
    if placed != list(range(len(durations))):
        raise CheckFailed(f"{what}: each of the {len(durations)} tasks must appear exactly once (by its index); "
                          f"you placed {placed}",
                          hint=INDEX_HINT)
    yours, good = makespan(assignment, durations), makespan(_greedy_longest_first(durations, branches), durations)
    if yours > 1.05 * good:
        raise CheckFailed(f"{what}: your longest branch takes {yours:.0f} us; a balanced schedule needs {good:.0f} us",
                          hint=INDEX_HINT if _balanced_as_sorted_positions(assignment, durations, good) else None)
    return list(assignment)


INDEX_HINT = ("each list holds task indices: positions in `durations` as given, from 0, each exactly once (not "
              "durations, not positions in a sorted copy: sort the indices by duration, sorted(range(len(durations)), "
              "key=...), and leave `durations` as it is)")


def _balanced_as_sorted_positions(assignment: Sequence[Sequence[int]], durations: Sequence[float],
                                  good: float) -> bool:
    """Whether the schedule is balanced once its indices are read as positions in a sorted copy of durations."""
    for descending in (True, False):
        order = sorted(range(len(durations)), key=lambda i: durations[i], reverse=descending)
        if makespan([[order[p] for p in branch] for branch in assignment], durations) <= 1.05 * good:
            return True
    return False


@exercise(4,
          "the branches run side by side, so the replay lasts as long as the longest branch: balance the "
          "loads (placing the longest tasks first, each on the least loaded branch, does well)")
def check_assignment(assign: Callable[[Sequence[float], int], list[list[int]]]) -> str:
    """Every task once on at most `branches` branches, the longest branch within 5% of greedy longest-first, for
    the lab's tasks and for made-up ones; on a GPU, the lab's schedule captured and its speedup measured."""
    import torch

    assignment = _checked_assignment(assign, DURATIONS_US, BRANCHES, "the lab's tasks")
    yours = makespan(assignment, DURATIONS_US)
    rng = checking.rng()
    # Made-up cases, unsorted: short tasks before one long one (where placing tasks in the order given goes
    # wrong); six tasks whose two halves balance exactly (where filling branches up to the average load in turn
    # ends 13% longer than longest-first, 89 against 79 us); and random ones, so no schedule written for the
    # lab's tasks fits them.
    cases = [([1.0] * 12 + [12.0], 4), ([34.0, 21.0, 23.0, 22.0, 35.0, 23.0], 2)]
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
