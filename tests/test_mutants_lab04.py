"""Lab 04's mutation suite: plausible answers to every exercise, each judged by its checker.

Exercise 2 and exercise 4's eager part run on a CPU; the captures, replays and node updates need a GPU.
"""

import math
from bisect import bisect_left

import pytest

from launchlab.chapters.ch04 import checkers as ch04
from mutants import Answer, judge, suite, without_cuda


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    yield
    capsys.readouterr()


# ---- exercise 2: choose a bucket (CPU) ----------------------------------------------------------------------

def bucket_solution(batch, buckets):
    fitting = [b for b in buckets if b >= batch]
    return min(fitting) if fitting else None


def bucket_by_sorted_scan(batch, buckets):
    """Right, written differently: walk a sorted copy and stop at the first that fits."""
    for capacity in sorted(buckets):
        if capacity >= batch:
            return capacity
    return None


def bucket_by_bisect_on_a_sorted_copy(batch, buckets):
    """Right, written differently: bisect a sorted copy."""
    ordered = sorted(buckets)
    i = bisect_left(ordered, batch)
    return ordered[i] if i < len(ordered) else None


def first_that_fits(batch, buckets):
    return next((b for b in buckets if b >= batch), None)  # assumes the buckets are sorted


def next_power_of_two(batch, buckets):
    bucket = 1 << (batch - 1).bit_length()  # right only for power-of-two buckets
    return bucket if bucket <= max(buckets) else None


def strictly_larger(batch, buckets):
    fitting = [b for b in buckets if b > batch]
    return min(fitting) if fitting else None


def largest_when_none_fits(batch, buckets):
    fitting = [b for b in buckets if b >= batch]
    return min(fitting) if fitting else max(buckets)


def infinity_when_none_fits(batch, buckets):
    return min((b for b in buckets if b >= batch), default=math.inf)


def min_of_nothing(batch, buckets):
    return min(b for b in buckets if b >= batch)  # ValueError when none fits


def index_of_the_bucket(batch, buckets):
    fitting = [i for i, b in enumerate(buckets) if b >= batch]
    return min(fitting, key=lambda i: buckets[i]) if fitting else None


def bisect_unsorted(batch, buckets):
    i = bisect_left(buckets, batch)  # bisect needs sorted input
    return buckets[i] if i < len(buckets) else None


def lab_buckets_typed_in(batch, buckets):
    return bucket_solution(batch, (1, 2, 4, 8, 16, 32, 64))


def sorted_in_place(batch, buckets):
    buckets.sort()  # reorders the caller's list
    return first_that_fits(batch, buckets)


BUCKET_ANSWERS = [
    Answer("smallest of those that fit (the solution)", "right", bucket_solution),
    Answer("scan of a sorted copy", "right", bucket_by_sorted_scan),
    Answer("bisect on a sorted copy", "right", bucket_by_bisect_on_a_sorted_copy),
    Answer("min with default=None", "right", lambda batch, buckets: min((b for b in buckets if b >= batch), default=None)),
    Answer("the first that fits, assuming sorted buckets", "classic", first_that_fits),
    Answer("the next power of two", "classic", next_power_of_two),
    Answer("> instead of >=", "method", strictly_larger),
    Answer("bisect on the unsorted buckets", "method", bisect_unsorted),
    Answer("the largest bucket when none fits", "bad value", largest_when_none_fits),
    Answer("infinity when none fits", "bad value", infinity_when_none_fits),
    Answer("min() of nothing raises when none fits", "bad value", min_of_nothing),
    Answer("the bucket's index, not its capacity", "unit", index_of_the_bucket),
    Answer("the lab's buckets typed in", "hard-coded", lab_buckets_typed_in),
    Answer("the caller's list sorted in place", "structure", sorted_in_place),
]
SUITE_BUCKET = suite("04", 2, ch04.check_bucket_for, BUCKET_ANSWERS)


@pytest.mark.exercise("04", 2)
def test_lab04_exercise2_bucket_for():
    # a bucket set is drawn afresh on every call: every answer meets several
    wrong = judge(SUITE_BUCKET.lab, SUITE_BUCKET.number, SUITE_BUCKET.checker, SUITE_BUCKET.answers, trials=3)
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("04", 2)
def test_lab04_exercise2_hints_name_the_mistake():
    assert ">=" in ch04.check_bucket_for(strictly_larger).hint
    assert "None" in ch04.check_bucket_for(largest_when_none_fits).hint
    assert "in place" in ch04.check_bucket_for(sorted_in_place).hint
    assert "index" in ch04.check_bucket_for(index_of_the_bucket).hint


# ---- exercise 4: repair a capture that synchronises (eager part on a CPU) ------------------------------------

def clip_solution(g, max_norm):
    import torch

    return g * torch.clamp(max_norm / g.norm(), max=1.0)


def clip_with_where(g, max_norm):
    """Right, written differently: torch.where picks the scaled or the original vector on the device."""
    import torch

    norm = torch.linalg.vector_norm(g)
    return torch.where(norm > max_norm, g * (max_norm / norm), g)


def clip_like_pytorch(g, max_norm):
    """Right, written differently: clip_grad_norm_'s formula, an epsilon in the denominator, then a minimum."""
    import torch

    factor = max_norm / (g.norm() + 1e-6)
    return g * torch.minimum(factor, torch.ones_like(factor))


def clip_with_tolist(g, max_norm):
    norm = g.norm().tolist()  # a Python float: no PyTorch operation on a CPU, a copy to the host on a GPU
    return g * (max_norm / norm) if norm > max_norm else g.clone()


def clip_through_the_host(g, max_norm):
    import torch

    norm = g.norm().cpu()  # on a CPU a no-op; on a GPU a copy to the host, which a capture refuses
    return g * torch.clamp(max_norm / norm, max=1.0).to(g.device)


def clip_with_a_new_tensor(g, max_norm):
    import torch

    limit = torch.tensor(max_norm, device=g.device)  # a copy from the host, made inside the captured function
    return g * torch.clamp(limit / g.norm(), max=1.0)


def clip_with_python_min(g, max_norm):
    return g * min(1.0, max_norm / g.norm())  # min() compares a tensor with 1.0: bool() reads it on the host


def clip_always(g, max_norm):
    return g * (max_norm / g.norm())  # scales short vectors up too


def clip_clamped_from_below(g, max_norm):
    import torch

    return g * torch.clamp(max_norm / g.norm(), min=1.0)


def clip_in_place(g, max_norm):
    import torch

    return g.mul_(torch.clamp(max_norm / g.norm(), max=1.0))


def clip_by_squared_norm(g, max_norm):
    import torch

    return g * torch.clamp(max_norm / (g * g).sum(), max=1.0)


def clip_by_largest_element(g, max_norm):
    import torch

    return g * torch.clamp(max_norm / g.abs().max(), max=1.0)


def clip_with_ten_typed_in(g, max_norm):
    import torch

    return g * torch.clamp(10.0 / g.norm(), max=1.0)


def normalise_then_rescale(g, max_norm):
    import torch

    norm = g.norm()
    return g / norm * torch.clamp(norm, max=max_norm)  # 0 / 0 for a zero vector


def the_factor_alone(g, max_norm):
    import torch

    return torch.clamp(max_norm / g.norm(), max=1.0)


def library_clip(g, max_norm):
    import torch

    torch.nn.utils.clip_grad_norm_([g], max_norm)  # clips g.grad, which a plain tensor does not have
    return g


def clip_in_double(g, max_norm):
    import torch

    g64 = g.double()
    return g64 * torch.clamp(max_norm / g64.norm(), max=1.0)


CLIP_ANSWERS = [
    Answer("torch.clamp of the factor (the solution)", "right", clip_solution),
    Answer("torch.where on the device", "right", clip_with_where),
    Answer("clip_grad_norm_'s formula with an epsilon", "right", clip_like_pytorch),
    Answer("the original, .item() and all", "classic", ch04.clip_by_norm_syncing),
    Answer("Python min() of a tensor", "classic", clip_with_python_min),
    Answer("the norm read with .tolist()", "classic", clip_with_tolist),
    Answer("the factor computed on the host with .cpu()", "method", clip_through_the_host),
    Answer("short vectors scaled up too", "classic", clip_always),
    Answer("clamped from below instead of above", "method", clip_clamped_from_below),
    Answer("g scaled in place", "structure", clip_in_place),
    Answer("the squared norm", "unit", clip_by_squared_norm),
    Answer("the largest element for the norm", "unit", clip_by_largest_element),
    Answer("the result in float64", "unit", clip_in_double),
    Answer("max_norm typed in as 10", "hard-coded", clip_with_ten_typed_in),
    Answer("normalised, then rescaled: NaN for a zero vector", "bad value", normalise_then_rescale),
    Answer("the factor returned, not the vector", "bad value", the_factor_alone),
    Answer("returns None", "bad value", lambda g, max_norm: None),
    Answer("clip_grad_norm_ on a tensor without .grad", "structure", library_clip),
]


SUITE_CLIP = suite("04", 4, ch04.check_clip_without_sync, CLIP_ANSWERS, call=without_cuda, part="eager")


def _on_the_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the eager part, on a GPU machine too


@pytest.mark.exercise("04", 4)
def test_lab04_exercise4_clip_eager():
    wrong = judge(SUITE_CLIP.lab, SUITE_CLIP.number, SUITE_CLIP.checker, SUITE_CLIP.answers, call=SUITE_CLIP.call,
                  trials=2, part=SUITE_CLIP.part)
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("04", 4)
def test_lab04_exercise4_hints_name_the_mistake(monkeypatch):
    _on_the_cpu(monkeypatch)
    assert "host" in ch04.check_clip_without_sync(ch04.clip_by_norm_syncing).hint
    assert "host" in ch04.check_clip_without_sync(clip_with_python_min).hint
    assert "in place" in ch04.check_clip_without_sync(clip_in_place).hint
    assert "host" in ch04.check_clip_without_sync(clip_with_tolist).hint
    assert "float32" in ch04.check_clip_without_sync(clip_in_double).hint
    # a mistake in the values gets a hint on the values, not the exercise's hint on capture
    assert ch04.check_clip_without_sync(clip_by_squared_norm).hint == ch04.CLIP_VALUES_HINT
    assert ch04.check_clip_without_sync(clip_always).hint == ch04.CLIP_VALUES_HINT
    assert ch04.check_clip_without_sync(normalise_then_rescale).hint == ch04.CLIP_ZERO_HINT


# On a GPU the checker also captures the function once and replays it: the right answers must capture, and a
# function that copies from the host inside (right eagerly, on a CPU too) must not. The failed captures go last.
CAPTURE_ANSWERS = [
    Answer("torch.clamp of the factor (the solution)", "right", clip_solution),
    Answer("torch.where on the device", "right", clip_with_where),
    Answer("clip_grad_norm_'s formula with an epsilon", "right", clip_like_pytorch),
    Answer("max_norm made a GPU tensor inside", "method", clip_with_a_new_tensor),
    Answer("the norm read with .tolist()", "classic", clip_with_tolist),
    Answer("the original, .item() and all", "classic", ch04.clip_by_norm_syncing),
]
SUITE_CAPTURE = suite("04", 4, ch04.check_clip_without_sync, CAPTURE_ANSWERS, part="captured")


@pytest.mark.exercise("04", 4)
@pytest.mark.gpu
def test_lab04_exercise4_clip_captured():
    wrong = judge(SUITE_CAPTURE.lab, SUITE_CAPTURE.number, SUITE_CAPTURE.checker, SUITE_CAPTURE.answers,
                  part=SUITE_CAPTURE.part)
    assert not wrong, "\n".join(wrong)


# ---- exercise 1: capture a four-kernel pipeline (GPU) ------------------------------------------------------

def _warm_up(work):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = work()
    torch.cuda.current_stream().wait_stream(side)
    return out


def capture_solution(static_x):
    import torch

    _warm_up(lambda: ch04.pipeline(static_x))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ch04.pipeline(static_x)
    return graph, static_out


def capture_begin_and_end(static_x):
    """Right, written differently: three warm-ups, the operations spelled out, capture_begin/capture_end on the
    side stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        for _ in range(3):
            static_x.sin().mul(2).add(1).tanh()
        torch.cuda.synchronize()
        graph.capture_begin()
        static_out = static_x.sin().mul(2).add(1).tanh()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, static_out


def capture_a_copy(static_x):
    import torch

    private = static_x.clone()  # the graph reads a copy, never the buffer new inputs go to
    _warm_up(lambda: ch04.pipeline(private))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ch04.pipeline(private)
    return graph, out


def tanh_after_the_capture(static_x):
    import torch

    _warm_up(lambda: ch04.pipeline(static_x))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        h = torch.sin(static_x) * 2 + 1
    return graph, torch.tanh(h)  # computed once, eagerly: replays never rewrite it


def no_warm_up(static_x):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ch04.pipeline(static_x)
    return graph, static_out


def warm_up_inside_the_capture(static_x):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ch04.pipeline(static_x)  # "warm-up": captured too, so every replay runs the pipeline twice
        static_out = ch04.pipeline(static_x)
    return graph, static_out


def the_warm_up_output(static_x):
    import torch

    warm = _warm_up(lambda: ch04.pipeline(static_x))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ch04.pipeline(static_x)
    return graph, warm  # the warm-up's result: computed once, never rewritten by a replay


def eager_replay(static_x):
    import torch

    class EagerGraph(torch.cuda.CUDAGraph):
        def replay(self):  # "replay" by running the pipeline again
            self.out.copy_(ch04.pipeline(static_x))

    graph, static_out = capture_solution(static_x)
    eager = EagerGraph()
    eager.out = static_out
    return eager, static_out


PIPELINE_ANSWERS = [
    Answer("side-stream warm-up, torch.cuda.graph (the solution)", "right", capture_solution),
    Answer("three warm-ups, capture_begin/capture_end", "right", capture_begin_and_end),
    Answer("the graph reads a copy of static_x", "classic", capture_a_copy),
    Answer("tanh applied after the capture", "classic", tanh_after_the_capture),
    Answer("no warm-up", "method", no_warm_up),
    Answer("the warm-up inside the capture", "method", warm_up_inside_the_capture),
    Answer("the warm-up's output returned", "method", the_warm_up_output),
    Answer("a graph whose replay runs eagerly", "structure", eager_replay),
    Answer("(out, graph) swapped", "bad value", lambda static_x: capture_solution(static_x)[::-1]),
    Answer("the graph alone", "bad value", lambda static_x: capture_solution(static_x)[0]),
]
SUITE_PIPELINE = suite("04", 1, ch04.check_capture_pipeline, PIPELINE_ANSWERS)


@pytest.mark.exercise("04", 1)
@pytest.mark.gpu
def test_lab04_exercise1_capture_pipeline():
    # the checker times replay against eager, so each answer is judged twice
    wrong = judge(SUITE_PIPELINE.lab, SUITE_PIPELINE.number, SUITE_PIPELINE.checker, SUITE_PIPELINE.answers,
                  trials=2)
    assert not wrong, "\n".join(wrong)
    assert "outside" in ch04.check_capture_pipeline(tanh_after_the_capture).hint
    assert "warm-up" in ch04.check_capture_pipeline(warm_up_inside_the_capture).hint
    assert "side stream" in ch04.check_capture_pipeline(no_warm_up).hint


# ---- exercise 3: a shape-bucketed graph cache (GPU) ----------------------------------------------------------

def _capture(model, static_x, warm_ups=1):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm_ups):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_x)
    return graph, static_out


def _cache(model, buckets, width, *, key=bucket_solution, warm_ups=1, copy_out=lambda out, batch: out[:batch].clone(),
           eager_too=False, rebind=False, capture_every_call=False):
    """The solution's cache, with one of a learner's slips switched on."""
    import torch

    graphs = {}

    def run(x):
        batch = x.shape[0]
        bucket = key(batch, buckets)
        if bucket is None:
            return model(x)
        if bucket not in graphs or capture_every_call:
            static_x = torch.zeros(bucket, width, device="cuda")
            graphs[bucket] = (static_x, *_capture(model, static_x, warm_ups))
        static_x, graph, static_out = graphs[bucket]
        if rebind:
            static_x = torch.nn.functional.pad(x, (0, 0, 0, bucket - batch))  # a new tensor the graph never reads
        else:
            static_x[:batch].copy_(x)
            static_x[batch:].zero_()
        graph.replay()
        return model(x) if eager_too else copy_out(static_out, batch)

    return run


def cache_solution(model, buckets, width):
    return _cache(model, buckets, width)


def cache_captured_up_front(model, buckets, width):
    """Right, written differently: every bucket warmed up and captured at once, the batch padded with F.pad, the
    rows copied to the CPU."""
    import torch

    graphs = {}
    for bucket in sorted(buckets):
        static_x = torch.zeros(bucket, width, device="cuda")
        graphs[bucket] = (static_x, *_capture(model, static_x, warm_ups=3))

    def run(x):
        bucket = bucket_by_sorted_scan(x.shape[0], buckets)
        if bucket is None:
            return model(x)
        static_x, graph, static_out = graphs[bucket]
        static_x.copy_(torch.nn.functional.pad(x, (0, 0, 0, bucket - x.shape[0])))
        graph.replay()
        return static_out[: x.shape[0]].cpu()

    return run


def cache_per_batch_size(model, buckets, width):
    return _cache(model, buckets, width, key=lambda batch, buckets: batch if batch <= max(buckets) else None)


def one_graph_for_the_largest_bucket(model, buckets, width):
    return _cache(model, buckets, width, key=lambda batch, buckets: max(buckets) if batch <= max(buckets) else None)


def lab_buckets_typed_in_cache(model, buckets, width):
    return _cache(model, (1, 2, 4, 8, 16, 32, 64), width)


def width_typed_in(model, buckets, width):
    return _cache(model, buckets, 256)


def all_eager(model, buckets, width):
    return model


CACHE_ANSWERS = [
    Answer("captured on first use (the solution)", "right", cache_solution),
    Answer("captured up front, F.pad, copies on the CPU", "right", cache_captured_up_front),
    Answer("a view of the static output, no copy", "classic",
           lambda m, b, w: _cache(m, b, w, copy_out=lambda out, batch: out[:batch])),
    Answer("static_x rebound to the padded batch", "classic", lambda m, b, w: _cache(m, b, w, rebind=True)),
    Answer("one graph per batch size", "structure", cache_per_batch_size),
    Answer("a capture on every call", "structure", lambda m, b, w: _cache(m, b, w, capture_every_call=True)),
    Answer("replayed, then run eagerly for the answer", "structure", lambda m, b, w: _cache(m, b, w, eager_too=True)),
    Answer("everything eager", "structure", all_eager),
    Answer("one graph, for the largest bucket", "method", one_graph_for_the_largest_bucket),
    Answer("no warm-up before a capture", "method", lambda m, b, w: _cache(m, b, w, warm_ups=0)),
    Answer("> instead of >= for the bucket", "method", lambda m, b, w: _cache(m, b, w, key=strictly_larger)),
    Answer("all the bucket's rows returned", "unit",
           lambda m, b, w: _cache(m, b, w, copy_out=lambda out, batch: out.clone())),
    Answer("the lab's buckets typed in", "hard-coded", lab_buckets_typed_in_cache),
    Answer("the width typed in as 256", "hard-coded", width_typed_in),
    Answer("run returns None", "bad value", lambda m, b, w: lambda x: None),
]
SUITE_CACHE = suite("04", 3, ch04.check_graph_cache, CACHE_ANSWERS)


@pytest.mark.exercise("04", 3)
@pytest.mark.gpu
def test_lab04_exercise3_graph_cache():
    wrong = judge(SUITE_CACHE.lab, SUITE_CACHE.number, SUITE_CACHE.checker, SUITE_CACHE.answers)
    assert not wrong, "\n".join(wrong)
    assert "eager" in ch04.check_graph_cache(lambda m, b, w: _cache(m, b, w, eager_too=True)).hint
    assert "warm" in ch04.check_graph_cache(lambda m, b, w: _cache(m, b, w, warm_ups=0)).hint


# ---- exercise 5: update a captured kernel's parameters (GPU) ------------------------------------------------

def _args(g, a, b, f=None, n=None):
    import numpy as np

    f = f or np.float32
    return (g.x.data.ptr, f(a), f(b), np.int32(g.x.size) if n is None else n)


def update_solution(g, a, b):
    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, a, b))


def update_with_ctypes(g, a, b):
    """Right, written differently: ctypes scalars, the launch config read back from the definition's node."""
    import ctypes

    g.graph[g.node].update(config=g.node.config, kernel=g.kernel,
                           args=[g.x.data.ptr, ctypes.c_float(a), ctypes.c_float(b), ctypes.c_int(g.x.size)])


def update_the_definition(g, a, b):
    # changes the graph's definition, not the executable graph that was instantiated from it
    g.node.update(args=_args(g, a, b))


def launch_eagerly(g, a, b):
    from cuda.core import launch

    launch(g.stream, g.config, g.kernel, *_args(g, a, b))  # changes x once; the graph still computes 2x
    g.stream.sync()


def build_a_new_graph(g, a, b):
    from cuda.core import Device, launch

    builder = Device().create_graph_builder().begin_building()
    launch(builder, g.config, g.kernel, *_args(g, a, b))
    builder.end_building()
    g.graph = builder.complete()


def python_floats(g, a, b):
    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, float(a), float(b), f=float))


def float64_arguments(g, a, b):
    import numpy as np

    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, a, b, f=np.float64))


def a_and_b_swapped(g, a, b):
    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, b, a))


def only_a_updated(g, a, b):
    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, a, 0.0))  # b kept as built


def n_typed_in(g, a, b):
    import numpy as np

    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, a, b, n=np.int32(4096)))


def n_in_bytes(g, a, b):
    import numpy as np

    g.graph[g.node].update(config=g.config, kernel=g.kernel, args=_args(g, a, b, n=np.int32(g.x.nbytes)))


def grid_rounded_down(g, a, b):
    from cuda.core import LaunchConfig

    config = LaunchConfig(grid=g.x.size // 256, block=256)  # the last, partial block is lost
    g.graph[g.node].update(config=config, kernel=g.kernel, args=_args(g, a, b))


def args_alone(g, a, b):
    g.graph[g.node].update(args=_args(g, a, b))  # the executable node's update() wants config and kernel too


NODE_ANSWERS = [
    Answer("graph[node].update (the solution)", "right", update_solution),
    Answer("ctypes scalars, the node's own config", "right", update_with_ctypes),
    Answer("the definition's node updated", "classic", update_the_definition),
    Answer("a and b swapped", "classic", a_and_b_swapped),
    Answer("the kernel launched eagerly", "method", launch_eagerly),
    Answer("only a updated, b kept as built", "method", only_a_updated),
    Answer("a new graph built and instantiated", "structure", build_a_new_graph),
    Answer("update() with args alone", "structure", args_alone),
    Answer("a and b as Python floats", "unit", python_floats),
    Answer("a and b as np.float64", "unit", float64_arguments),
    Answer("n in bytes", "unit", n_in_bytes),
    Answer("n typed in as 4096", "hard-coded", n_typed_in),
    Answer("a grid rounded down", "method", grid_rounded_down),
]
SUITE_NODE = suite("04", 5, ch04.check_node_update, NODE_ANSWERS)


@pytest.mark.exercise("04", 5)
@pytest.mark.gpu
def test_lab04_exercise5_node_update():
    wrong = judge(SUITE_NODE.lab, SUITE_NODE.number, SUITE_NODE.checker, SUITE_NODE.answers)
    assert not wrong, "\n".join(wrong)
    assert "g.graph[g.node]" in ch04.check_node_update(update_the_definition).hint
    assert "float32" in ch04.check_node_update(python_floats).hint
    assert "swapped" in ch04.check_node_update(a_and_b_swapped).hint
    assert "bytes" in ch04.check_node_update(n_in_bytes).hint


# ---- exercise 6: the replay that reads stale data (GPU) -----------------------------------------------------

def serve_solution(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x.copy_(request)
        graph.replay()
        results.append(static_out.clone())
    return results


def serve_to_the_cpu(requests, graph, static_x, static_out):
    """Right, written differently: the input written by slice assignment, each result copied to the CPU."""
    results = []
    for request in requests:
        static_x[:] = request
        graph.replay()
        results.append(static_out.cpu())
    return results


def serve_stacked(requests, graph, static_x, static_out):
    """Right, written differently: the request moved to the GPU first, the results stacked into one tensor."""
    import torch

    rows = []
    for request in requests:
        static_x.copy_(request.cuda(non_blocking=True))
        graph.replay()
        rows.append(torch.empty_like(static_out).copy_(static_out))
    return torch.stack(rows)


def serve_only_clone(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x = request.to(static_x.device)  # rebinds the name; the graph still reads the old buffer
        graph.replay()
        results.append(static_out.clone())
    return results


def serve_only_copy(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x.copy_(request)
        graph.replay()
        results.append(static_out)  # the same buffer every time
    return results


def serve_clone_before_replay(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x.copy_(request)
        results.append(static_out.clone())  # the previous request's answer
        graph.replay()
    return results


def serve_eagerly(requests, graph, static_x, static_out):
    return [ch04.pipeline(request.to(static_x.device)) for request in requests]


def serve_replay_then_eager(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x.copy_(request)
        graph.replay()
        results.append(ch04.pipeline(static_x))  # the replay's output thrown away
    return results


def serve_into_the_requests(requests, graph, static_x, static_out):
    results = []
    for request in requests:
        static_x.copy_(request)
        graph.replay()
        request.copy_(static_out)  # "save memory": the answer written over the request
        results.append(request)
    return results


def serve_with_exercise_1s_graph():
    """Uses the graph and buffers captured earlier in the notebook (exercise 1's), not the ones it is given."""
    import torch

    static_x = torch.zeros(ch04.N, device="cuda")
    graph, static_out = capture_solution(static_x)
    return lambda requests, *given: serve_solution(requests, graph, static_x, static_out)


def serve_in_half_precision(requests, graph, static_x, static_out):
    return [r.half() for r in serve_solution(requests, graph, static_x, static_out)]


SERVE_ANSWERS = [
    Answer("copy_ in, replay, clone out (the solution)", "right", serve_solution),
    Answer("slice assignment in, copies to the CPU out", "right", serve_to_the_cpu),
    Answer("requests moved first, results stacked", "right", serve_stacked),
    Answer("the buggy server as given", "classic", ch04.serve_buggy),
    Answer("clone out, but static_x rebound", "classic", serve_only_clone),
    Answer("copy_ in, but static_out itself kept", "classic", serve_only_copy),
    Answer("the result copied before the replay", "method", serve_clone_before_replay),
    Answer("the pipeline run eagerly", "structure", serve_eagerly),
    Answer("replayed, then run eagerly for the answer", "structure", serve_replay_then_eager),
    Answer("answers written over the requests", "structure", serve_into_the_requests),
    Answer("results in half precision", "unit", serve_in_half_precision),
    Answer("results in reverse order", "bad value", lambda *args: serve_solution(*args)[::-1]),
    Answer("returns None", "bad value", lambda *args: None),
]
SUITE_SERVE = suite("04", 6, ch04.check_serve, SERVE_ANSWERS)  # and one answer that captures, built in the test


@pytest.mark.exercise("04", 6)
@pytest.mark.gpu
def test_lab04_exercise6_serve():
    answers = SUITE_SERVE.answers + [Answer("exercise 1's graph used, not the one given", "hard-coded",
                                            serve_with_exercise_1s_graph())]
    wrong = judge(SUITE_SERVE.lab, SUITE_SERVE.number, SUITE_SERVE.checker, answers)
    assert not wrong, "\n".join(wrong)
    assert "replay" in ch04.check_serve(serve_eagerly).hint
    assert "copy_" in ch04.check_serve(serve_only_clone).hint
    assert "clone" in ch04.check_serve(serve_only_copy).hint
    assert "requests" in ch04.check_serve(serve_into_the_requests).hint
