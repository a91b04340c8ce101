"""Checkers for lab 04, "CUDA graphs by stream capture".

Exercise 2 runs on a CPU, exercise 4 checks its arithmetic on a CPU and its capture on a GPU; the others
need CUDA. Each checker builds its own inputs, so a hard-coded answer cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import timing
from ..checking import (
    CheckFailed,
    counting_graph_calls,
    exercise,
    graph_and_output,
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
WIDTH = 256         # the cached model's width
BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def pipeline(x):
    """The four-kernel pipeline of exercises 1 and 6: sin, multiply, add, tanh."""
    import torch

    return torch.tanh(torch.sin(x) * 2 + 1)


def _fresh(seed: int, shape, device: str = "cuda"):
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(device)


def _close(yours, expected, what: str, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    import torch

    if tuple(yours.shape) != tuple(expected.shape):
        raise CheckFailed(f"{what}: shape {tuple(yours.shape)}, expected {tuple(expected.shape)}")
    if not torch.allclose(yours, expected, atol=atol, rtol=rtol):
        error = (yours - expected).abs().max().item()
        raise CheckFailed(f"{what}: differs from eager by up to {error:.3g}")


# ---- exercise 1: capture a pipeline with static buffers ----------------------------------------------

@exercise("Exercise 1: capture a four-kernel pipeline",
          "warm up on a side stream, then capture pipeline(static_x) inside torch.cuda.graph; the tensor "
          "it returns during capture is the static output that every replay rewrites")
def check_capture_pipeline(capture_pipeline: Callable) -> str:
    """Five fresh inputs copied in give eager's answers; replay is at least 3x cheaper than eager."""
    import torch

    require_cuda("capturing a graph")
    static_x = torch.zeros(N, device="cuda")
    captured = capture_pipeline(static_x)
    graph, static_out = graph_and_output(captured)
    for seed in range(5):
        fresh = _fresh(seed, N)
        static_x.copy_(fresh)
        graph.replay()
        _close(static_out, pipeline(fresh), f"fresh input {seed + 1} of 5, copied into static_x and replayed")
    eager = timing.launch_throughput_us(lambda: pipeline(static_x), launches=50, rounds=10).median_us
    replay = timing.launch_throughput_us(graph.replay, launches=50, rounds=10).median_us
    if eager < 3 * replay:
        raise CheckFailed(f"replay takes {replay:.1f} us against eager {eager:.1f} us ({eager / replay:.1f}x); "
                          "expected at least 3x: is the whole pipeline inside the graph?")
    return f"5 fresh inputs match eager; replay {replay:.1f} us against eager {eager:.1f} us ({eager / replay:.1f}x)"


# ---- exercise 2: pick a bucket --------------------------------------------------------------------------

def _reference_bucket(batch: int, buckets: Sequence[int]) -> int | None:
    fitting = [b for b in buckets if b >= batch]
    return min(fitting) if fitting else None


@exercise("Exercise 2: choose a bucket",
          "the bucket is the smallest capacity that fits the batch, whatever order the buckets come in; "
          "a batch larger than every bucket has none (return None, and the caller runs eager)")
def check_bucket_for(bucket_for: Callable[[int, Sequence[int]], int | None]) -> str:
    """Every batch from 1 to 80 against two bucket sets, one unsorted."""
    cases = 0
    for buckets in (BUCKETS, (48, 3, 10, 24)):
        for batch in range(1, 81):
            yours, expected = bucket_for(batch, buckets), _reference_bucket(batch, buckets)
            if yours != expected:
                raise CheckFailed(f"bucket_for({batch}, {buckets}) returned {yours!r}, expected {expected!r}")
            cases += 1
    return f"{cases} cases right, including batches beyond the largest bucket and an unsorted bucket list"


# ---- exercise 3: a graph cache keyed by bucket -------------------------------------------------------------

def make_model(width: int = WIDTH):
    """The model that exercise 3 caches: three linear layers with ReLUs, in evaluation mode on the GPU."""
    import torch

    torch.manual_seed(4)
    layers = [torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
              torch.nn.Linear(width, width)]
    return torch.nn.Sequential(*layers).cuda().eval()


@exercise("Exercise 3: a shape-bucketed graph cache",
          "capture one graph per bucket the first time it is needed (warm up first), pad the batch into the "
          "bucket's static input, replay, and return a copy of the rows that are yours; beyond the largest "
          "bucket, run the model eagerly")
def check_graph_cache(make_graph_cache: Callable) -> str:
    """Right for every batch 1-64 (twice, shuffled) and 100; one capture per bucket; a replay per bucketed call."""
    import torch

    require_cuda("a graph cache")
    model = make_model()
    batches = list(range(1, 65)) * 2
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [batches[i] for i in order] + [100]
    with torch.no_grad(), counting_graph_calls() as counts:
        run = make_graph_cache(model, BUCKETS, WIDTH)
        kept = []
        for i, batch in enumerate(batches):
            x = _fresh(i, (batch, WIDTH))
            out, expected = run(x), model(x)
            _close(out, expected, f"batch {batch} (call {i + 1})", atol=1e-4, rtol=1e-4)
            kept.append((out, expected))
        for i, (out, expected) in enumerate(kept):  # results must not be views that later replays overwrite
            _close(out, expected, f"the result of call {i + 1}, read again after all calls", atol=1e-4, rtol=1e-4)
    bucketed_calls = len(batches) - 1
    if counts["captures"] != len(BUCKETS):
        raise CheckFailed(f"{counts['captures']} captures for buckets {BUCKETS}: expected exactly one per bucket")
    if counts["replays"] != bucketed_calls:
        raise CheckFailed(f"{counts['replays']} replays for {bucketed_calls} calls that fit a bucket: "
                          "every such call should be one replay (and the batch of 100 none)")
    return (f"{len(batches)} calls right (batches 1-64 twice, then 100 eager); "
            f"{counts['captures']} captures, {counts['replays']} replays")


# ---- exercise 4: repair a capture that synchronises --------------------------------------------------------

def clip_by_norm_syncing(g, max_norm: float):
    """Scale g down to norm max_norm if it is longer: correct eagerly, but it reads the norm on the host."""
    norm = g.norm().item()
    if norm > max_norm:
        return g * (max_norm / norm)
    return g.clone()


def _clip_cases(device: str):
    # norms well below and well above max_norm, so both sides of the branch are tested
    return [_fresh(seed, 1024, device) * scale for seed, scale in enumerate((0.01, 0.02, 1.0, 3.0, 0.005))]


@exercise("Exercise 4: repair a capture that synchronises",
          "the host cannot see a GPU value during capture; compute the scale factor on the GPU and apply it "
          "unconditionally: a factor of 1 leaves short vectors unchanged (torch.clamp)")
def check_clip_without_sync(clip_by_norm: Callable, max_norm: float = 10.0) -> str:
    """Right on both sides of the threshold; on a GPU, it also captures and replays correctly."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = _clip_cases(device)
    for i, g in enumerate(cases):
        _close(clip_by_norm(g, max_norm), clip_by_norm_syncing(g, max_norm), f"eager case {i + 1} "
               f"(norm {g.norm().item():.1f})")
    if device == "cpu":
        return f"{len(cases)} eager cases right on the CPU (capture checked only on a GPU)"
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
        raise CheckFailed(f"capture failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    for i, g in enumerate(cases):
        static_g.copy_(g)
        graph.replay()
        _close(static_out, clip_by_norm_syncing(g, max_norm), f"replayed case {i + 1} (norm {g.norm().item():.1f})")
    return f"{len(cases)} cases right eagerly and on replay of one captured graph, both sides of max_norm"


# ---- exercise 5: update a kernel node without re-instantiating --------------------------------------------

SCALE_ADD_SOURCE = r"""
extern "C" __global__ void scale_add(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
"""


@dataclass
class ScaleAddGraph:
    """An executable graph with one scale_add kernel node, and what it needs to update that node."""

    graph: object       # cuda.core Graph (executable)
    node: object        # the KernelNode in the graph's definition
    kernel: object      # cuda.core Kernel for scale_add
    config: object      # cuda.core LaunchConfig the node was launched with
    x: object           # CuPy array the kernel updates in place
    stream: object      # cuda.core Stream to launch on


def build_scale_add_graph(a: float = 2.0, b: float = 0.0, n: int = N) -> ScaleAddGraph:
    """Capture one scale_add launch with cuda.core's GraphBuilder and instantiate it."""
    import cupy as cp
    import numpy as np
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

    device = Device()
    device.set_current()
    kernel = Program(SCALE_ADD_SOURCE, code_type="c++",
                     options=ProgramOptions(arch=f"sm_{device.arch}")).compile("cubin").get_kernel("scale_add")
    x = cp.ones(n, dtype=cp.float32)
    config = LaunchConfig(grid=(n + 255) // 256, block=256)
    builder = device.create_graph_builder().begin_building()
    launch(builder, config, kernel, x.data.ptr, np.float32(a), np.float32(b), np.int32(n))
    builder.end_building()
    (node,) = builder.graph_definition.nodes()
    return ScaleAddGraph(builder.complete(), node, kernel, config, x, device.create_stream())


@exercise("Exercise 5: update a captured kernel's parameters",
          "graph[node] is the node's view in the executable graph; its update() takes the launch config, "
          "the kernel and the complete argument list (x's pointer, a, b, n with their C types)")
def check_node_update(set_scale_add: Callable[[ScaleAddGraph, float, float], None]) -> str:
    """After your update the same executable graph computes a*x + b for two new (a, b)."""
    import cupy as cp

    require_cuda("updating a graph")
    g = build_scale_add_graph()
    graph, handle = g.graph, int(g.graph.handle)
    x0 = cp.linspace(-1, 1, g.x.size, dtype=cp.float32)
    for a, b in ((3.0, 1.0), (-0.5, 2.0)):
        set_scale_add(g, a, b)
        if g.graph is not graph or int(g.graph.handle) != handle:
            raise CheckFailed("the executable graph was replaced: update its node in place instead of "
                              "building or instantiating a new one")
        g.x[...] = x0              # whatever your function launched, only the graph's launch counts
        cp.cuda.Device().synchronize()
        graph.launch(g.stream)
        g.stream.sync()
        expected = a * x0 + b
        if not cp.allclose(g.x, expected, atol=1e-6):
            raise CheckFailed(f"after set_scale_add(g, {a}, {b}) the graph computed x[0] = {float(g.x[0]):.3f}, "
                              f"expected {float(expected[0]):.3f}")
    return "two updates of the same executable graph computed a*x + b; no re-instantiation"


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


@exercise("Exercise 6: the replay that reads stale data",
          "a graph reads and writes the same addresses on every replay: new data must be copied into the "
          "captured input, and an output you keep must be copied out before the next replay")
def check_serve(serve: Callable) -> str:
    """Five requests, each answer equal to eager and independent of later replays."""
    require_cuda("replaying a graph")
    graph, static_x, static_out = capture_reference_pipeline()
    requests = [_fresh(100 + i, N, "cpu") for i in range(5)]
    results = serve(requests, graph, static_x, static_out)
    if len(results) != len(requests):
        raise CheckFailed(f"{len(results)} results for {len(requests)} requests")
    for i, (request, result) in enumerate(zip(requests, results, strict=True)):
        _close(result, pipeline(request.cuda()), f"request {i + 1}")
        if result.data_ptr() == static_out.data_ptr():
            raise CheckFailed(f"result {i + 1} is the graph's static output itself: the next replay overwrites it")
    return "5 requests answered right, each result a copy that later replays cannot change"
