"""Lab 05's mutation suite: exercises 1-3 on a GPU (the graphs are read back from the driver; which fork or join
mistake a graph's edges betray is checked on a CPU too) and exercise 4, whose schedule is checked on a CPU."""

import heapq

import pytest

from launchlab import graphs
from launchlab.chapters.ch05 import checkers as ch05
from mutants import Answer, judge, suite, without_cuda


def longest_first(durations, branches):
    loads, assignment = [0.0] * branches, [[] for _ in range(branches)]
    for i in sorted(range(len(durations)), key=lambda i: -durations[i]):
        target = loads.index(min(loads))
        assignment[target].append(i)
        loads[target] += durations[i]
    return assignment


def longest_first_with_a_heap(durations, branches):
    """Right, written differently: a heap of (load, branch), tasks by decreasing duration."""
    heap = [(0.0, b) for b in range(branches)]
    assignment = [[] for _ in range(branches)]
    for duration, i in sorted(((d, i) for i, d in enumerate(durations)), reverse=True):
        load, b = heapq.heappop(heap)
        assignment[b].append(i)
        heapq.heappush(heap, (load + duration, b))
    return assignment


def in_the_order_given(durations, branches):
    loads, assignment = [0.0] * branches, [[] for _ in range(branches)]
    for i, d in enumerate(durations):
        target = loads.index(min(loads))
        assignment[target].append(i)
        loads[target] += d
    return assignment


def shortest_first(durations, branches):
    loads, assignment = [0.0] * branches, [[] for _ in range(branches)]
    for i in sorted(range(len(durations)), key=lambda i: durations[i]):
        target = loads.index(min(loads))
        assignment[target].append(i)
        loads[target] += durations[i]
    return assignment


def round_robin(durations, branches):
    return [list(range(b, len(durations), branches)) for b in range(branches)]


def equal_counts_in_order(durations, branches):
    per = -(-len(durations) // branches)
    return [list(range(b * per, min((b + 1) * per, len(durations)))) for b in range(branches)]


def filled_up_to_the_average(durations, branches):
    """Longest first, each on the first branch it fits under the average load, else the least loaded one."""
    limit, loads, assignment = sum(durations) / branches, [0.0] * branches, [[] for _ in range(branches)]
    for i in sorted(range(len(durations)), key=lambda i: -durations[i]):
        fits = [b for b in range(branches) if loads[b] + durations[i] <= limit]
        target = fits[0] if fits else loads.index(min(loads))
        assignment[target].append(i)
        loads[target] += durations[i]
    return assignment


def positions_in_a_sorted_copy(durations, branches):
    """Longest first onto the least loaded branch, but the indices are positions in a sorted copy."""
    return in_the_order_given(sorted(durations, reverse=True), branches)


LAB_SCHEDULE = longest_first(ch05.DURATIONS_US, ch05.BRANCHES)

SCHEDULE_ANSWERS = [
    Answer("longest first, least loaded branch", "right", longest_first),
    Answer("longest first with a heap", "right", longest_first_with_a_heap),
    Answer("least loaded branch, tasks in the order given", "classic", in_the_order_given),
    Answer("round robin", "classic", round_robin),
    Answer("shortest first", "method", shortest_first),
    Answer("equal task counts, in order", "method", equal_counts_in_order),
    Answer("the lab's schedule typed in", "hard-coded", lambda durations, branches: LAB_SCHEDULE),
    Answer("everything on one branch", "structure", lambda durations, branches: [list(range(len(durations)))]),
    Answer("one branch per task", "structure", lambda durations, branches: [[i] for i in range(len(durations))]),
    Answer("durations instead of indices", "unit",
           lambda durations, branches: [[durations[i] for i in b] for b in longest_first(durations, branches)]),
    Answer("a task placed twice", "bad value",
           lambda durations, branches: [b + [0] if k == 1 else b for k, b in enumerate(longest_first(durations, branches))]),
    Answer("returns None", "bad value", lambda durations, branches: None),
    Answer("branches filled up to the average load (found by a blind attack)", "method", filled_up_to_the_average),
    Answer("indices of a sorted copy (found by a blind attack)", "structure", positions_in_a_sorted_copy),
]


SUITE_SCHEDULE = suite("05", 4, ch05.check_assignment, SCHEDULE_ANSWERS, call=without_cuda, part="schedule")


@pytest.mark.exercise("05", 4)
def test_lab05_exercise4_schedule(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_SCHEDULE.lab, SUITE_SCHEDULE.number, SUITE_SCHEDULE.checker, SUITE_SCHEDULE.answers,
                  call=SUITE_SCHEDULE.call, trials=3, part=SUITE_SCHEDULE.part)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("05", 4)
def test_lab05_exercise4_a_mistake_in_the_indices_is_told_so(monkeypatch, capsys):
    """Indices that are not the tasks' own get a hint on indices, not the exercise's hint on balancing loads."""
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    for answer in (positions_in_a_sorted_copy, SCHEDULE_ANSWERS[9].fn):
        verdict = without_cuda(ch05.check_assignment, answer)
        assert not verdict and "positions in `durations` as given" in verdict.hint, verdict
    verdict = without_cuda(ch05.check_assignment, SCHEDULE_ANSWERS[8].fn)
    assert not verdict and "at most `branches` lists" in verdict.hint, verdict
    capsys.readouterr()


def _longest_first_round_robin(durations, branches):
    order = sorted(range(len(durations)), key=lambda i: -durations[i])
    return [order[b::branches] for b in range(branches)]


ORDER_RULES = {"tasks in the order given": in_the_order_given, "shortest first": shortest_first,
               "round robin in the order given": round_robin, "equal counts in order": equal_counts_in_order,
               "longest first, but round robin": _longest_first_round_robin}


@pytest.mark.exercise("05", 4)
@pytest.mark.parametrize("name", list(ORDER_RULES))
def test_lab05_exercise4_no_rule_passes_by_the_order_of_the_tasks(monkeypatch, capsys, name):
    """Over 300 draws of the made-up tasks, every rule that follows the order given (or a sort that is not the
    longest first onto the least loaded branch) is caught, and the right rule passes every draw."""
    from launchlab import checking

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(checking, "_record", lambda declared, verdict: None)
    passed = [seed for seed in range(300) if without_cuda(
        lambda fn, seed=seed: ch05.check_assignment(fn, seed=seed), ORDER_RULES[name])]
    assert not passed, f"{name} passed {len(passed)} of 300 draws"
    failed = [seed for seed in range(300) if not without_cuda(
        lambda fn, seed=seed: ch05.check_assignment(fn, seed=seed), longest_first)]
    assert not failed, f"longest first failed {len(failed)} of 300 draws"
    capsys.readouterr()


# ---- exercise 1: capture a diamond across two streams (PyTorch) --------------------------------------------


def torch_diamond(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = x + 1
        side.wait_stream(torch.cuda.current_stream())
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        out = b + c
    return graph, out


def torch_diamond_with_events(x):
    """Right, written differently: fork and join with events, b on the side stream and c on the capturing one."""
    import torch

    side, fork, join = torch.cuda.Stream(), torch.cuda.Event(), torch.cuda.Event()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        main = torch.cuda.current_stream()
        a = x + 1
        fork.record(main)
        side.wait_event(fork)
        with torch.cuda.stream(side):
            b = a * 2
        c = a * 3
        join.record(side)
        main.wait_event(join)
        out = b + c
    return graph, out


def torch_on_one_stream(x):
    import torch

    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = x + 1
        b = a * 2
        c = a * 3
        out = b + c
    return graph, out


def torch_never_joined(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = x + 1
        side.wait_stream(torch.cuda.current_stream())
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        out = b + c
    return graph, out


def torch_never_forked(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = x + 1
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        out = b + c
    return graph, out


def torch_forked_before_a(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        side.wait_stream(torch.cuda.current_stream())
        a = x + 1
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        out = b + c
    return graph, out


def torch_sum_after_the_capture(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = x + 1
        side.wait_stream(torch.cuda.current_stream())
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
    return graph, b + c


def torch_answer_typed_in(x):
    import torch

    graph, _ = torch_diamond(x)
    return graph, torch.full_like(x, 5.0)  # what the first replay from zeros gives


def torch_in_half_precision(x):
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        a = (x + 1).half()
        side.wait_stream(torch.cuda.current_stream())
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        out = b + c
    return graph, out


def torch_graph_not_kept(x):
    import torch

    graph, out = torch.cuda.CUDAGraph(), None
    side = torch.cuda.Stream()
    with torch.cuda.graph(graph):
        a = x + 1
        side.wait_stream(torch.cuda.current_stream())
        b = a * 2
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        out = b + c
    return graph, out


TORCH_ANSWERS = [
    Answer("wait_stream fork and join (the solution)", "right", torch_diamond),
    Answer("events, b on the side stream", "right", torch_diamond_with_events),
    Answer("everything on one stream", "classic", torch_on_one_stream),
    Answer("forked before a was computed", "classic", torch_forked_before_a),
    Answer("the side stream never joined", "method", torch_never_joined),
    Answer("the side stream never forked", "method", torch_never_forked),
    Answer("CUDAGraph() without keep_graph", "method", torch_graph_not_kept),
    Answer("out = b + c after the capture", "structure", torch_sum_after_the_capture),
    Answer("the first replay's answer typed in", "hard-coded", torch_answer_typed_in),
    Answer("a computed in half precision", "unit", torch_in_half_precision),
    Answer("the output left out", "bad value", lambda x: (torch_diamond(x)[0], None)),
    Answer("the graph alone returned", "bad value", lambda x: torch_diamond(x)[0]),
]
SUITE_TORCH = suite("05", 1, ch05.check_torch_diamond, TORCH_ANSWERS)


@pytest.mark.exercise("05", 1)
@pytest.mark.gpu
def test_lab05_exercise1_torch_diamond(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_TORCH.lab, SUITE_TORCH.number, SUITE_TORCH.checker, SUITE_TORCH.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "one stream" in ch05.check_torch_diamond(torch_on_one_stream).hint
    assert "after a = x + 1" in ch05.check_torch_diamond(torch_forked_before_a).hint
    assert "rejoin" in ch05.check_torch_diamond(torch_never_joined).hint
    assert "did not change" in ch05.check_torch_diamond(torch_answer_typed_in).hint


def _next_stream_is_the_capture_stream(torch) -> bool:
    """Draw torch.cuda.Stream() until the next draw returns torch.cuda.graph's capture stream; False if none does."""
    torch.cuda.graph(torch.cuda.CUDAGraph())   # makes torch.cuda.graph's default capture stream if none exists yet
    capture = torch.cuda.graph.default_capture_stream
    for _ in range(64):   # torch hands out a pool of its streams in turn: find where the capture stream sits
        if torch.cuda.Stream() == capture:
            break
    else:
        return False
    turn = next(n for n in range(1, 65) if torch.cuda.Stream() == capture)   # the pool's length, counted
    for _ in range(turn - 1):
        torch.cuda.Stream()
    return True


@pytest.mark.exercise("05", 1)
@pytest.mark.gpu
def test_lab05_exercise1_a_side_stream_that_is_the_capture_stream_is_no_wrong_answer(monkeypatch):
    """The right answer whose torch.cuda.Stream() returns the very stream torch.cuda.graph captures on (one call in
    32) captures a chain by itself; under the checker, which gives torch.cuda.graph a capture stream of its own, it
    passes, a wrong one still fails, and torch.cuda.graph's own capture stream is put back."""
    import torch

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    if not _next_stream_is_the_capture_stream(torch):
        pytest.skip("torch.cuda.graph's capture stream is not one that torch.cuda.Stream() hands out here")
    graph, _ = torch_diamond(torch.zeros(ch05.N, device="cuda"))
    assert graphs.topology(graph).is_chain()   # the collision is real: the right fork was captured as a chain
    before = torch.cuda.graph.default_capture_stream
    assert _next_stream_is_the_capture_stream(torch)
    verdict = ch05.check_torch_diamond(torch_diamond)
    assert verdict, verdict.detail
    assert torch.cuda.graph.default_capture_stream is before
    assert _next_stream_is_the_capture_stream(torch)
    never = ch05.check_torch_diamond(torch_never_joined)
    assert not never and "rejoin" in never.hint


# ---- exercise 2: repair an unjoined capture (CuPy) ---------------------------------------------------------


def cupy_capture(origin, side, x, y, z, out, c_on="side", fork_after_a=True, join="before d", fork=True,
                 d_args=None, threads=None):
    """A learner's capture_joined, with one thing changed (the defaults are the solution)."""
    import cupy as cp

    k, n = ch05.stage_kernels(), cp.int32(x.size)
    block = (threads or x.size,)
    c_stream = side if c_on == "side" else origin
    with origin:
        origin.begin_capture()
        forked = cp.cuda.Event()
        if not fork_after_a:
            forked.record(origin)
        k["a"]((1,), block, (x, n), stream=origin)
        if fork_after_a:
            forked.record(origin)
        if fork:
            side.wait_event(forked)
        k["b"]((1,), block, (x, y, n), stream=origin)
        k["c"]((1,), block, (x, z, n), stream=c_stream)
        joined = cp.cuda.Event()
        if join == "before d":
            joined.record(side)
            origin.wait_event(joined)
        k["d"]((1,), block, d_args or (y, z, out, n), stream=origin)
        if join == "after d":
            joined.record(side)
            origin.wait_event(joined)
        return origin.end_capture()


def cupy_mirrored(origin, side, x, y, z, out):
    """Right, written differently: stage_b on the side stream, stage_c on the origin."""
    import cupy as cp

    k, n = ch05.stage_kernels(), cp.int32(x.size)
    with origin:
        origin.begin_capture()
        k["a"]((1,), (x.size,), (x, n), stream=origin)
        after_a = cp.cuda.Event()
        after_a.record(origin)
        side.wait_event(after_a)
        k["b"]((1,), (x.size,), (x, y, n), stream=side)
        k["c"]((1,), (x.size,), (x, z, n), stream=origin)
        b_done = cp.cuda.Event()
        b_done.record(side)
        origin.wait_event(b_done)
        k["d"]((1,), (x.size,), (y, z, out, n), stream=origin)
        graph = origin.end_capture()
    return graph


def cupy_own_buffers(origin, side, x, y, z, out):
    import cupy as cp

    mine = [cp.zeros_like(x) for _ in range(3)]
    return cupy_capture(origin, side, x, *mine)


def cupy_forgot_return(origin, side, x, y, z, out):
    cupy_capture(origin, side, x, y, z, out)


JOIN_ANSWERS = [
    Answer("join event before stage_d (the solution)", "right", cupy_capture),
    Answer("mirrored: stage_b on the side stream", "right", cupy_mirrored),
    Answer("the capture as given (never joined)", "classic", ch05.capture_unjoined),
    Answer("no fork: stage_c on the origin", "structure",
           lambda o, s, x, y, z, out: cupy_capture(o, s, x, y, z, out, c_on="origin", fork=False, join=None)),
    Answer("the join after stage_d", "method", lambda o, s, x, y, z, out: cupy_capture(o, s, x, y, z, out, join="after d")),
    Answer("the fork recorded before stage_a", "method",
           lambda o, s, x, y, z, out: cupy_capture(o, s, x, y, z, out, fork_after_a=False)),
    Answer("stage_c on a side stream that never waited", "classic",
           lambda o, s, x, y, z, out: cupy_capture(o, s, x, y, z, out, fork=False)),
    Answer("new buffers made for y, z and out", "hard-coded", cupy_own_buffers),
    Answer("stage_d given y twice", "unit", lambda o, s, x, y, z, out: cupy_capture(
        o, s, x, y, z, out, d_args=(y, y, out, __import__("cupy").int32(x.size)))),
    Answer("half the threads", "unit", lambda o, s, x, y, z, out: cupy_capture(o, s, x, y, z, out, threads=x.size // 2)),
    Answer("the graph not returned", "bad value", cupy_forgot_return),
]
SUITE_JOIN = suite("05", 2, ch05.check_joined, JOIN_ANSWERS)


@pytest.mark.exercise("05", 2)
@pytest.mark.gpu
def test_lab05_exercise2_joined(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_JOIN.lab, SUITE_JOIN.number, SUITE_JOIN.checker, SUITE_JOIN.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "rejoin" in ch05.check_joined(ch05.capture_unjoined).hint
    assert "stage_d must wait" in ch05.check_joined(JOIN_ANSWERS[4].fn).hint
    assert "after stage_a" in ch05.check_joined(JOIN_ANSWERS[5].fn).hint


# ---- exercise 3: build the diamond with the explicit API (cuda.core) ----------------------------------------


def explicit_diamond(kernel, config, x, y, z, out, n, wire="pred.add"):
    """A learner's build_diamond (the default wiring is the solution's)."""
    from cuda.core.graph import GraphDefinition

    definition = GraphDefinition()
    a = definition.launch(config, kernel["a"], x.data.ptr, n)
    b = a.launch(config, kernel["b"], x.data.ptr, y.data.ptr, n)
    c = {"c first": definition, "chain": b}.get(wire, a).launch(config, kernel["c"], x.data.ptr, z.data.ptr, n)
    d_args = (config, kernel["d"], y.data.ptr, z.data.ptr, out.data.ptr, n)
    if wire == "join":
        definition.join(b, c).launch(*d_args)
    elif wire == "chain":
        c.launch(*d_args)
    else:
        d = b.launch(*d_args)
        if wire in ("pred.add", "c first"):
            d.pred.add(c)
        elif wire == "a too":
            d.pred.add(c)
            d.pred.add(a)
    return definition


def explicit_by_pred_sets(kernel, config, x, y, z, out, n):
    """Right, written differently: four entry nodes, then each node's predecessors set at once."""
    from cuda.core.graph import GraphDefinition

    definition = GraphDefinition()
    a = definition.launch(config, kernel["a"], x.data.ptr, n)
    b = definition.launch(config, kernel["b"], x.data.ptr, y.data.ptr, n)
    c = definition.launch(config, kernel["c"], x.data.ptr, z.data.ptr, n)
    d = definition.launch(config, kernel["d"], y.data.ptr, z.data.ptr, out.data.ptr, n)
    b.pred = {a}
    c.pred = {a}
    d.pred = {b, c}
    return definition


def explicit_own_buffers(kernel, config, x, y, z, out, n):
    import cupy as cp

    mine = [cp.zeros_like(x) for _ in range(3)]
    explicit_own_buffers.keep = mine  # alive while the graph runs
    return explicit_diamond(kernel, config, x, *mine, n)


def explicit_d_reads_y_twice(kernel, config, x, y, z, out, n):
    from cuda.core.graph import GraphDefinition

    definition = GraphDefinition()
    a = definition.launch(config, kernel["a"], x.data.ptr, n)
    b = a.launch(config, kernel["b"], x.data.ptr, y.data.ptr, n)
    c = a.launch(config, kernel["c"], x.data.ptr, z.data.ptr, n)
    d = b.launch(config, kernel["d"], y.data.ptr, y.data.ptr, out.data.ptr, n)
    d.pred.add(c)
    return definition


EXPLICIT_ANSWERS = [
    Answer("node.launch chain plus pred.add (the solution)", "right", explicit_diamond),
    Answer("entry nodes, pred sets assigned", "right", explicit_by_pred_sets),
    Answer("join() before stage_d", "classic", lambda *args: explicit_diamond(*args, wire="join")),
    Answer("stage_d waits for stage_b only", "classic", lambda *args: explicit_diamond(*args, wire="b only")),
    Answer("stage_c an entry node", "method", lambda *args: explicit_diamond(*args, wire="c first")),
    Answer("stage_d also waits for stage_a", "method", lambda *args: explicit_diamond(*args, wire="a too")),
    Answer("a chain a-b-c-d", "structure", lambda *args: explicit_diamond(*args, wire="chain")),
    Answer("new buffers made for y, z and out", "hard-coded", explicit_own_buffers),
    Answer("stage_d given y twice", "unit", explicit_d_reads_y_twice),
    Answer("the executable graph returned", "bad value", lambda *args: explicit_diamond(*args).instantiate()),
    Answer("returns None", "bad value", lambda *args: None),
]
SUITE_EXPLICIT = suite("05", 3, ch05.check_explicit_diamond, EXPLICIT_ANSWERS)


@pytest.mark.exercise("05", 3)
@pytest.mark.gpu
def test_lab05_exercise3_explicit_diamond(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_EXPLICIT.lab, SUITE_EXPLICIT.number, SUITE_EXPLICIT.checker, SUITE_EXPLICIT.answers,
                  trials=2)
    assert not wrong, "\n".join(wrong)
    assert "EMPTY" in ch05.check_explicit_diamond(EXPLICIT_ANSWERS[2].fn).detail.upper()
    assert "pred.add" in ch05.check_explicit_diamond(EXPLICIT_ANSWERS[2].fn).hint


# ---- on a CPU: the diamond's mistakes told apart from its edges ---------------------------------------------


def _shape(edges, names=("stage_a", "stage_b", "stage_c", "stage_d"), kinds=None):
    from launchlab.graphs import Topology

    return Topology(tuple(kinds or ("KERNEL",) * len(names)), tuple(sorted(edges)), tuple(names))


@pytest.mark.parametrize("edges, hint", [
    ([(0, 1), (1, 2), (2, 3)], "one stream"),
    ([(0, 1), (1, 3), (2, 3)], "fork"),
    ([(0, 1), (0, 2), (1, 3)], "stage_d must wait"),
], ids=["chain", "forked-too-early", "joined-too-late"])
def test_diamond_mistakes_are_named_from_the_edges(edges, hint):
    wrong, named = ch05._diamond_problem(_shape(edges))
    assert hint in named and "depends on" in wrong
    assert ch05._diamond_problem(_shape([(0, 1), (0, 2), (1, 3), (2, 3)])) is None


def test_an_extra_empty_node_and_torch_shapes_are_named():
    with_join = _shape([(0, 1), (0, 2), (1, 4), (2, 4), (4, 3)],
                       names=("stage_a", "stage_b", "stage_c", "stage_d", "empty"),
                       kinds=("KERNEL",) * 4 + ("EMPTY",))
    assert "pred.add" in ch05._diamond_problem(with_join)[1]
    same = ("k",) * 4
    assert "one stream" in ch05._diamond_diagnosis(_shape([(0, 1), (1, 2), (2, 3)], names=same))
    assert "after a = x + 1" in ch05._diamond_diagnosis(_shape([(0, 1), (1, 3), (2, 3)], names=same))
    assert "exactly the four" in ch05._diamond_diagnosis(_shape([(0, 1), (1, 2)], names=("k",) * 3))
