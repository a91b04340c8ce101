"""Lab 06's mutation suite: plausible answers a learner writes, each judged by its checker.

Every exercise needs a GPU (a CUDA 12.4 driver for exercise 4). What runs on a CPU runs here too: the reading of
a WHILE node's body from the driver's DOT dump, the inputs and cases the checkers draw, and the verdicts (and
their hints) the checkers of exercises 2 and 3 give on what a child process reports.
"""

import json

import numpy as np
import pytest

from launchlab import child, devicegraphs
from launchlab.chapters.ch06 import checkers as ch06
from mutants import Answer, judge, suite

# ---- exercise 1: make a graph launchable from the device ---------------------------------------------------


def _builder(record_work, stream):
    import cupy as cp

    builder = stream.create_graph_builder().begin_building()
    record_work(cp.cuda.Stream.from_external(builder))
    builder.end_building()
    return builder


def launchable(record_work, stream):
    from cuda.core.graph import GraphCompleteOptions

    return _builder(record_work, stream).complete(GraphCompleteOptions(device_launch=True, upload_stream=stream))


def launchable_uploaded_by_hand(record_work, stream):
    """Right, written differently: flagged for device launch, then uploaded with Graph.upload."""
    from cuda.core.graph import GraphCompleteOptions

    graph = _builder(record_work, stream).complete(GraphCompleteOptions(device_launch=True))
    graph.upload(stream)
    return graph


def not_flagged(record_work, stream):
    return _builder(record_work, stream).complete()


def launched_to_try_it(record_work, stream):
    graph = launchable(record_work, stream)
    graph.launch(stream)
    stream.sync()
    return graph


def captured_with_cupy(record_work, stream):
    """CuPy's own capture: a CuPy graph, which cuda.core cannot flag for device launch."""
    import cupy as cp

    side = cp.cuda.Stream(non_blocking=True)
    with side:
        side.begin_capture()
        record_work(side)
        graph = side.end_capture()
    graph.upload(side)
    return graph


def recorded_twice(record_work, stream):
    import cupy as cp
    from cuda.core.graph import GraphCompleteOptions

    builder = stream.create_graph_builder().begin_building()
    capture = cp.cuda.Stream.from_external(builder)
    record_work(capture)
    record_work(capture)  # "once more, to be sure it is in there"
    builder.end_building()
    return builder.complete(GraphCompleteOptions(device_launch=True, upload_stream=stream))


def the_builder(record_work, stream):
    return _builder(record_work, stream)


def the_handle(record_work, stream):
    return launchable(record_work, stream).handle


LAUNCHABLE_ANSWERS = [
    Answer("complete(device_launch=True, upload_stream=stream) (the solution)", "right", launchable),
    Answer("device_launch=True, then graph.upload(stream)", "right", launchable_uploaded_by_hand),
    Answer("completed without device_launch", "classic", not_flagged),
    Answer("launched once from the host to try it", "method", launched_to_try_it),
    Answer("captured with CuPy's own graph API", "structure", captured_with_cupy),
    Answer("work recorded twice", "structure", recorded_twice),
    Answer("the builder returned, not completed", "bad value", the_builder),
    Answer("the CUgraphExec handle returned", "unit", the_handle),
    Answer("returns None", "bad value", lambda record_work, stream: None),
]
SUITE_LAUNCHABLE = suite("06", 1, ch06.check_device_launchable, LAUNCHABLE_ANSWERS)


@pytest.mark.exercise("06", 1)
@pytest.mark.gpu
def test_lab06_exercise1_device_launchable(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_LAUNCHABLE.lab, SUITE_LAUNCHABLE.number, SUITE_LAUNCHABLE.checker, SUITE_LAUNCHABLE.answers)
    assert not wrong, "\n".join(wrong)
    assert "device_launch=True" in ch06.check_device_launchable(not_flagged).hint


# ---- exercise 2: dispatch each queue item to its kind's graph ----------------------------------------------

SCHEDULE = """
extern "C" __global__ void schedule(const int* kinds, int n_items, int* next, int* current,
                                    const cudaGraphExec_t* handlers) {
"""


def scheduler(body):
    return lambda: SCHEDULE + body + "\n}\n"


SCHEDULER_SOLUTION = """
    int i = *next;
    if (i >= n_items) return;
    *current = i;
    *next = i + 1;
    __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i + 1 < n_items)
        cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
"""

SCHEDULER_ANSWERS = [
    Answer("the lecture's scheduler (the solution)", "right", scheduler(SCHEDULER_SOLUTION)),
    Answer("atomicAdd on next, always relaunch, stop at the bound", "right", scheduler("""
    int i = atomicAdd(next, 1);
    if (i >= n_items) return;            // the run after the last item ends the chain
    *current = i;
    __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("every handler sent to kind 0's graph", "classic", scheduler("""
    int i = *next;
    if (i >= n_items) return;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[0], cudaStreamGraphFireAndForget);
    if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("no relaunch: one item handled", "classic", scheduler("""
    int i = *next;
    if (i >= n_items) return;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
""")),
    Answer("relaunched fire-and-forget instead of tail", "method", scheduler("""
    int i = *next;
    if (i >= n_items) return;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphFireAndForget);
""")),
    Answer("next never advanced (runs until stopped)", "method", scheduler("""
    int i = *next;
    if (i >= n_items) return;
    *current = i; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i + 1 < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("bound tested with > : reads one item past the end", "classic", scheduler("""
    int i = *next;
    if (i > n_items) return;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("no bound check before handling", "structure", scheduler("""
    int i = *next;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("items counted from 1", "unit", scheduler("""
    int i = *next + 1;
    if (i > n_items) return;
    *current = i; *next = i; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i < n_items) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("the lab's queue length (300) typed in", "hard-coded", scheduler("""
    int i = *next;
    if (i >= 300) return;
    *current = i; *next = i + 1; __threadfence();
    cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    if (i + 1 < 300) cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
""")),
    Answer("one run loops over the whole queue", "structure", scheduler("""
    for (int i = *next; i < n_items; ++i) {
        *current = i; *next = i + 1; __threadfence();
        cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget);
    }
""")),
    Answer("the kernel misnamed", "bad value", lambda: SCHEDULE.replace("schedule(", "scheduler(") + SCHEDULER_SOLUTION + "}"),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_SCHEDULER = suite("06", 2, ch06.check_scheduler, SCHEDULER_ANSWERS)


@pytest.mark.exercise("06", 2)
@pytest.mark.gpu
def test_lab06_exercise2_scheduler(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # A scheduler that never stops is stopped after 3 s here (20 s in the lab), so the suite stays short.
    monkeypatch.setattr(ch06, "GPU_TIMEOUT_S", 3)
    monkeypatch.setattr(ch06, "CHILD_EXIT_S", 2)
    wrong = judge(SUITE_SCHEDULER.lab, SUITE_SCHEDULER.number, SUITE_SCHEDULER.checker, SUITE_SCHEDULER.answers)
    assert not wrong, "\n".join(wrong)


# ---- exercise 3: a host-driven loop turned into a tail-launch loop -----------------------------------------

BISECT = 'extern "C" __global__ void bisect_on_gpu(float* lo, float* hi, float tol, int* steps, int max_steps) {\n'
RELAUNCH = "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);"


def bisection(body):
    return lambda: BISECT + body + "\n}\n"


BISECTION_ANSWERS = [
    Answer("step, count, relaunch while wide and under the fuse (the solution)", "right", bisection(f"""
    bisect_step(lo, hi);
    *steps += 1;
    if (*hi - *lo > tol && *steps < max_steps)
        {RELAUNCH}
""")),
    Answer("return early when done, relaunch otherwise", "right", bisection(f"""
    bisect_step(lo, hi);
    int done = *steps + 1;
    *steps = done;
    float width = *hi - *lo;
    if (width <= tol || done >= max_steps) return;
    {RELAUNCH}
""")),
    Answer("test first, then step and relaunch (one launch more)", "right", bisection(f"""
    if (*hi - *lo > tol && *steps < max_steps) {{
        bisect_step(lo, hi);
        *steps += 1;
        {RELAUNCH}
    }}
""")),
    Answer("one step, no relaunch", "classic", bisection("bisect_step(lo, hi); *steps += 1;")),
    Answer("the whole loop inside one kernel", "structure", bisection("""
    do {
        bisect_step(lo, hi);
        *steps += 1;
    } while (*hi - *lo > tol && *steps < max_steps);
""")),
    Answer("relaunched fire-and-forget", "method", bisection("""
    bisect_step(lo, hi); *steps += 1;
    if (*hi - *lo > tol && *steps < max_steps)
        cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphFireAndForget);
""")),
    Answer("the fuse forgotten (runs until stopped)", "method", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (*hi - *lo > tol) {RELAUNCH}
""")),
    Answer("fuse tested with <=", "classic", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (*hi - *lo > tol && *steps <= max_steps) {RELAUNCH}
""")),
    Answer("the lab's step count (18) typed in", "hard-coded", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (*steps < 18) {RELAUNCH}
""")),
    Answer("the lab's tolerance typed in", "hard-coded", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (*hi - *lo > 1e-5f && *steps < max_steps) {RELAUNCH}
""")),
    Answer("the width tested with >= tol", "classic", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (*hi - *lo >= tol && *steps < max_steps) {RELAUNCH}
""")),
    Answer("half the width tested against tol", "unit", bisection(f"""
    bisect_step(lo, hi); *steps += 1;
    if (0.5f * (*hi - *lo) > tol && *steps < max_steps) {RELAUNCH}
""")),
    Answer("not CUDA", "bad value", lambda: "def bisect_on_gpu(lo, hi): pass"),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_BISECTION = suite("06", 3, ch06.check_tail_loop, BISECTION_ANSWERS)


@pytest.mark.exercise("06", 3)
@pytest.mark.gpu
def test_lab06_exercise3_tail_loop(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(ch06, "GPU_TIMEOUT_S", 3)
    monkeypatch.setattr(ch06, "CHILD_EXIT_S", 2)
    wrong = judge(SUITE_BISECTION.lab, SUITE_BISECTION.number, SUITE_BISECTION.checker, SUITE_BISECTION.answers)
    assert not wrong, "\n".join(wrong)
    looped = ch06.check_tail_loop(BISECTION_ANSWERS[4].fn)
    assert "no loop inside the kernel" in looped.hint, looped


# ---- exercise 4: a WHILE node that stops at the right iteration --------------------------------------------


def halving_loop(default=1, unroll=1, where="body", kind="while", block=256, cap=None, handle=True,
                 threshold_type=np.float32):
    """A learner's build_halving_loop, with one thing changed."""

    def build(stream, kernel, x, count, threshold):
        from cuda.core import LaunchConfig, launch

        builder = stream.create_graph_builder().begin_building()
        condition = builder.create_condition(default_value=default)
        body = builder.while_loop(condition) if kind == "while" else builder.if_then(condition)
        body.begin_building()
        target = body if where == "body" else builder
        for _ in range(unroll):
            launch(target, LaunchConfig(grid=1, block=block), kernel, x.data.ptr, np.int32(x.size),
                   threshold_type(threshold), count.data.ptr, np.int32(ch06.MAX_COUNT if cap is None else cap),
                   np.uint64(int(condition.handle)) if handle else condition)
        body.end_building()
        builder.end_building()
        return builder

    return build


def unrolled_without_a_loop(stream, kernel, x, count, threshold):
    from cuda.core import LaunchConfig, launch

    builder = stream.create_graph_builder().begin_building()
    condition = builder.create_condition(default_value=1)
    for _ in range(11):  # about what the lab's example needed
        launch(builder, LaunchConfig(grid=1, block=256), kernel, x.data.ptr, np.int32(x.size), np.float32(threshold),
               count.data.ptr, np.int32(ch06.MAX_COUNT), np.uint64(int(condition.handle)))
    builder.end_building()
    return builder


def threshold_typed_in(stream, kernel, x, count, threshold):
    return halving_loop()(stream, kernel, x, count, 1.0)


def completed(stream, kernel, x, count, threshold):
    return halving_loop()(stream, kernel, x, count, threshold).complete()


WHILE_ANSWERS = [
    Answer("WHILE node, kernel in its body (the solution)", "right", halving_loop()),
    Answer("128 threads a block, the condition object passed as is", "right", halving_loop(block=128, handle=False)),
    Answer("condition created with default 0", "classic", halving_loop(default=0)),
    Answer("an IF node instead of WHILE", "classic", halving_loop(kind="if")),
    Answer("the kernel launched on the outer builder", "structure", halving_loop(where="outer")),
    Answer("the body unrolled twice", "structure", halving_loop(unroll=2)),
    Answer("no WHILE node: 11 launches in a row", "hard-coded", unrolled_without_a_loop),
    Answer("threshold typed in as 1.0", "hard-coded", threshold_typed_in),
    Answer("the cap typed in as 1000", "hard-coded", halving_loop(cap=1000)),
    Answer("threshold passed as np.int32", "unit", halving_loop(threshold_type=np.int32)),
    Answer("no default value: not reset between launches", "method", halving_loop(default=None)),
    Answer("the executable graph returned", "bad value", completed),
    Answer("returns None", "bad value", lambda stream, kernel, x, count, threshold: None),
]
SUITE_WHILE = suite("06", 4, ch06.check_while_loop, WHILE_ANSWERS)


@pytest.mark.exercise("06", 4)
@pytest.mark.gpu
def test_lab06_exercise4_while_loop(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_WHILE.lab, SUITE_WHILE.number, SUITE_WHILE.checker, SUITE_WHILE.answers)
    assert not wrong, "\n".join(wrong)
    twice = ch06.check_while_loop(halving_loop(unroll=2))
    assert "2 nodes" in twice.detail and "once in the body" in twice.hint, twice
    assert "IF node" in ch06.check_while_loop(halving_loop(kind="if")).detail


# ---- on a CPU: what the checkers draw, read and conclude ----------------------------------------------------

WHILE_DOT = """digraph dot {
subgraph cluster_1 {
label="graph_1" graph[style="dashed"];
"graph_1_node_0"[style="bold" shape="record" label="{
CONDITIONAL
| {ID | 0}
| {Conditional Type| %s}
| {True|graph_2}
}
"];

}
subgraph cluster_2 {
label="graph_2" graph[style="dashed"];
%s
}
}
"""
KERNEL_NODE = '"graph_2_node_%d"[style="bold" shape="octagon" label="%d\nhalve_all\n"];\n'


def test_a_while_body_is_read_from_the_drivers_dump():
    one = devicegraphs.conditionals_from_dot(WHILE_DOT % ("WHILE", KERNEL_NODE % (0, 0)))
    assert one == [devicegraphs.Conditional("WHILE", ((("KERNEL", "halve_all"),),))]
    twice = KERNEL_NODE % (0, 0) + KERNEL_NODE % (1, 1) + '"graph_2_node_0" -> "graph_2_node_1";\n'
    (node,) = devicegraphs.conditionals_from_dot(WHILE_DOT % ("WHILE", twice))
    assert node.body_summary() == "2 nodes (kernel halve_all, kernel halve_all)"
    assert devicegraphs.conditionals_from_dot(WHILE_DOT % ("IF", KERNEL_NODE % (0, 0)))[0].kind == "IF"
    assert devicegraphs.conditionals_from_dot("digraph dot {\n}\n") is None  # no clusters: judged by behaviour


def test_the_while_inputs_pin_the_count_and_the_threshold():
    rng = np.random.default_rng()
    for _ in range(50):
        threshold = ch06.draw_threshold(rng)
        assert not 0.8 < threshold < 1.25
        counts = [ch06.halvings(x, threshold)[0] for x in ch06.halving_inputs(rng, threshold, 512)]
        assert counts[0] == 1 and counts[1] % 2 == 1 and counts[2] % 2 == 0 and counts[3] == ch06.MAX_COUNT
        inputs = ch06.halving_inputs(np.random.default_rng(7), threshold, 512)
        for off in (1.011 * threshold, 0.989 * threshold):  # a threshold 1% off changes some count
            assert [ch06.halvings(x, off)[0] for x in inputs] != [ch06.halvings(x, threshold)[0] for x in inputs]


def test_the_drawn_queues_and_solves_vary_and_meet_the_edges():
    queues = ch06._scheduler_queues(11)
    assert [q[1] for q in queues][0] == 1 and all(items % 2 == 1 for _, items, _ in queues)
    assert queues != ch06._scheduler_queues(12)
    cases = ch06._bisection_cases(11)
    assert cases[0]["interval"] == (1.0, 3.0) and cases[-1]["tol"] < 1e-7  # the last one only the fuse stops
    assert all(a < 2.0946 < b for a, b in (c["interval"] for c in cases))
    assert cases[1] != ch06._bisection_cases(12)[1]


def _host_bisection(interval, tol, max_steps, go_on=lambda width, tol: width > tol):
    """The host-driven loop in float32 on the host (bisect_step as the prelude writes it): (lo, hi, steps)."""
    import numpy as np

    f32 = np.float32
    lo, hi, tol, steps = f32(interval[0]), f32(interval[1]), f32(tol), 0

    def f(x):
        return x * x * x - f32(2) * x - f32(5)

    while True:
        mid = f32(0.5) * (lo + hi)
        lo, hi = (lo, mid) if f(lo) * f(mid) <= 0 else (mid, hi)
        steps += 1
        if not (go_on(hi - lo, tol) and steps < max_steps):
            return float(lo), float(hi), steps


def test_the_edge_solve_meets_its_tolerance_exactly():
    """On every draw the third solve's width equals tol exactly at the step it stops: a test of >= tol (or of
    the width against tol in any other way that lets equality go on) takes one step more."""
    for seed in range(300):
        case = ch06._bisection_cases(seed)[2]
        lo, hi, steps = _host_bisection(case["interval"], case["tol"], case["max_steps"])
        assert hi - lo == case["tol"] and steps < case["max_steps"], (seed, case, lo, hi, steps)
        assert _host_bisection(case["interval"], case["tol"], case["max_steps"],
                               go_on=lambda width, tol: width >= tol)[2] == steps + 1, seed


def _reported(monkeypatch, **values):
    """Make the checkers' child process report `values`, and let them run without a GPU."""
    ran = child.ChildRun(0, 1.0, False, ["RESULT " + json.dumps(values)])
    monkeypatch.setattr(child, "run_python", lambda script, **kwargs: ran)
    monkeypatch.setattr(ch06, "require_cuda", lambda what: None)
    monkeypatch.setattr(devicegraphs, "require", lambda feature: None)
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")


def _queue(items=41, kinds=3, runs=None, **changes):
    return {"items": items, "kinds": kinds, "runs": items if runs is None else runs, "seconds": 0.001, "past_end": 0,
            "wrong": [], "wrong_kinds": [], "never": 0, "first_never": -1, "repeated": 0, **changes}


@pytest.mark.parametrize("report, detail, hint", [
    (_queue(past_end=2), "past the end of the queue", "i >= n_items"),
    (_queue(never=40, first_never=1), "never handled", "tail-launch"),
    (_queue(wrong=[3], wrong_kinds=[[2, 0]]), "item 3 of kind 2 went to graph 0", "handlers[kinds[i]]"),
    (_queue(repeated=5), "more than once", "advance *next"),
    (_queue(runs=1), "launched 1 times for 41 items", "no loop inside the kernel"),
], ids=["past-the-end", "never", "wrong-kind", "repeated", "looped-in-one-run"])
def test_scheduler_verdicts_name_the_mistake(monkeypatch, report, detail, hint):
    _reported(monkeypatch, queues=[_queue(items=1, runs=1), report])
    verdict = ch06.check_scheduler(lambda: "source", seed=1)
    assert not verdict and detail in verdict.detail and hint in verdict.hint, verdict


def test_scheduler_passes_one_or_one_extra_run_per_item(monkeypatch):
    _reported(monkeypatch, queues=[_queue(items=1, runs=2), _queue(items=9), _queue(items=301, runs=302)])
    assert ch06.check_scheduler(lambda: "source", seed=1)


def _solve(steps=18, runs=None, yours=None, interval=(1.0, 3.0)):
    expected = (2.0945510864257812, 2.0945587158203125, 18)
    return {"interval": interval, "tol": 1e-5, "max_steps": 64, "expected": expected,
            "yours": expected[:2] + (steps,) if yours is None else yours, "runs": steps if runs is None else runs}


@pytest.mark.parametrize("report, detail, hint", [
    (_solve(steps=1, runs=1), "ran once", "cudaStreamGraphTailLaunch"),
    (_solve(runs=1), "18 steps in 1 launch", "no loop inside the kernel"),
    (_solve(steps=17), "17 steps, the host-driven loop 18", "tested after the step"),
    (_solve(yours=(2.0, 2.1, 18)), "differs from the host loop", "bisect_step"),
    (_solve(runs=25), "launched 25 times for 18 steps", "one step"),
], ids=["ran-once", "looped-in-one-launch", "steps", "interval", "extra-launches"])
def test_tail_loop_verdicts_name_the_mistake(monkeypatch, report, detail, hint):
    _reported(monkeypatch, cases=[report])
    verdict = ch06.check_tail_loop(lambda: "source", seed=1)
    assert not verdict and detail in verdict.detail and hint in verdict.hint, verdict


def test_tail_loop_passes_a_test_first_loop_and_needs_every_solve(monkeypatch):
    _reported(monkeypatch, cases=[_solve(runs=19), _solve(), _solve(), _solve()])
    assert ch06.check_tail_loop(lambda: "source", seed=1)
    _reported(monkeypatch, cases=[_solve()])
    assert not ch06.check_tail_loop(lambda: "source", seed=1)
