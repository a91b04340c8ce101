"""Lab 11's mutation suite: exercise 1 on two NCCL ranks (two GPUs, Triton), exercise 2 on a CPU.

Exercise 1's checker runs each answer's source, with the Triton kernels it launches, in the ranks: the answers are
wrappers in tests/one_shot_kernels.py around one kernel whose planted mistakes are constexpr switches. They meet
one pair of ranks in turn (`ch11.judged_together`).
"""

import math
import statistics

import numpy as np
import pytest

from launchlab.chapters.ch11 import checkers as ch11
from launchlab.env import gpu_count
from mutants import Answer, judge, suite

# ---- exercise 1: a one-shot all-reduce of your own -------------------------------------------------------------

try:  # Triton comes with CUDA builds of PyTorch, not with the CPU tier's
    import one_shot_kernels as k
except ImportError:
    k = None



def _kernel_answer(name):
    """The wrapper of that name in one_shot_kernels, or, without Triton (the CPU tier), one that says so."""
    if k is not None:
        return getattr(k, name)

    def needs_triton(buffer, handle, out):
        raise ImportError("Triton is not installed: lab 11 exercise 1's answers need a CUDA build of PyTorch")

    needs_triton.__name__ = name
    return needs_triton


ONE_SHOT_ANSWERS = [Answer(label, kind, _kernel_answer(name)) for label, kind, name in [
    ("barriers in and out, a loop over the grid (the course's)", "right", "barriers_in_and_out"),
    ("a program per block of 8,192, no loop", "right", "a_program_per_block"),
    ("peers read without waiting", "classic", "read_without_waiting"),
    ("no wait before returning", "method", "return_without_waiting"),
    ("a signal never consumed", "structure", "signal_left_set"),
    ("its own buffer times the world size", "hard-coded", "own_times_world"),
    ("the mean, not the sum", "unit", "the_mean"),
    ("one block's worth", "structure", "one_block_each"),
    ("no mask at the tail", "bad value", "no_tail_mask"),
    ("the library's all-reduce called instead", "structure", "the_library"),
]]
SUITE_ONE_SHOT = suite("11", 1, ch11.check_one_shot, ONE_SHOT_ANSWERS)


def test_exercise1_on_fewer_than_two_gpus_says_so(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(ch11, "gpu_count", lambda: 1)

    def one_shot_all_reduce(buffer, handle, out):
        raise NotImplementedError

    verdict = ch11.check_one_shot(one_shot_all_reduce)
    capsys.readouterr()
    assert not verdict and "needs a GPU" in verdict.detail and "2 NVIDIA GPUs" in verdict.detail


@pytest.mark.exercise("11", 1)
@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2 or k is None, reason="needs two CUDA GPUs and Triton")
def test_lab11_exercise1_one_shot(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    with ch11.judged_together(ch11.check_one_shot, [a.fn for a in ONE_SHOT_ANSWERS]):
        wrong = judge("11", 1, ch11.check_one_shot, ONE_SHOT_ANSWERS)
        verdicts = {a.fn.__name__: ch11.check_one_shot(a.fn) for a in ONE_SHOT_ANSWERS}
    out = capsys.readouterr().out
    print("\n".join(f"{name}: {'PASS' if v else 'FAIL'} {v.detail}" for name, v in verdicts.items()))
    assert not wrong, "\n".join(wrong) + "\n" + out[-3000:]
    assert "mean" in verdicts["the_mean"].detail
    assert "library" in verdicts["the_library"].detail or "one_shot_all_reduce" in verdicts["the_library"].detail


# ---- exercise 2: the path per message size ----------------------------------------------------------------------

MARGIN = ch11.MARGIN


def fastest_path(samples):
    by_size = {}
    for s in samples:
        if math.isfinite(s["us"]):
            by_size.setdefault(s["bytes"], {}).setdefault(s["path"], []).append(s["us"])
    chosen = {}
    for size, paths in by_size.items():
        medians = {path: statistics.median(us) for path, us in paths.items()}
        best = min(medians, key=medians.get)
        keep = "nccl" in medians and medians[best] > (1 - MARGIN) * medians["nccl"]
        chosen[size] = "nccl" if keep else best
    return chosen


def with_numpy(samples):
    """Right, written differently: numpy's nanmedian, the sizes in sorted order, a ratio test."""
    sizes = sorted({s["bytes"] for s in samples})
    chosen = {}
    for size in sizes:
        paths = sorted({s["path"] for s in samples if s["bytes"] == size})
        medians = {}
        for p in paths:
            us = np.array([s["us"] for s in samples if s["bytes"] == size and s["path"] == p], dtype=float)
            if np.isfinite(us).any():
                medians[p] = float(np.nanmedian(us))
        best = min(medians, key=lambda p: (medians[p], p))
        chosen[size] = best if medians[best] / medians["nccl"] <= 1 - MARGIN else "nccl"
    return chosen


def sorted_by_hand(samples):
    """Right, written differently: the median by sorting, NaN dropped with a self-comparison."""
    groups = {}
    for s in samples:
        if s["us"] == s["us"]:
            groups.setdefault((s["bytes"], s["path"]), []).append(s["us"])
    chosen = {}
    for size in {b for b, _ in groups}:
        medians = {}
        for (b, p), us in groups.items():
            if b == size:
                us = sorted(us)
                mid = len(us) // 2
                medians[p] = us[mid] if len(us) % 2 else (us[mid - 1] + us[mid]) / 2
        winner = min(medians.items(), key=lambda item: item[1])
        chosen[size] = winner[0] if winner[1] <= 0.9 * medians["nccl"] else "nccl"
    return chosen


def _by(rule, keep_nan=False, margin=MARGIN, key=lambda size: size):
    def choose(samples):
        groups = {}
        for s in samples:
            if keep_nan or math.isfinite(s["us"]):
                groups.setdefault(s["bytes"], {}).setdefault(s["path"], []).append(s["us"])
        chosen = {}
        for size, paths in groups.items():
            figures = {p: rule(us) for p, us in paths.items()}
            best = min(figures, key=figures.get)
            chosen[key(size)] = best if figures[best] <= (1 - margin) * figures["nccl"] else "nccl"
        return chosen

    return choose


def by_mean(samples):
    return _by(statistics.mean)(samples)


def by_best_sample(samples):
    return _by(min)(samples)


def by_first_sample(samples):
    return _by(lambda us: us[0])(samples)


def nan_kept(samples):
    return _by(statistics.median, keep_nan=True)(samples)


def in_kilobytes(samples):
    return _by(statistics.median, key=lambda size: size // 1024)(samples)


def smallest_size_everywhere(samples):
    chosen = fastest_path(samples)
    first = chosen[min(chosen)]
    return {size: first for size in chosen}


def no_margin(samples):
    return _by(statistics.median, margin=0.0)(samples)


PATH_ANSWERS = [
    Answer("medians, NCCL kept within the margin (the course's)", "right", fastest_path),
    Answer("numpy nanmedian", "right", with_numpy),
    Answer("medians by sorting", "right", sorted_by_hand),
    Answer("the mean of the samples", "classic", by_mean),
    Answer("the best sample", "method", by_best_sample),
    Answer("the first sample", "method", by_first_sample),
    Answer("a failed path's NaN kept", "bad value", nan_kept),
    Answer("sizes in kilobytes", "unit", in_kilobytes),
    Answer("one path for every size", "hard-coded", smallest_size_everywhere),
    Answer("no margin: the strictly fastest", "method", no_margin),
]
SUITE_PATH = suite("11", 2, ch11.check_path_choice, PATH_ANSWERS)


@pytest.mark.exercise("11", 2)
def test_lab11_exercise2_path_choice(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge("11", 2, ch11.check_path_choice, PATH_ANSWERS, trials=5)
    kb = ch11.check_path_choice(in_kilobytes)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "bytes" in kb.hint
