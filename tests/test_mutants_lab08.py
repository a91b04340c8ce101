"""Lab 08's mutation suite: exercises 1 and 3 on two gloo ranks on a CPU, exercise 2 on two NCCL ranks (two GPUs).

The checkers run each answer's source in the ranks, so every answer here is a self-contained `def` that uses
only what the ranks import (torch, dist, funcol). To keep the rank start-ups few, the answers to an exercise meet
one pair of ranks in turn (`ch08.judged_together`); an answer that makes the ranks disagree about their
collectives stops a shared run, so those are judged alone.
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from launchlab import rank_checks
from launchlab.chapters.ch08 import checkers as ch08
from launchlab.env import gpu_count
from mutants import Answer, judge, suite


def _judged_together(number, checker, together, alone=()):
    """The mutation table's verdicts on exercise `number`, the answers in `together` from one run of the ranks; and
    the checker's verdict on each of them by function name (read from that run, not run again)."""
    with ch08.judged_together(checker, [a.fn for a in together]):
        wrong = judge("08", number, checker, [*together, *alone])
        verdicts = {a.fn.__name__: checker(a.fn) for a in together}
    return wrong, verdicts


# ---- exercise 1: a functional all-reduce ----------------------------------------------------------------------


def all_reduce_functional(x):
    return funcol.all_reduce(x, "sum", dist.group.WORLD)


def over_a_rank_list(x):
    """Right, written differently: the group as a list of ranks, keyword arguments."""
    return funcol.all_reduce(x, reduceOp="sum", group=list(range(dist.get_world_size())))


def waited_for(x):
    """Right, written differently: the result waited for explicitly."""
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))


def gathered_then_summed(x):
    """Right, written differently: every rank's x gathered, then added up."""
    gathered = funcol.all_gather_tensor(x, 0, dist.group.WORLD)
    return gathered.view(dist.get_world_size(), *x.shape).sum(dim=0)


def in_place(x):  # the eager habit: dynamo may trace it, but it writes over the caller's tensor
    dist.all_reduce(x)
    return x


def copied_back(x):  # functional, then written back into x
    x.copy_(funcol.all_reduce(x, "sum", dist.group.WORLD))
    return x


def behind_disable(x):  # the lecture's starting point: a graph break at every call
    @torch._dynamo.disable
    def hidden(t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    return hidden(x)


def averaged(x):
    return funcol.all_reduce(x, "avg", dist.group.WORLD)


def the_largest(x):
    return funcol.all_reduce(x, "max", dist.group.WORLD)


def reduced_copy_dropped(x):  # the collective runs on a copy, and x goes back unchanged
    t = x.clone()
    dist.all_reduce(t)
    return x


def twice_mine(x):  # two ranks holding the same x: a sum that never talks to the other rank
    return x * 2


def not_returned(x):
    funcol.all_reduce(x, "sum", dist.group.WORLD)


def rank_zero_only(x):  # the collective on one rank: the other never meets it (last: it leaves the ranks out of step)
    if dist.get_rank() == 0:
        return funcol.all_reduce(x, "sum", dist.group.WORLD)
    return x.clone()


FUNCTIONAL_ANSWERS = [
    Answer("funcol.all_reduce over the world group (the course's)", "right", all_reduce_functional),
    Answer("over a list of ranks", "right", over_a_rank_list),
    Answer("waited for explicitly", "right", waited_for),
    Answer("all-gather, then sum", "right", gathered_then_summed),
    Answer("dist.all_reduce in place", "classic", in_place),
    Answer("the collective behind torch._dynamo.disable", "structure", behind_disable),
    Answer("the result copied back into x", "structure", copied_back),
    Answer("'avg': the mean, not the sum", "unit", averaged),
    Answer("'max' instead of 'sum'", "classic", the_largest),
    Answer("the all-reduce on a copy, x returned", "method", reduced_copy_dropped),
    Answer("x * 2, the world size typed in", "hard-coded", twice_mine),
    Answer("the result not returned", "bad value", not_returned),
    Answer("the all-reduce on rank 0 only (found by a blind attack)", "structure", rank_zero_only),
]
SUITE_FUNCTIONAL = suite("08", 1, ch08.check_functional_all_reduce, FUNCTIONAL_ANSWERS)


@pytest.mark.exercise("08", 1)
def test_lab08_exercise1_functional_all_reduce(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong, verdicts = _judged_together(SUITE_FUNCTIONAL.number, SUITE_FUNCTIONAL.checker, SUITE_FUNCTIONAL.answers)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "in place" in verdicts["in_place"].detail and "leave x alone" in verdicts["in_place"].hint
    assert "breaks over 4 all-reduces" in verdicts["behind_disable"].detail
    assert "mean over ranks" in verdicts["averaged"].detail and "sum" in verdicts["averaged"].hint
    assert "forgot" in verdicts["not_returned"].hint or "returns None" in verdicts["not_returned"].hint
    skipped = verdicts["rank_zero_only"]
    assert "never met rank 0" in skipped.detail and "same collective calls" in skipped.hint, skipped


# ---- exercise 3: symmetric clipping ---------------------------------------------------------------------------


def clip_by_global_norm(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    grad.mul_((max_norm / (total + 1e-6)).clamp(max=1.0))
    return grad


def decided_on_the_host(grad, max_norm, all_reduce):
    """Right, written differently: a Python if on the global norm (a host sync, but the same on every rank)."""
    total = all_reduce(grad.pow(2).sum(), "squared norm").sqrt()
    if total > max_norm:
        grad.mul_(max_norm / total)
    return grad


def with_dist_directly(grad, max_norm, all_reduce):
    """Right, written differently: dist.all_reduce on a one-element tensor, an in-place operator."""
    squared = grad.square().sum().reshape(1)
    dist.all_reduce(squared)
    total = squared.sqrt()
    if total > max_norm:
        grad *= max_norm / total
    return grad


def lecture_asymmetric(grad, max_norm, all_reduce):  # only a rank over the limit all-reduces
    local = grad.norm()
    if local > max_norm:
        total = all_reduce(local ** 2, "squared norm").sqrt()
        grad.mul_(max_norm / total)
    return grad


def rank_zero_decides(grad, max_norm, all_reduce):  # one rank all-reduces, the other goes on
    if dist.get_rank() == 0:
        total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
        if total > max_norm:
            grad.mul_(max_norm / total)
    return grad


def global_norm_local_decision(grad, max_norm, all_reduce):  # symmetric collective, local decision
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    if grad.norm() > max_norm:
        grad.mul_(max_norm / total)
    return grad


def own_norm_only(grad, max_norm, all_reduce):  # no collective at all
    local = grad.norm()
    if local > max_norm:
        grad.mul_(max_norm / local)
    return grad


def norms_added(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm(), "norm")
    if total > max_norm:
        grad.mul_(max_norm / total)
    return grad


def square_root_missing(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm() ** 2, "squared norm")
    if total > max_norm:
        grad.mul_(max_norm / total)
    return grad


def squared_norm_against_the_limit(grad, max_norm, all_reduce):  # decides on the square, scales by the norm
    squared = all_reduce(grad.norm() ** 2, "squared norm")
    if squared > max_norm:
        grad.mul_(max_norm / squared.sqrt())
    return grad


def squares_averaged(grad, max_norm, all_reduce):
    total = (all_reduce(grad.norm() ** 2, "squared norm") / dist.get_world_size()).sqrt()
    if total > max_norm:
        grad.mul_(max_norm / total)
    return grad


def only_rank_zero_scales(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    if total > max_norm and dist.get_rank() == 0:
        grad.mul_(max_norm / total)
    return grad


def new_tensor_returned(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    return grad * (max_norm / total) if total > max_norm else grad


def equal_ranks_assumed(grad, max_norm, all_reduce):  # every rank's norm taken to be this one's
    total = grad.norm() * 2 ** 0.5
    if total > max_norm:
        grad.mul_(max_norm / total)
    return grad


def clipped_past_a_slack(grad, max_norm, all_reduce):
    """Found by a blind attack: clipped only once the global norm is over max_norm + 0.01 (0.2% here)."""
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    if total > max_norm + 0.01:
        grad.mul_(max_norm / total)
    return grad


def gradient_all_reduced_too(grad, max_norm, all_reduce):
    """Found by a blind attack: the scale right, then the gradient itself all-reduced as well."""
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    all_reduce(grad, "grad")
    grad.mul_((max_norm / total).clamp(max=1.0))
    return grad


def clipped_not_returned(grad, max_norm, all_reduce):
    total = all_reduce(grad.norm() ** 2, "squared norm").sqrt()
    if total > max_norm:
        grad.mul_(max_norm / total)


CLIP_TOGETHER = [
    Answer("the squared norm all-reduced first, a clamped scale (the course's)", "right", clip_by_global_norm),
    Answer("a Python if on the global norm", "right", decided_on_the_host),
    Answer("dist.all_reduce directly", "right", with_dist_directly),
    Answer("global norm, but each rank decides from its own", "classic", global_norm_local_decision),
    Answer("each rank's own norm, no collective", "classic", own_norm_only),
    Answer("the norms added, not their squares", "unit", norms_added),
    Answer("no square root", "unit", square_root_missing),
    Answer("the squared norm compared with the limit", "unit", squared_norm_against_the_limit),
    Answer("the squared norms averaged", "method", squares_averaged),
    Answer("only rank 0 scales", "structure", only_rank_zero_scales),
    Answer("a new tensor returned, grad unchanged", "structure", new_tensor_returned),
    Answer("the norm times sqrt(2), every rank assumed equal", "hard-coded", equal_ranks_assumed),
    Answer("the gradient not returned", "bad value", clipped_not_returned),
    Answer("clipped only past a slack of 0.01", "method", clipped_past_a_slack),
    Answer("the gradient itself all-reduced too", "structure", gradient_all_reduced_too),
]
CLIP_ALONE = [  # the ranks disagree about their collectives: each stops the run it is in
    Answer("the lecture's: only a rank over the limit all-reduces", "classic", lecture_asymmetric),
    Answer("rank 0 alone all-reduces", "structure", rank_zero_decides),
]
SUITE_CLIP_TOGETHER = suite("08", 3, ch08.check_symmetric_clip, CLIP_TOGETHER, part="ranks agree")
SUITE_CLIP_ALONE = suite("08", 3, ch08.check_symmetric_clip, CLIP_ALONE, part="ranks disagree")


@pytest.mark.exercise("08", 3)
def test_lab08_exercise3_symmetric_clip(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong, verdicts = _judged_together(SUITE_CLIP_TOGETHER.number, SUITE_CLIP_TOGETHER.checker,
                                       SUITE_CLIP_TOGETHER.answers, SUITE_CLIP_ALONE.answers)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "own norm" in verdicts["own_norm_only"].hint
    assert "own norm" in verdicts["global_norm_local_decision"].hint
    assert "same scale" in verdicts["only_rank_zero_scales"].hint
    assert "squared norms" in verdicts["norms_added"].hint
    assert "square root" in verdicts["square_root_missing"].hint
    assert "in place" in verdicts["new_tensor_returned"].hint
    assert "2 collectives (squared norm, grad)" in verdicts["gradient_all_reduced_too"].hint


# ---- exercise 2: an all-reduce in a CUDA graph (two GPUs) -----------------------------------------------------


def capture_mean(x, steps):
    world = dist.get_world_size()

    def step():
        for _ in range(steps):
            dist.all_reduce(x)
            x.div_(world)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_mean_scaled(x, steps):
    """Right, written differently: warmed up on the current stream and synchronised, a multiplication by 1/world."""
    scale = 1.0 / dist.get_world_size()

    def step():
        for _ in range(steps):
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            x.mul_(scale)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_sum(x, steps):  # forgets the division: the sum, not the mean
    def step():
        for _ in range(steps):
            dist.all_reduce(x)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_one_round(x, steps):  # `steps` ignored: the mean once, the same value, a quarter of the work
    world = dist.get_world_size()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(x)
        x.div_(world)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
        x.div_(world)
    return graph


def capture_half_rounds(x, steps):  # after the first round every rank holds the mean: the value cannot tell
    world = dist.get_world_size()

    def step():
        for _ in range(steps // 2):
            dist.all_reduce(x)
            x.div_(world)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_divided_by_the_power(x, steps):  # all the rounds, then one division by world ** steps: the same value
    world = dist.get_world_size()

    def step():
        for _ in range(steps):
            dist.all_reduce(x)
        x.div_(world ** steps)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_divided_by_two(x, steps):  # the world size typed in: right on two ranks, wrong on one
    def step():
        for _ in range(steps):
            dist.all_reduce(x)
            x.div_(2)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_divided_once(x, steps):  # all the rounds, then one division
    world = dist.get_world_size()

    def step():
        for _ in range(steps):
            dist.all_reduce(x)
        x.div_(world)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_divided_by_steps(x, steps):
    def step():
        for _ in range(steps):
            dist.all_reduce(x)
            x.div_(steps)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def capture_on_a_copy(x, steps):  # the graph reduces its own buffer: x never changes
    world = dist.get_world_size()
    y = x.clone()

    def step():
        for _ in range(steps):
            dist.all_reduce(y)
            y.div_(world)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def collective_left_outside(x, steps):  # the all-reduce runs once, eagerly; the graph only divides
    world = dist.get_world_size()
    for _ in range(steps):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            x.div_(world)
    return graph


def replayed_eagerly(x, steps):  # a "graph" whose replay is the eager loop
    world = dist.get_world_size()

    class EagerMean(torch.cuda.CUDAGraph):
        def replay(self):
            for _ in range(steps):
                dist.all_reduce(x)
                x.div_(world)

    return EagerMean()


def graph_not_returned(x, steps):
    world = dist.get_world_size()
    graph = torch.cuda.CUDAGraph()
    dist.all_reduce(x)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            dist.all_reduce(x)
            x.div_(world)


GRAPHED_ANSWERS = [
    Answer("side-stream warm-up, then the capture (the course's)", "right", capture_mean),
    Answer("warm-up on the current stream, times 1/world", "right", capture_mean_scaled),
    Answer("no division: the sum", "classic", capture_sum),
    Answer("one round, `steps` ignored", "structure", capture_one_round),
    Answer("half the rounds", "structure", capture_half_rounds),
    Answer("one division after all the rounds", "method", capture_divided_once),
    Answer("one division by world ** steps after all the rounds", "method", capture_divided_by_the_power),
    Answer("the world size typed in", "hard-coded", capture_divided_by_two),
    Answer("divided by steps, not by the world size", "unit", capture_divided_by_steps),
    Answer("the graph reduces a copy of x", "structure", capture_on_a_copy),
    Answer("the all-reduce left outside the graph", "method", collective_left_outside),
    Answer("a replay that runs the rounds eagerly", "structure", replayed_eagerly),
    Answer("the graph not returned", "bad value", graph_not_returned),
]
SUITE_GRAPHED = suite("08", 2, ch08.check_graphed_mean, GRAPHED_ANSWERS)


def test_exercise2_on_fewer_than_two_gpus_says_so_in_the_courses_words(monkeypatch, capsys):
    from launchlab.checking import NEEDS_GPU

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(rank_checks, "gpu_count", lambda: 1)  # the ranks' own check, before any starts
    verdict = ch08.check_graphed_mean(GRAPHED_ANSWERS[0].fn)
    capsys.readouterr()
    assert not verdict and NEEDS_GPU in verdict.detail and "has 1;" in verdict.detail, verdict


@pytest.mark.exercise("08", 2)
@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2, reason="needs two CUDA GPUs")
def test_lab08_exercise2_graphed_mean(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong, verdicts = _judged_together(SUITE_GRAPHED.number, SUITE_GRAPHED.checker, SUITE_GRAPHED.answers)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "differs from the mean" in verdicts["capture_sum"].detail
    assert "kernels for 4 rounds" in verdicts["capture_one_round"].detail
    assert "2 NCCL kernels for 4 rounds" in verdicts["capture_half_rounds"].detail
    assert "never your Python" in verdicts["replayed_eagerly"].hint
    assert "near 1.2e38" in verdicts["capture_divided_by_the_power"].detail
    assert "one rank alone" in verdicts["capture_divided_by_two"].detail
