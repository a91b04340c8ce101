"""Lab 05's mutation suite for exercise 4 (its schedule is checked on a CPU; the GPU measures it too)."""

import heapq

from launchlab.checkers import ch05
from mutants import Answer, judge


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
]


def test_lab05_exercise4_schedule(monkeypatch, capsys):
    import torch

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # The schedules are judged here; on a GPU the checker would also capture and time each one, which the GPU
    # tier's run of solution 05 covers.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    wrong = judge("lab 05, exercise 4: choose the branches", ch05.check_assignment, SCHEDULE_ANSWERS, trials=3)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
