"""Checkers for lab 04, "CUDA graphs by stream capture".

Exercise 2 runs on a CPU, exercise 4 checks its arithmetic on a CPU and its capture on a GPU; the others
need CUDA. Each checker builds its own inputs (sizes, buckets and constants drawn afresh on every call), so a
hard-coded answer cannot pass, and each verifies structure as well as values: which operations ran inside a
capture and which ran eagerly, how many captures and replays there were, and that inputs come back unchanged.
"""

from __future__ import annotations

import numbers
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ... import checking, timing
from ...checking import (
    CheckFailed,
    counting_graph_calls,
    counting_ops,
    exercise,
    graph_and_output,
    host_reads,
    require_cuda,
    warm_up_then_capture,
)

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "check_bucket_for",
    "check_capture_pipeline",
    "check_clip_without_sync",
    "check_graph_cache",
    "check_node_update",
    "check_serve",
    "clip_by_norm_syncing",
    "pipeline",
    "serve_buggy",
]

N = 4096            # elements in the pipeline's input: small, so launches dominate
WIDTH = 256         # the cached model's width in the lab's text; the checker draws its own
BUCKETS = (1, 2, 4, 8, 16, 32, 64)
PIPELINE_OPS = ("sin", "mul", "add", "tanh")

def pipeline(x):
    """The four-kernel pipeline of exercises 1 and 6: sin, multiply, add, tanh."""
    import torch

    return torch.tanh(torch.sin(x) * 2 + 1)


def _rng() -> random.Random:
    """The checker trial's generator (checking.rng): a fresh seed on every call, so no two checks see the same
    numbers, and the seed a FAIL prints replays them."""
    return checking.rng()


def _fresh(seed: int, shape, device: str = "cuda"):
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(device)


def _close(yours, expected, what: str, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """yours equals expected within tolerance, compared on expected's device (a copy on the CPU is fine)."""
    import torch

    if not isinstance(yours, torch.Tensor):
        raise CheckFailed(f"{what}: got {type(yours).__name__}, expected a tensor")
    if tuple(yours.shape) != tuple(expected.shape):
        raise CheckFailed(f"{what}: shape {tuple(yours.shape)}, expected {tuple(expected.shape)}")
    if yours.dtype != expected.dtype:
        raise CheckFailed(f"{what}: dtype {yours.dtype}, expected {expected.dtype}",
                          hint=f"keep the result in {expected.dtype}: no conversion is asked for")
    yours = yours.detach().to(expected.device)
    if not torch.isfinite(yours).all() and torch.isfinite(expected).all():
        raise CheckFailed(f"{what}: contains NaN or infinity where eager has none (a division by zero?)")
    if not torch.allclose(yours, expected, atol=atol, rtol=rtol):
        error = (yours - expected).abs().max().item()
        raise CheckFailed(f"{what}: differs from eager by up to {error:.3g}")


def _same_storage(a, b) -> bool:
    """Whether tensor a shares memory with tensor b (a view of it counts)."""
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ---- exercise 1: capture a pipeline with static buffers ----------------------------------------------

@exercise(1,
          "warm up on a side stream, then capture pipeline(static_x) inside torch.cuda.graph; the tensor "
          "it returns during capture is the static output that every replay rewrites")
def check_capture_pipeline(capture_pipeline: Callable) -> str:
    """The whole pipeline captured once after a warm-up; five fresh inputs copied in give eager's answers by
    replay alone (no eager kernel during the replays); replay is at least 3x cheaper than eager."""
    import torch

    require_cuda("capturing a graph")
    static_x = torch.zeros(N, device="cuda")
    with counting_ops() as ops:
        captured = capture_pipeline(static_x)
    graph, static_out = graph_and_output(captured)
    outside = [op for op in PIPELINE_OPS if ops.captured[op] == 0]
    if outside:
        raise CheckFailed(f"{', '.join(outside)} never ran inside the capture: the graph holds only part of the "
                          "pipeline", hint="call the whole pipeline(static_x) inside `with torch.cuda.graph(graph):`; "
                          "what runs outside it runs once, eagerly, and no replay repeats it")
    if ops.captured["sin"] > 1 or ops.captured["tanh"] > 1:
        raise CheckFailed(f"the graph holds the pipeline {max(ops.captured['sin'], ops.captured['tanh'])} times: "
                          "every replay does that much work", hint="the warm-up belongs before the capture, "
                          "outside `with torch.cuda.graph(graph):`; inside it, it is captured and replayed too")
    if ops.eager["sin"] == 0:
        raise CheckFailed("no warm-up: the pipeline never ran eagerly before its capture",
                          hint="run pipeline(static_x) once on a side stream before capturing it (PyTorch's recipe: "
                          "first calls may allocate memory or pick kernels, which a capture must not do)")
    for seed in range(5):
        fresh = _fresh(seed, N)
        expected = pipeline(fresh)
        with counting_graph_calls() as calls, counting_ops() as ops:
            static_x.copy_(fresh)
            graph.replay()
            result = static_out.clone()
        if any(ops.eager[op] for op in PIPELINE_OPS) or calls["replays"] != 1:
            raise CheckFailed("graph.replay() ran the pipeline eagerly instead of replaying a captured graph",
                              hint="return the torch.cuda.CUDAGraph you captured; its replay launches no operator")
        _close(result, expected, f"fresh input {seed + 1} of 5, copied into static_x and replayed")
    eager = timing.launch_throughput_us(lambda: pipeline(static_x), launches=50, rounds=10).median_us
    replay = timing.launch_throughput_us(graph.replay, launches=50, rounds=10).median_us
    if eager < 3 * replay:
        raise CheckFailed(f"replay takes {replay:.1f} us against eager {eager:.1f} us ({eager / replay:.1f}x); "
                          "expected at least 3x: is the whole pipeline inside the graph?")
    return (f"the pipeline captured once after a warm-up; 5 fresh inputs match eager; replay {replay:.1f} us "
            f"against eager {eager:.1f} us ({eager / replay:.1f}x)")


# ---- exercise 2: pick a bucket --------------------------------------------------------------------------

def _reference_bucket(batch: int, buckets: Sequence[int]) -> int | None:
    fitting = [b for b in buckets if b >= batch]
    return min(fitting) if fitting else None


def _bucket_sets(rng: random.Random) -> list[Sequence[int]]:
    """The lab's sorted powers of two, a fixed unsorted list, a single bucket, and a random unsorted list."""
    drawn = rng.sample(range(2, 100), rng.randint(4, 7))
    return [[48, 10, 3, 24], BUCKETS, (5,), drawn]


@exercise(2,
          "the bucket is the smallest capacity that fits the batch, whatever order the buckets come in; "
          "a batch larger than every bucket has none (return None, and the caller runs eager)")
def check_bucket_for(bucket_for: Callable[[int, Sequence[int]], int | None]) -> str:
    """Every batch from 1 to past the largest bucket against four bucket sets, one drawn at random, two unsorted,
    one of them a list that must come back unchanged."""
    cases = 0
    for buckets in _bucket_sets(_rng()):  # the list comes first, so an in-place sort shows as one
        given = list(buckets)
        for batch in range(1, max(buckets) + 12):
            yours, expected = bucket_for(batch, buckets), _reference_bucket(batch, buckets)
            if list(buckets) != given:
                raise CheckFailed(f"bucket_for({batch}, ...) changed the caller's buckets from {given} to "
                                  f"{list(buckets)}", hint="sorted(buckets) makes a sorted copy; buckets.sort() "
                                  "reorders the caller's list in place")
            if expected is None and yours is not None:
                raise CheckFailed(f"bucket_for({batch}, {given}) returned {yours!r}, expected None",
                                  hint="a batch larger than every bucket has no bucket: return None (not the "
                                  "largest bucket, 0 or infinity), so the caller runs it eagerly")
            if yours is not None and (isinstance(yours, bool) or not isinstance(yours, numbers.Integral)):
                raise CheckFailed(f"bucket_for({batch}, {given}) returned {yours!r} ({type(yours).__name__}); "
                                  "return a bucket's capacity, a whole number")
            if yours != expected:
                hint = None
                if yours is not None and yours not in given:
                    index = 0 <= yours < len(given) and given[yours] == expected
                    hint = (f"{yours} is not one of the buckets given{' but the index of the right one' if index else ''}"
                            ": return the capacity of the smallest bucket that holds the batch, one of the values given")
                elif yours is not None and yours > expected and batch in given:
                    hint = "a bucket of exactly the batch's size fits it: compare with >=, not >"
                elif yours is not None and yours > expected:
                    hint = f"{expected} fits too and is smaller: take the smallest of all that fit (unsorted buckets)"
                raise CheckFailed(f"bucket_for({batch}, {given}) returned {yours!r}, expected {expected!r}", hint)
            cases += 1
    return f"{cases} cases right, including batches beyond the largest bucket and unsorted bucket lists"


# ---- exercise 3: a graph cache keyed by bucket -------------------------------------------------------------

def make_model(width: int = WIDTH):
    """The model that exercise 3 caches: three linear layers with ReLUs, in evaluation mode on the GPU."""
    import torch

    with torch.random.fork_rng(devices=[]):   # fixed weights, the learner's own random state untouched
        torch.random.default_generator.manual_seed(4)
        layers = [torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                  torch.nn.Linear(width, width)]
    return torch.nn.Sequential(*layers).cuda().eval()


def _cache_setup(rng: random.Random) -> tuple[tuple[int, ...], int]:
    """Buckets (unsorted; the largest between 40 and 64) and a width, drawn afresh on each call."""
    largest = rng.randint(40, 64)
    buckets = [1, largest] + rng.sample(range(2, largest), 3)
    rng.shuffle(buckets)
    return tuple(buckets), rng.choice((128, 192, 320))


@exercise(3,
          "capture one graph per bucket the first time it is needed (warm up first), pad the batch into the "
          "bucket's static input, replay, and return a copy of the rows that are yours; beyond the largest "
          "bucket, run the model eagerly")
def check_graph_cache(make_graph_cache: Callable) -> str:
    """Right for every batch up to the largest bucket (twice, shuffled) and one beyond; one capture per bucket,
    each after a warm-up and holding one forward pass; a replay and no eager forward pass per bucketed call
    once its bucket is captured; inputs unchanged, results copies."""
    import torch

    require_cuda("a graph cache")
    rng = _rng()
    buckets, width = _cache_setup(rng)
    largest = max(buckets)
    model = make_model(width)
    batches = list(range(1, largest + 1)) * 2
    rng.shuffle(batches)
    batches.append(largest + rng.randint(1, 40))
    forwards = {"counting": True, "eager": 0, "captured": 0}

    def count_forward(module, args):
        if forwards["counting"]:
            forwards["captured" if torch.cuda.is_current_stream_capturing() else "eager"] += 1

    hook = model[0].register_forward_pre_hook(count_forward)  # model(x) and model.forward(x) both pass here
    try:
        with torch.no_grad(), counting_graph_calls() as counts:
            run = make_graph_cache(model, buckets, width)
            kept, captured_buckets = [], set()
            for i, batch in enumerate(batches):
                x = _fresh(i, (batch, width))
                x_before = x.clone()
                before = dict(counts), dict(forwards)
                out = run(x)
                captures = counts["captures"] - before[0]["captures"]
                replays = counts["replays"] - before[0]["replays"]
                eager = forwards["eager"] - before[1]["eager"]
                forwards["counting"] = False
                expected = model(x_before)
                forwards["counting"] = True
                call = f"batch {batch} (call {i + 1})"
                if not torch.equal(x, x_before):
                    raise CheckFailed(f"{call}: run(x) changed x", hint="copy x into the bucket's static input; "
                                      "leave the caller's tensor as it was")
                _close(out, expected, call, atol=1e-4, rtol=1e-4)
                bucket = _reference_bucket(batch, buckets)
                if bucket is not None and replays != 1:
                    raise CheckFailed(f"{call}: {replays} replays; a batch that fits a bucket is one replay",
                                      hint="pad the batch into its bucket's static input and replay that bucket's "
                                      "graph; model(x) eagerly is what the cache is there to avoid")
                if bucket is None and (replays or captures):
                    raise CheckFailed(f"{call}: beyond the largest bucket {largest}, yet {captures} captures and "
                                      f"{replays} replays", hint="a batch larger than every bucket runs eagerly")
                if bucket in captured_buckets and (captures or eager):
                    what = f"{captures} captures" if captures else f"{eager} eager forward passes"
                    raise CheckFailed(f"{call}: bucket {bucket} was captured already, yet this call made {what}",
                                      hint="once a bucket's graph exists, a call only copies in, replays and copies "
                                      "out: no new capture, and no eager model(x)")
                captured_buckets.add(bucket)
                kept.append((out, expected))
                if counts["captures"] > forwards["eager"] - (1 if bucket is None else 0):
                    raise CheckFailed(f"{call}: {counts['captures']} captures after {forwards['eager']} eager "
                                      "forward passes: a capture without a warm-up",
                                      hint="warm up before each capture: run the model once eagerly on the "
                                      "bucket's static input (on a side stream, PyTorch's recipe)")
            for i, (out, expected) in enumerate(kept):  # results must not be views that later replays overwrite
                _close(out, expected, f"the result of call {i + 1}, read again after all calls", atol=1e-4,
                       rtol=1e-4)
    finally:
        hook.remove()
    bucketed_calls = len(batches) - 1
    if counts["captures"] != len(buckets):
        raise CheckFailed(f"{counts['captures']} captures for buckets {buckets}: expected exactly one per bucket",
                          hint="key the cache by the bucket (bucket_for(batch, buckets)), not by the batch, and "
                          "capture each bucket once")
    if forwards["captured"] != len(buckets):
        raise CheckFailed(f"{forwards['captured']} forward passes captured in {len(buckets)} graphs: each graph "
                          "should hold the model once", hint="the warm-up belongs before the capture, outside "
                          "`with torch.cuda.graph(graph):`")
    if counts["replays"] != bucketed_calls:
        raise CheckFailed(f"{counts['replays']} replays for {bucketed_calls} calls that fit a bucket: "
                          f"every such call should be one replay (and the batch of {batches[-1]} none)")
    return (f"{len(batches)} calls right (buckets {sorted(buckets)}, width {width}: every batch to {largest} twice, "
            f"then {batches[-1]} eager); {counts['captures']} captures, {counts['replays']} replays")


# ---- exercise 4: repair a capture that synchronises --------------------------------------------------------

def clip_by_norm_syncing(g, max_norm: float):
    """Scale g down to norm max_norm if it is longer: correct eagerly, but it reads the norm on the host."""
    norm = g.norm().item()
    if norm > max_norm:
        return g * (max_norm / norm)
    return g.clone()


# norms as multiples of max_norm: well below, just below, just above and well above it, then a zero vector
CLIP_NORMS = (0.03, 0.5, 0.97, 1.04, 2.0, 8.0, 0.0)
CLIP_VALUES_HINT = ("the values differ from clipping by norm: every element times min(1, max_norm / g.norm()), "
                    "the Euclidean (L2) norm of the whole of g, not its square, not each element's size; a g shorter "
                    "than max_norm comes back unchanged")
CLIP_ZERO_HINT = ("a zero g: g / g.norm() is 0 / 0, NaN; keep the factor max_norm / g.norm() (infinite for a zero g), "
                  "clamp it to 1 and multiply g by it, so a zero g stays zero")


def _clip_cases(device: str, max_norm: float, seed: int = 0):
    cases = []
    for i, multiple in enumerate(CLIP_NORMS):
        g = _fresh(seed + i, 1024, device)
        cases.append(g * (multiple * max_norm / g.norm()))
    return cases


@exercise(4,
          "the host cannot see a GPU value during capture; compute the scale factor on the GPU and apply it "
          "unconditionally: a factor of 1 leaves short vectors unchanged (torch.clamp)")
def check_clip_without_sync(clip_by_norm: Callable, max_norm: float | None = None) -> str:
    """Right on both sides of a max_norm drawn afresh, and for a zero vector; reads nothing on the host; leaves g
    unchanged; on a GPU, it also captures once and replays correctly for every case."""
    import torch

    rng = _rng()
    if max_norm is None:
        max_norm = round(rng.randint(2, 39) + rng.randint(1, 99) / 100, 2)  # never a whole number
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = _clip_cases(device, max_norm, seed=rng.randrange(1000))
    for i, g in enumerate(cases):
        what = f"eager case {i + 1} (norm {g.norm().item():.3g}, max_norm {max_norm})"
        before = g.clone()
        expected = clip_by_norm_syncing(before, max_norm)
        with host_reads() as reads:
            yours = clip_by_norm(g, max_norm)
        if reads:
            raise CheckFailed(f"{what}: your function read a tensor's value on the host {sum(reads.values())} times "
                              f"({', '.join(sorted(reads))})",
                              hint=".item(), .tolist(), .cpu(), float(t), bool(t), min()/max() of a tensor and "
                              "`if t > x:` all copy a GPU value to the host and wait for it; keep the scale factor a tensor "
                              "(torch.clamp(max_norm / g.norm(), max=1.0)) and multiply unconditionally")
        if not torch.equal(g, before):
            raise CheckFailed(f"{what}: your function changed its input g",
                              hint="return a new tensor (g * scale); g.mul_(scale) or g *= scale rewrites the "
                              "caller's gradient in place")
        try:
            _close(yours, expected, what)
        except CheckFailed as failed:   # values, not capture: the exercise's hint is about capture, so say what
            raise CheckFailed(str(failed), hint=failed.hint or (
                CLIP_ZERO_HINT if "NaN" in str(failed) else CLIP_VALUES_HINT)) from None
    if device == "cpu":
        return f"{len(cases)} eager cases right on the CPU, no host reads (capture checked only on a GPU)"
    static_g = torch.zeros(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        clip_by_norm(static_g, max_norm)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_out = clip_by_norm(static_g, max_norm)
    except Exception as exc:
        raise CheckFailed(f"capture failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                          hint="something in your function copies between host and GPU or waits for the GPU "
                          "(.item(), .tolist(), .cpu(), a Python if on a tensor, torch.tensor(value, device=...)): "
                          "keep every value on the GPU, and plain Python numbers as numbers") from None
    for i, g in enumerate(cases):
        static_g.copy_(g)
        graph.replay()
        _close(static_out, clip_by_norm_syncing(g, max_norm), f"replayed case {i + 1} (norm {g.norm().item():.3g})")
    return f"{len(cases)} cases right eagerly and on replay of one captured graph, both sides of max_norm {max_norm}"


# ---- exercise 5: update a kernel node without re-instantiating --------------------------------------------

SCALE_ADD_SOURCE = r"""
extern "C" __global__ void scale_add(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
"""
BLOCK = 256
SENTINEL = 7.0      # what the checker writes just past x: a launch that overruns x changes it


@dataclass
class ScaleAddGraph:
    """An executable graph with one scale_add kernel node, and what it needs to update that node."""

    graph: object       # cuda.core Graph (executable)
    node: object        # the KernelNode in the graph's definition
    kernel: object      # cuda.core Kernel for scale_add
    config: object      # cuda.core LaunchConfig the node was launched with
    x: object           # CuPy array the kernel updates in place
    stream: object      # cuda.core Stream to launch on
    guard: object = None  # CuPy array just past x (the checker's tripwire), when built with one


def build_scale_add_graph(a: float = 2.0, b: float = 0.0, n: int = N, guard: int = 0) -> ScaleAddGraph:
    """Capture one scale_add launch with cuda.core's GraphBuilder and instantiate it (x followed by `guard`
    spare elements, so a launch that writes past x's end can be seen)."""
    import cupy as cp
    import numpy as np
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

    device = Device()
    device.set_current()
    kernel = Program(SCALE_ADD_SOURCE, code_type="c++",
                     options=ProgramOptions(arch=f"sm_{device.arch}")).compile("cubin").get_kernel("scale_add")
    buffer = cp.ones(n + guard, dtype=cp.float32)
    x = buffer[:n]
    config = LaunchConfig(grid=(n + BLOCK - 1) // BLOCK, block=BLOCK)
    builder = device.create_graph_builder().begin_building()
    launch(builder, config, kernel, x.data.ptr, np.float32(a), np.float32(b), np.int32(n))
    builder.end_building()
    (node,) = builder.graph_definition.nodes()
    return ScaleAddGraph(builder.complete(), node, kernel, config, x, device.create_stream(),
                         buffer[n:] if guard else None)


def _as_float32_read_of_a_double(value: float) -> float:
    """What a kernel's float parameter reads when handed a double: the double's low four bytes."""
    import numpy as np

    return float(np.frombuffer(np.float64(value).tobytes()[:4], dtype=np.float32)[0])


def _diagnose_update(x, x0, a: float, b: float, previous: tuple[float, float]) -> str | None:
    """The known mistake that makes the graph turn x0 into x instead of a*x0 + b, if it is one."""
    import cupy as cp

    def computes(a2: float, b2: float) -> bool:
        return bool(cp.allclose(x, cp.float32(a2) * x0 + cp.float32(b2), rtol=1e-4, atol=1e-5, equal_nan=True))

    if computes(*previous):
        return ("the executable graph still computes the previous a and b: update the node of the executable "
                "graph, g.graph[g.node].update(...); g.node belongs to the definition it was instantiated from, "
                "and an eager launch changes x once, not the graph")
    if computes(b, a):
        return "a and b arrive swapped: pass the arguments in the kernel's order, (x, a, b, n)"
    if computes(a, previous[1]) or computes(previous[0], b):
        return "update() replaces the whole argument list: pass x's pointer, a, b and n every time"
    if computes(_as_float32_read_of_a_double(a), _as_float32_read_of_a_double(b)):
        return ("a and b went in as doubles (a Python float or np.float64) but the kernel takes float: the kernel "
                "read half of each; pass np.float32(a), np.float32(b)")
    return None


@exercise(5,
          "graph[node] is the node's view in the executable graph; its update() takes the launch config, "
          "the kernel and the complete argument list (x's pointer, a, b, n with their C types)")
def check_node_update(set_scale_add: Callable[[ScaleAddGraph, float, float], None]) -> str:
    """After your update the same executable graph computes a*x + b for two new (a, b) drawn afresh, on every
    element of an x whose size is no multiple of the block, and writes nothing past x's end."""
    import cupy as cp

    require_cuda("updating a graph")
    rng = _rng()
    n = N + rng.randrange(1, BLOCK)  # not a multiple of the block: the last block is partly idle
    g = build_scale_add_graph(n=n, guard=BLOCK)
    graph, handle = g.graph, int(g.graph.handle)
    x0 = cp.linspace(-1, 1, n, dtype=cp.float32)
    previous = (2.0, 0.0)
    # a and b from ranges that do not overlap, so swapped arguments cannot pass by chance
    pairs = [(round(rng.uniform(1.5, 4.0), 3), round(rng.uniform(0.25, 1.25), 3)),
             (-round(rng.uniform(0.25, 1.25), 3), -round(rng.uniform(1.5, 3.0), 3))]
    for a, b in pairs:
        set_scale_add(g, a, b)
        if g.graph is not graph or int(g.graph.handle) != handle:
            raise CheckFailed("the executable graph was replaced", hint="update its node in place, "
                              "g.graph[g.node].update(...), instead of building or instantiating a new graph")
        g.x[...] = x0              # whatever your function launched, only the graph's launch counts
        g.guard.fill(SENTINEL)
        cp.cuda.Device().synchronize()
        graph.launch(g.stream)
        g.stream.sync()
        after = f"after set_scale_add(g, {a}, {b})"
        if not bool((g.guard == SENTINEL).all()):
            raise CheckFailed(f"{after} the graph wrote past the end of x ({n} elements)",
                              hint="n is x's element count, np.int32(g.x.size), not its size in bytes")
        expected = a * x0 + b
        if not bool(cp.allclose(g.x, expected, atol=1e-5)):
            bad = int(cp.count_nonzero(~cp.isclose(g.x, expected, atol=1e-5)))
            if bool(cp.allclose(g.x[:N], expected[:N], atol=1e-5)):
                raise CheckFailed(f"{after} the graph left the last {bad} of {n} elements as they were",
                                  hint="keep the node's launch config (g.config: enough blocks for every element) "
                                  "and pass n = np.int32(g.x.size), not a size typed in")
            raise CheckFailed(f"{after} the graph computed x[0] = {float(g.x[0]):.4g}, x[-1] = {float(g.x[-1]):.4g}, "
                              f"expected {float(expected[0]):.4g} and {float(expected[-1]):.4g} ({bad} of {n} "
                              "elements wrong)", _diagnose_update(g.x, x0, a, b, previous))
        previous = (a, b)
    return (f"two updates of the same executable graph computed a*x + b on all {n} elements, nothing written past "
            "them; no re-instantiation")


# ---- exercise 6: the replay that reads stale data ----------------------------------------------------------

def serve_buggy(requests, graph, static_x, static_out):
    """Run the captured pipeline on each request. Its answers are wrong: find out why."""
    results = []
    for request in requests:
        static_x = request.to(static_x.device)
        graph.replay()
        results.append(static_out)
    return results


def capture_reference_pipeline():
    """The pipeline captured with static buffers (exercise 1's answer), for exercise 6."""
    import torch

    static_x = torch.zeros(N, device="cuda")
    graph, static_out = warm_up_then_capture(lambda: pipeline(static_x))
    return graph, static_x, static_out


@exercise(6,
          "a graph reads and writes the same addresses on every replay: new data must be copied into the "
          "captured input, and an output you keep must be copied out before the next replay")
def check_serve(serve: Callable) -> str:
    """A few requests (how many varies), each answer equal to eager and independent of later replays; one replay
    per request and no eager pipeline; the requests unchanged."""
    import torch

    require_cuda("replaying a graph")
    rng = _rng()
    graph, static_x, static_out = capture_reference_pipeline()
    count = rng.randint(3, 8)
    seeds = rng.sample(range(100, 10_000), count)
    requests = [_fresh(seed, N, "cpu") for seed in seeds]
    originals = [r.clone() for r in requests]
    expected = [pipeline(r.cuda()) for r in originals]
    given = list(requests)
    with counting_graph_calls() as calls, counting_ops() as ops:
        results = serve(requests, graph, static_x, static_out)
    if len(requests) != count or any(r is not q for r, q in zip(requests, given, strict=True)):
        raise CheckFailed("serve changed the list of requests it was given",
                          hint="iterate over requests; do not pop from it or replace its entries")
    changed = [i + 1 for i, (r, o) in enumerate(zip(requests, originals, strict=True)) if not torch.equal(r, o)]
    if changed:
        raise CheckFailed(f"serve changed request(s) {changed}", hint="copy each request into static_x and the "
                          "result out of static_out; write into neither the requests nor tensors you were given")
    eager = ops.eager["sin"] + ops.eager["tanh"]
    if eager:
        raise CheckFailed(f"{eager} pipeline operations ran eagerly during serve ({calls['replays']} replays)",
                          hint="the graph computes the pipeline: copy the request in, replay, copy the result out; "
                          "calling pipeline() yourself is the eager path the graph replaces")
    if isinstance(results, torch.Tensor) and results.dim() == 2:
        results = list(results.unbind(0))  # the results stacked: one row per request
    if not isinstance(results, (list, tuple)) or len(results) != count:
        got = len(results) if isinstance(results, (list, tuple)) else type(results).__name__
        raise CheckFailed(f"{got} results for {count} requests: return a list, one result per request")
    if calls["replays"] != count:
        raise CheckFailed(f"{calls['replays']} replays for {count} requests: expected one replay per request")
    for i, result in enumerate(results):
        if isinstance(result, torch.Tensor) and _same_storage(result, static_out):
            raise CheckFailed(f"result {i + 1} is the graph's static output itself: the next replay overwrites it",
                              hint="append static_out.clone() (or .cpu()): a copy made before the next replay")
    alike = all(isinstance(r, torch.Tensor) and r.shape == results[0].shape and torch.equal(r.cpu(), results[0].cpu())
                for r in results)
    for i, (result, want) in enumerate(zip(results, expected, strict=True)):
        try:
            _close(result, want, f"request {i + 1} of {count}")
        except CheckFailed as failed:
            if alike:
                raise CheckFailed(f"{failed}; all {count} results are the same", hint="the graph kept reading "
                                  "static_x's old contents: copy each request into it, static_x.copy_(request); "
                                  "binding the name static_x to a new tensor changes nothing the graph reads") from None
            raise
    if not torch.equal(static_x.cpu(), originals[-1]):
        raise CheckFailed("the static_x that serve was given does not hold the last request: were the requests run "
                          "through another graph?", hint="use the graph and the buffers serve is given: its "
                          "static_x and static_out, not those of an earlier capture")
    return f"{count} requests answered right by {count} replays, no eager pipeline; each result a copy"
