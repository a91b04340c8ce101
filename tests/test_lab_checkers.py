"""Every checker fails on its lab stub and passes on its solution; on the GPU, broken timers fail too."""

import json
import re

import nbformat
import pytest
from nbclient import NotebookClient

from launchlab import results
from launchlab.checking import FAIL_MARK, PASS_MARK
from launchlab.env import gpu_count, gpu_slug, tier_gpus
from launchlab.labs import make_lab
from launchlab.notebooks import course_notebooks, needs_gpus, runs_gpu_cells, source_sha256
from launchlab.reference_run import verdicts

SOLUTIONS = course_notebooks(dirs=("solutions",))
EXERCISE = re.compile(r"^#+\s*(Exercise\b.*?)\s*$", re.MULTILINE)


def run_and_collect_verdicts(nb, cwd, have: int) -> dict[str, str]:
    """Execute the cells a machine with `have` GPUs can run (errors allowed); return {exercise: PASS or FAIL}."""
    runnable = nbformat.from_dict(nb)
    runnable.cells = [c for c in runnable.cells if c.cell_type != "code" or needs_gpus(c) <= have]
    NotebookClient(runnable, timeout=600, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return verdicts(runnable)


def runnable_exercises(nb, have: int) -> set[str]:
    """Exercises whose checker cell a machine with `have` GPUs can run."""
    current, names = None, set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = EXERCISE.findall(cell.source)
            current = found[-1] if found else current
        elif current and ".check_" in cell.source and needs_gpus(cell) <= have:
            names.add(current)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_checkers_pass_on_solutions_and_fail_on_stubs(solution, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")  # a failed check prints FAIL instead of stopping the run
    have = tier_gpus()
    nb = nbformat.read(solution, as_version=4)
    expected = runnable_exercises(nb, have)
    if not expected:
        pytest.skip(f"no exercise of {solution.name} can be checked with {have} GPUs")
    solved = run_and_collect_verdicts(nb, solution.parent, have)
    stubbed = run_and_collect_verdicts(make_lab(nb, solution.name), solution.parent, have)
    assert solved == dict.fromkeys(expected, PASS_MARK), f"solution verdicts: {solved}"
    assert stubbed == dict.fromkeys(expected, FAIL_MARK), f"lab verdicts: {stubbed}"


# The GPU tier runs each solution once, in the reference run (strictly: a FAIL fails its cell), and these tests
# read the verdicts it recorded in this GPU's report; only the labs are executed here, in parallel (make test-gpu).
@pytest.mark.gpu
@pytest.mark.labs
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_gpu_checkers_passed_the_reference_run_and_fail_on_stubs(solution, root, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    have = gpu_count()
    nb = nbformat.read(solution, as_version=4)
    expected = runnable_exercises(nb, have)
    if not runs_gpu_cells(nb, have):
        pytest.skip(f"the GPU cells of {solution.name} need more than {have} GPUs; the CPU tier checks the rest")
    rel = solution.relative_to(root).as_posix()
    report = results.reports_dir(root) / f"{gpu_slug()}.json"
    entry = (json.loads(report.read_text()) if report.exists() else {}).get("notebooks", {}).get(rel)
    assert entry and entry["source_sha256"] == source_sha256(solution), (
        f"{rel} has no current run in {report.name}: run `make reference NOTEBOOKS={rel}` (make test-gpu does)")
    assert entry.get("verdicts") == dict.fromkeys(expected, PASS_MARK), f"reference-run verdicts: {entry.get('verdicts')}"
    stubbed = run_and_collect_verdicts(make_lab(nb, solution.name), solution.parent, have)
    assert stubbed == dict.fromkeys(expected, FAIL_MARK), f"lab verdicts: {stubbed}"


# On the GPU: the broken timers of lab 00 fail their checkers, so the checkers measure, not just run.
@pytest.mark.gpu
def test_lab00_checkers_reject_the_broken_timers(monkeypatch):
    import time

    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    from launchlab.checkers import ch00

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def no_sync_ms(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    def cold_ms(fn):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - start) * 1e3

    def default_stream_events_ms(fn, stream):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)

    def mean_ms(fn, repeats=21):
        samples = [cold_ms(fn) for _ in range(repeats)]
        return float(np.mean(samples))

    def cpu_field_ms(fn):
        return float(benchmark(fn, n_repeat=20, n_warmup=2).cpu_times.mean()) * 1e3

    assert not ch00.check_wait_for_gpu(no_sync_ms)
    assert not ch00.check_warm_up(cold_ms)
    assert not ch00.check_event_stream(default_stream_events_ms)
    assert not ch00.check_median(mean_ms)
    assert not ch00.check_library_field(cpu_field_ms)


@pytest.mark.gpu
def test_lab01_checkers_reject_plausible_wrong_answers(monkeypatch):
    import cupy as cp

    from launchlab import timing
    from launchlab.checkers import ch01

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def enqueue_for_everything(launch):
        enqueue = timing.enqueue_us(launch).median_us
        return {"enqueue_us": enqueue, "throughput_us": enqueue, "sync_latency_us": enqueue}

    def lazy_prepare(source, name):
        kernel = cp.RawKernel(source, name)  # compiled at the first launch: the mistake the exercise fixes
        return lambda args: kernel((1,), (1,), args)

    def one_conv_only():
        return ch01.CONV5_SOURCE.replace("conv5", "conv_chain_fused")

    assert not ch01.check_launch_figures(enqueue_for_everything)
    assert not ch01.check_crossover(lambda make_run: 16)
    assert not ch01.check_first_launch(lazy_prepare)
    assert not ch01.check_fused_conv(one_conv_only)


@pytest.mark.gpu
def test_lab03_graph_check_rejects_a_silent_fallback(monkeypatch):
    import torch

    from launchlab.checkers import ch03

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    assert not ch03.check_really_graphed(lambda fn: torch.compile(fn, mode="reduce-overhead"))


# Lab 04's exercises 2 and 4 run on a CPU: the natural first attempts fail them there.
def test_lab04_cpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    from launchlab.checkers import ch04

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def next_power_of_two(batch, buckets):
        bucket = 1 << (batch - 1).bit_length()  # right only for power-of-two buckets
        return bucket if bucket <= max(buckets) else None

    def first_that_fits(batch, buckets):
        return next((b for b in buckets if b >= batch), None)  # assumes sorted buckets

    def clip_always(g, max_norm):
        return g * (max_norm / g.norm())  # scales short vectors up too

    assert not ch04.check_bucket_for(next_power_of_two)
    assert not ch04.check_bucket_for(first_that_fits)
    assert not ch04.check_bucket_for(lambda batch, buckets: max(buckets))
    assert not ch04.check_clip_without_sync(clip_always)


@pytest.mark.gpu
def test_lab04_gpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    import numpy as np
    import torch

    from launchlab.checkers import ch04

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def capture_a_copy(static_x):
        private = static_x.clone()  # the graph reads a copy, never the buffer new inputs go to
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = ch04.pipeline(private)
        return graph, out

    def cache_per_batch_size(model, buckets, width):
        graphs = {}

        def run(x):  # one graph per exact batch size: right, but far more captures than buckets
            if x.shape[0] > max(buckets):
                return model(x)
            if x.shape[0] not in graphs:
                static_x = x.clone()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = model(static_x)
                graphs[x.shape[0]] = (graph, static_x, static_out)
            graph, static_x, static_out = graphs[x.shape[0]]
            static_x.copy_(x)
            graph.replay()
            return static_out.clone()
        return run

    def update_the_definition(g, a, b):
        # changes the graph's definition, not the executable graph that was instantiated from it
        g.node.update(args=(g.x.data.ptr, np.float32(a), np.float32(b), np.int32(g.x.size)))

    def only_clone(requests, graph, static_x, static_out):
        results = []
        for request in requests:
            static_x = request.to(static_x.device)
            graph.replay()
            results.append(static_out.clone())
        return results

    assert not ch04.check_capture_pipeline(capture_a_copy)
    assert not ch04.check_graph_cache(cache_per_batch_size)
    assert not ch04.check_clip_without_sync(ch04.clip_by_norm_syncing)
    assert not ch04.check_node_update(update_the_definition)
    assert not ch04.check_serve(ch04.serve_buggy)
    assert not ch04.check_serve(only_clone)


# Lab 05's schedule check runs on a CPU: round-robin and a single branch fail it.
@pytest.mark.gpu
def test_lab05_gpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    import cupy as cp
    import torch
    from cuda.core.graph import GraphDefinition

    from launchlab.checkers import ch05

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def serial_diamond(x):  # right answer, but everything on one stream: a chain
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph):
            a = x + 1
            out = a * 2 + a * 3
        return graph, out

    def c_on_origin(origin, side, x, y, z, out):  # no fork at all: a chain, not a diamond
        k, n = ch05.stage_kernels(), cp.int32(x.size)
        with origin:
            origin.begin_capture()
            for name, args in (("a", (x, n)), ("b", (x, y, n)), ("c", (x, z, n)), ("d", (y, z, out, n))):
                k[name]((1,), (x.size,), args, stream=origin)
            return origin.end_capture()

    def with_join(kernel, config, x, y, z, out, n):  # the same computation with an extra EMPTY node
        definition = GraphDefinition()
        a = definition.launch(config, kernel["a"], x.data.ptr, n)
        both = definition.join(a.launch(config, kernel["b"], x.data.ptr, y.data.ptr, n),
                               a.launch(config, kernel["c"], x.data.ptr, z.data.ptr, n))
        both.launch(config, kernel["d"], y.data.ptr, z.data.ptr, out.data.ptr, n)
        return definition

    assert not ch05.check_torch_diamond(serial_diamond)
    assert not ch05.check_joined(ch05.capture_unjoined)
    assert not ch05.check_joined(c_on_origin)
    assert not ch05.check_explicit_diamond(with_join)


# Lab 06 on the GPU: plausible wrong answers fail, each for the reason the checker names.
@pytest.mark.gpu
def test_lab06_device_launch_checkers_reject_plausible_wrong_answers(monkeypatch):
    import cupy as cp
    from cuda.core.graph import GraphCompleteOptions

    from launchlab.checkers import ch06

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def build(record_work, stream, options, launch=False):
        builder = stream.create_graph_builder().begin_building()
        record_work(cp.cuda.Stream.from_external(builder))
        builder.end_building()
        graph = builder.complete(options)
        if launch:
            graph.launch(stream)
        return graph

    no_flag = ch06.check_device_launchable(lambda r, s: build(r, s, None))
    assert not no_flag and "not instantiated for device launch" in no_flag.detail
    not_uploaded = ch06.check_device_launchable(lambda r, s: build(r, s, GraphCompleteOptions(device_launch=True)))
    assert not not_uploaded and "uploaded" in not_uploaded.detail
    ran_itself = ch06.check_device_launchable(
        lambda r, s: build(r, s, GraphCompleteOptions(device_launch=True, upload_stream=s), launch=True))
    assert not ran_itself and "already ran" in ran_itself.detail


SCHEDULE_HEAD = """
extern "C" __global__ void schedule(const int* kinds, int n_items, int* next, int* current,
                                    const cudaGraphExec_t* handlers) {
    int i = *next;
    if (i >= n_items) return;
"""


@pytest.mark.gpu
@pytest.mark.parametrize("body, reason", [
    ("*current = i; *next = i + 1; __threadfence(); cudaGraphLaunch(handlers[0], cudaStreamGraphFireAndForget);"
     "if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch); }",
     "wrong graph"),
    ("*current = i; *next = i + 1; __threadfence(); cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget); }",
     "never handled"),
    ("*current = i; *next = i + 1; __threadfence(); cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);"
     "if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphFireAndForget); }",
     "never handled"),
    ("*current = i; __threadfence(); cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);"
     "if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch); }",
     "did not finish"),
    ("this is not CUDA }", "did not compile"),
], ids=["always-kind-0", "no-relaunch", "relaunch-fire-and-forget", "never-advances", "syntax-error"])
def test_lab06_scheduler_checker_rejects_wrong_dispatch(monkeypatch, body, reason):
    from launchlab.checkers import ch06

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = ch06.check_scheduler(lambda: SCHEDULE_HEAD + body)
    assert not verdict and reason in verdict.detail, verdict.detail


BISECT_HEAD = 'extern "C" __global__ void bisect_on_gpu(float* lo, float* hi, float tol, int* steps, int max_steps) {\n'


@pytest.mark.gpu
@pytest.mark.parametrize("body, reason", [
    ("bisect_step(lo, hi); *steps += 1; }", "ran once"),
    ("bisect_step(lo, hi); *steps += 1; if (*hi - *lo > tol && *steps < max_steps) "
     "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphFireAndForget); }", "ran once"),
    ("bisect_step(lo, hi); *steps += 1; if (*steps < 12) "
     "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch); }", "steps"),
    ("bisect_step(lo, hi); *steps += 1; if (*hi - *lo > 2 * tol && *steps < max_steps) "
     "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch); }", "steps"),
], ids=["no-relaunch", "fire-and-forget", "fixed-count", "wrong-tolerance"])
def test_lab06_tail_loop_checker_rejects_wrong_loops(monkeypatch, body, reason):
    from launchlab.checkers import ch06

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = ch06.check_tail_loop(lambda: BISECT_HEAD + body)
    assert not verdict and reason in verdict.detail, verdict.detail


@pytest.mark.gpu
def test_lab06_while_checker_rejects_wrong_loops(monkeypatch):
    import numpy as np
    from cuda.core import LaunchConfig, launch

    from launchlab.checkers import ch06

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def loop(default, in_body=True):
        def build(stream, kernel, x, count, threshold):
            builder = stream.create_graph_builder().begin_building()
            condition = builder.create_condition(default_value=default)
            body = builder.while_loop(condition)
            target = body if in_body else builder
            body.begin_building()
            launch(target, LaunchConfig(grid=1, block=256), kernel, x.data.ptr, np.int32(x.size),
                   np.float32(threshold), count.data.ptr, np.int32(ch06.MAX_COUNT), np.uint64(int(condition.handle)))
            body.end_building()
            builder.end_building()
            return builder
        return build

    def unrolled(stream, kernel, x, count, threshold):  # a fixed number of halvings, no loop at all
        builder = stream.create_graph_builder().begin_building()
        condition = builder.create_condition(default_value=1)
        for _ in range(11):
            launch(builder, LaunchConfig(grid=1, block=256), kernel, x.data.ptr, np.int32(x.size),
                   np.float32(threshold), count.data.ptr, np.int32(ch06.MAX_COUNT), np.uint64(int(condition.handle)))
        builder.end_building()
        return builder

    never_entered = ch06.check_while_loop(loop(default=0))
    assert not never_entered and "never ran" in never_entered.detail
    outside = ch06.check_while_loop(loop(default=1, in_body=False))
    assert not outside and "outside the loop" in outside.detail
    no_loop = ch06.check_while_loop(unrolled)
    assert not no_loop and "0 conditional nodes" in no_loop.detail


# Lab 07: caches that read the position on the host or build a new tensor, splits that blame the host for
# everything or count overlaps twice; on the GPU, a step that forgets to advance and a loop that is a step.
def test_lab07_cpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    import torch

    from launchlab.checkers import ch07

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def via_item(cache, new, pos):  # right in eager, but a captured step would keep one position
        cache[:, :, int(pos)] = new[:, :, 0]

    def via_cat(cache, new, pos):  # the growing cache: a new tensor every step, the given one untouched
        return torch.cat([cache, new], dim=2)

    read_back = ch07.check_static_cache(via_item)
    assert not read_back and "read a value back to the host" in read_back.detail
    grown = ch07.check_static_cache(via_cat)
    assert not grown and "does not hold the new keys" in grown.detail



@pytest.mark.gpu
def test_lab07_gpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    import torch

    from launchlab.checkers import ch07

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def capture(work):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            work()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            work()
        return graph

    def step_without_advance(step, token, pos, out):  # every replay decodes at position 0
        def work():
            nxt = step(token, pos)
            out.index_copy_(1, pos, nxt[:, None])
            token.copy_(nxt)
        return capture(work)

    def full_step(step, token, pos, out):
        def work():
            nxt = step(token, pos)
            out.index_copy_(1, pos, nxt[:, None])
            token.copy_(nxt)
            pos.add_(1)
        return work

    def one_step_as_loop(step, token, pos, out, steps):  # one step per replay: the loop is still on the host
        return capture(full_step(step, token, pos, out))

    def loop_without_feedback(step, token, pos, out, steps):  # every step decodes from the start token
        def work():
            for _ in range(steps):
                nxt = step(token, pos)
                out.index_copy_(1, pos, nxt[:, None])
                pos.add_(1)
        return capture(work)

    stuck = ch07.check_capture_step(step_without_advance)
    assert not stuck and "differ from eager" in stuck.detail
    assert ch07.check_capture_step(lambda *args: capture(full_step(*args)))
    short = ch07.check_capture_loop(one_step_as_loop)
    assert not short and "differ from eager" in short.detail
    no_feedback = ch07.check_capture_loop(loop_without_feedback)
    assert not no_feedback and "differ from eager" in no_feedback.detail


# Lab 08: a collective still hidden behind torch._dynamo.disable, and clipping decided on each rank's own norm.
def test_lab08_cpu_checkers_reject_plausible_wrong_answers(monkeypatch):
    from launchlab.checkers import ch08

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def all_reduce_functional(x):  # right answer, but a graph break at every call
        import torch.distributed as dist

        @torch._dynamo.disable  # noqa: F821  (torch is imported in the ranks)
        def hidden(t):
            t = t.clone()
            dist.all_reduce(t)
            return t

        return hidden(x)

    breaks = ch08.check_functional_all_reduce(all_reduce_functional)
    assert not breaks and "breaks over 4 all-reduces" in breaks.detail

    def clip_by_global_norm(grad, max_norm, all_reduce):  # the lecture's asymmetric version
        local = grad.norm()
        if local > max_norm:
            total = all_reduce(local ** 2, "squared norm").sqrt()
            grad.mul_(max_norm / total)
        return grad

    asymmetric = ch08.check_symmetric_clip(clip_by_global_norm)
    assert not asymmetric and ("paired wrongly" in asymmetric.detail or "did not both finish" in asymmetric.detail)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2, reason="needs two CUDA GPUs")
def test_lab08_graph_checker_rejects_wrong_captures(monkeypatch):
    from launchlab.checkers import ch08

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def capture_mean(x, steps):  # forgets the division: the sum, not the mean
        def step():
            for _ in range(steps):
                dist.all_reduce(x)  # noqa: F821  (imported in the ranks)

        side = torch.cuda.Stream()  # noqa: F821
        side.wait_stream(torch.cuda.current_stream())  # noqa: F821
        with torch.cuda.stream(side):  # noqa: F821
            step()
        torch.cuda.current_stream().wait_stream(side)  # noqa: F821
        graph = torch.cuda.CUDAGraph()  # noqa: F821
        with torch.cuda.graph(graph):  # noqa: F821
            step()
        return graph

    summed = ch08.check_graphed_mean(capture_mean)
    assert not summed and "differs from the mean" in summed.detail
