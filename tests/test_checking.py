"""launchlab.checking: values that cannot be a measurement refused, verdicts named by the model, stored, seeded and
kept apart from the CUDA state earlier exercises leave; a lab sees its checkers, never their answers."""

import ast
import contextlib
import importlib
import json
import re
import subprocess
import sys
import types

import nbformat
import pytest

from launchlab import checking, course, results
from launchlab.checkers import for_lab
from launchlab.checking import (
    TIME_SLIPS_MS,
    CheckFailed,
    exercise,
    exercise_name,
    number,
    within,
    within_factor,
)

CHAPTERS = [f"{n:02d}" for n in range(9)]


@pytest.mark.parametrize("value, message", [
    (None, "forget to `return`"), ("3.0", "str"), (True, "bool"), ([1.0], "list"),
    (float("nan"), "went wrong"), (float("inf"), "went wrong"), (-1.0, "must be positive"), (0, "must be positive"),
])
def test_number_refuses_what_cannot_be_a_measurement(value, message):
    with pytest.raises(CheckFailed, match=message):
        number(value, "your figure", "microseconds")


def test_number_accepts_numbers_of_every_kind():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    assert number(3, "x") == 3.0 and number(np.float32(2.5), "x") == 2.5 and number(torch.tensor(1.5), "x") == 1.5
    assert number(-2.0, "x", positive=False) == -2.0
    with pytest.raises(CheckFailed, match="has 3 values"):
        number(torch.ones(3), "x")


def test_tolerance_checks_fail_on_nan():
    with pytest.raises(CheckFailed, match="went wrong"):
        within(float("nan"), 1.0, 0.1, "yours")
    with pytest.raises(CheckFailed, match="went wrong"):
        within_factor(float("nan"), 1.0, 2.0, "yours")


def test_a_unit_slip_fails_with_a_hint_that_names_it():
    with pytest.raises(CheckFailed) as failed:
        within(5000.0, 5.0, 0.1, "your time in ms", slips=TIME_SLIPS_MS)
    assert "microseconds" in failed.value.hint
    with pytest.raises(CheckFailed) as failed:
        within(9.0, 5.0, 0.1, "your time in ms", slips=TIME_SLIPS_MS)
    assert failed.value.hint is None  # wrong, but not by a factor that names a slip


@exercise("Exercise 0: a demo", "the general hint")
def _demo(answer):
    if answer == "slip":
        raise CheckFailed("yours is off by 1,000", hint="the slip's own hint")
    if answer == "wrong":
        raise CheckFailed("yours is wrong")
    if answer == "flaky":
        _demo.calls = getattr(_demo, "calls", 0) + 1
        if _demo.calls % 3 == 0:
            raise CheckFailed("failed this time")
    return "fine"


def test_a_verdict_carries_the_mistakes_own_hint_else_the_exercises(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    slip, wrong = _demo("slip"), _demo("wrong")
    assert not slip and slip.hint == "the slip's own hint" and wrong.hint == "the general hint"
    printed = capsys.readouterr().out
    assert "Hint: the slip's own hint" in printed and "Hint: the general hint" in printed


def test_under_check_trials_every_run_must_pass(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setenv("LAUNCHLAB_CHECK_TRIALS", "5")
    assert _demo("right").detail == "fine (passed 5 runs of 5)"
    _demo.calls = 0
    flaky = _demo("flaky")  # passes twice, then fails
    assert not flaky and flaky.detail == "failed this time (run 3 of 5)"
    monkeypatch.setenv("LAUNCHLAB_CHECK_TRIALS", "0")
    with pytest.raises(ValueError, match="LAUNCHLAB_CHECK_TRIALS"):
        _demo("right")


def test_a_checker_that_draws_nothing_prints_no_seed(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    verdict = _demo("wrong")
    assert verdict.seed is None and "seed" not in capsys.readouterr().out


# ---- the exercise's heading from the course model, the verdict in the run ------------------------------------

def _model(runs_on: str = "cpu"):
    """A chapter 04 of two exercises, as the model declares them."""
    return course.Chapter(
        number="04", stem="04_demo", title="a demo chapter", leaves_able_to="", measures="", needs=course.Needs(),
        minutes=1, exercises=(
            course.Exercise(1, "choose a bucket", "check_demo", "bucket_for(batch, buckets)", runs_on=runs_on),
            course.Exercise(2, "split the work", "check_split", "split(work)", runs_on="cpu-partial")))


@pytest.fixture
def demo_chapter(monkeypatch):
    """This test module's checkers belong to the demo chapter 04 (the real model is read at the first call)."""
    chapter = _model()
    real = course.chapter_of_module
    monkeypatch.setattr(course, "chapter_of_module", lambda module: chapter if module == __name__ else real(module))
    return chapter


def _demo_checker(number=1):
    @exercise(number, "the general hint")
    def check_demo(answer):
        if answer != "right":
            raise CheckFailed(f"{answer!r} is not right")
        return "right it is"

    return check_demo


def test_an_exercise_given_its_number_takes_its_heading_from_the_model(demo_chapter, results_dir, capsys):
    check_demo = _demo_checker()
    assert exercise_name(check_demo) == "Exercise 1: choose a bucket" == check_demo.exercise_name
    assert check_demo("right") and check_demo("right").exercise == "Exercise 1: choose a bucket"
    assert capsys.readouterr().out.startswith("PASS [Exercise 1: choose a bucket] right it is")


def test_outside_a_chapter_a_number_names_the_exercise_alone(capsys, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    assert not _demo_checker(7)("wrong")
    assert capsys.readouterr().out.startswith("FAIL [Exercise 7] 'wrong' is not right")


def test_a_verdict_lands_in_the_run_file(demo_chapter, results_dir, monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    check_demo = _demo_checker()
    check_demo("wrong")
    assert results.load_run()["verdicts"] == {"04": {"1": {
        "passed": False, "partial": False, "detail": "'wrong' is not right", "hint": "the general hint"}}}
    check_demo("right")
    assert results.load_run()["verdicts"]["04"]["1"]["passed"] is True
    assert (results_dir / "cpu.json").exists() or list(results_dir.glob("*.json"))


def test_a_checker_outside_a_chapter_records_nothing(results_dir, monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    _demo("wrong")
    assert not results_dir.exists() or not list(results_dir.glob("*.json"))


@pytest.mark.parametrize("cuda, mark", [(False, "PASS (CPU part only) [Exercise 2: split the work]"),
                                        (True, "PASS [Exercise 2: split the work]")])
def test_a_cpu_partial_exercise_passed_without_cuda_says_so(cuda, mark, demo_chapter, results_dir, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(checking, "cuda_available", lambda: cuda)
    verdict = _demo_checker(2)("right")
    out = capsys.readouterr().out
    assert verdict and out.startswith(mark) and verdict.partial is not cuda
    assert ("judged on a machine with a CUDA GPU" in verdict.detail) is not cuda
    assert results.load_run()["verdicts"]["04"]["2"]["partial"] is not cuda


def test_every_checker_carries_its_exercises_heading():
    for chapter in course.chapters():
        module = importlib.import_module(chapter.checkers_module)
        for ex in chapter.exercises:
            assert exercise_name(getattr(module, ex.checker)) == ex.heading, (chapter.number, ex.number)


# ---- seeds: a FAIL says how to replay it ------------------------------------------------------------------------

def _drawing_checker():
    seen = []

    @exercise("Exercise 0: a drawn scenario", "sort them")
    def check_sorted(sort):
        scenario = checking.rng().sample(range(1000), 5)
        if scenario == sorted(scenario):  # one draw in 120 comes sorted: the identity must always fail
            scenario.reverse()
        seen.append(scenario)
        if sort(list(scenario)) != sorted(scenario):
            raise CheckFailed(f"{scenario} came back unsorted")
        return "sorted"

    return check_sorted, seen


def test_a_fail_prints_its_seed_and_that_seed_replays_the_scenario(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.delenv("LAUNCHLAB_CHECK_SEED", raising=False)
    check_sorted, seen = _drawing_checker()
    first = check_sorted(lambda xs: xs)
    out = capsys.readouterr().out
    found = re.search(r"\(seed (\d+): check\.check_sorted\(your_answer, seed=(\d+)\) replays it\)\n  Hint: sort them",
                      out)
    assert found and found.group(1) == found.group(2) and int(found.group(1)) == first.seed
    replayed = check_sorted(lambda xs: xs, seed=first.seed)
    assert seen[1] == seen[0] and replayed.detail == first.detail and replayed.seed == first.seed
    monkeypatch.setenv("LAUNCHLAB_CHECK_SEED", str(first.seed))
    assert not check_sorted(lambda xs: xs) and seen[2] == seen[0]
    assert check_sorted(sorted) and "seed" not in capsys.readouterr().out.splitlines()[-1]  # a PASS line says none


def test_each_trial_draws_afresh_unless_a_seed_is_given(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.delenv("LAUNCHLAB_CHECK_SEED", raising=False)
    monkeypatch.setenv("LAUNCHLAB_CHECK_TRIALS", "3")
    check_sorted, seen = _drawing_checker()
    assert check_sorted(sorted)
    assert len({tuple(s) for s in seen}) == 3
    seen.clear()
    assert check_sorted(sorted, seed=12345) and seen[0] == seen[1] == seen[2]
    with pytest.raises(TypeError, match="whole number"):
        check_sorted(sorted, seed="12345")


def test_a_seed_replays_a_chapter_checkers_scenario(monkeypatch, capsys):
    from launchlab.chapters.ch04 import checkers as ch04

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")

    def wrong_beyond_the_fixed_sets(batch, buckets):  # right for the fixed sets, wrong for the drawn one
        if list(buckets) in ([48, 10, 3, 24], list(ch04.BUCKETS), [5]):
            return min((b for b in buckets if b >= batch), default=None)
        return -1

    first = ch04.check_bucket_for(wrong_beyond_the_fixed_sets)
    assert not first and first.seed is not None
    assert f"check.check_bucket_for(your_answer, seed={first.seed}) replays it" in capsys.readouterr().out
    again = ch04.check_bucket_for(wrong_beyond_the_fixed_sets, seed=first.seed)
    assert again.detail == first.detail  # the same drawn bucket list, named in the detail


# ---- exercises do not poison each other: the CUDA state, restored (a fake torch, no CUDA needed) --------------

class _FakeStream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle

    def __eq__(self, other) -> bool:
        return isinstance(other, _FakeStream) and other.cuda_stream == self.cuda_stream

    __hash__ = None


class _FakeCuda:
    """torch.cuda as the restore logic sees it: streams, captures, the sync debug mode, a sticky error."""

    def __init__(self, initialised: bool = True) -> None:
        self.initialised, self.default = initialised, _FakeStream(0)
        self.current, self.capturing, self.debug_mode, self.broken = self.default, set(), 0, None
        self.ended: list[int] = []

    def is_initialized(self) -> bool:
        return self.initialised

    def current_device(self) -> int:
        return 0

    def _usable(self) -> None:
        if not self.initialised:
            raise AssertionError("the restore touched CUDA where this process never initialised it")
        if self.broken:
            raise RuntimeError(f"CUDA error: {self.broken}\nCUDA kernel errors might be asynchronously reported")

    def is_current_stream_capturing(self) -> bool:
        self._usable()
        return self.current.cuda_stream in self.capturing

    def current_stream(self, device=None):
        return self.current

    def default_stream(self, device=None):
        if device is None:  # as torch's does when is_available() is patched to hide the GPU
            raise RuntimeError("invalid argument to getDefaultStream")
        return self.default

    def set_stream(self, stream) -> None:
        self.current = stream

    def get_sync_debug_mode(self) -> int:
        return self.debug_mode

    def set_sync_debug_mode(self, mode) -> None:
        self.debug_mode = mode

    def synchronize(self, device=None) -> None:
        self._usable()
        if self.debug_mode == 2:
            raise RuntimeError("called a synchronizing CUDA operation")

    def leave_a_mess(self) -> None:
        """What a failed exercise can leave: a side stream current and capturing, the sync debug mode on."""
        self.current = _FakeStream(7)
        self.capturing.add(7)
        self.debug_mode = 2


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake))
    monkeypatch.setattr(checking, "_end_capture", lambda handle: (fake.ended.append(handle),
                                                                    fake.capturing.discard(handle)))
    monkeypatch.setattr(checking, "_last_judged", None)
    monkeypatch.setattr(checking, "_broken_by", None)
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    return fake


def test_what_an_exercise_leaves_behind_is_put_back_before_and_after_the_next(fake_cuda, capsys):
    seen = []

    @exercise("Exercise 2: the next one", "h")
    def check_next(mess):
        cuda = fake_cuda
        seen.append((cuda.current.cuda_stream, set(cuda.capturing), cuda.debug_mode))
        if mess:
            cuda.leave_a_mess()
            raise ValueError("your capture failed")
        return "fine"

    fake_cuda.leave_a_mess()  # as an earlier exercise, or the learner's own cell, left it
    assert check_next(False) and seen[-1] == (0, set(), 0) and fake_cuda.ended == [7]
    failed = check_next(True)  # the learner's own error is still a FAIL with its message
    assert not failed and failed.detail == "your code raised ValueError: your capture failed"
    assert capsys.readouterr().out.splitlines()[-2].startswith("FAIL [Exercise 2: the next one] your code raised")
    assert (fake_cuda.current.cuda_stream, fake_cuda.capturing, fake_cuda.debug_mode) == (0, set(), 0)
    assert fake_cuda.ended == [7, 7]


def test_a_gpu_left_broken_is_a_restart_verdict_naming_the_exercise_that_broke_it(fake_cuda, demo_chapter,
                                                                                   results_dir, capsys):
    @exercise(1, "h")
    def check_demo(answer):
        fake_cuda.broken = "an illegal memory access was encountered"
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    @exercise(2, "h")
    def check_split(answer):
        raise AssertionError("a body must not run on a broken GPU")

    broke = check_demo(None)
    out = capsys.readouterr().out
    assert not broke and broke.restart and broke.detail.startswith(
        "restart the kernel: exercise 1 left the GPU in a broken state (CUDA error: an illegal memory access was "
        "encountered)")
    assert out.startswith("RESTART [Exercise 1: choose a bucket] restart the kernel") and "FAIL" not in out
    after = check_split(None)
    assert not after and after.detail.startswith(
        "restart the kernel: exercise 1 left the GPU in a broken state (CUDA error: an illegal memory access")
    assert "Kernel > Restart, then run the lab's first cell and exercise 2 again" in after.detail
    recorded = results.load_run()["verdicts"]["04"]
    assert recorded["1"]["passed"] is False and recorded["1"]["detail"].startswith("restart the kernel")
    assert recorded["2"]["passed"] is False and recorded["2"]["detail"].startswith("restart the kernel")


def test_a_restore_step_that_fails_is_no_broken_gpu_when_the_gpu_answers(fake_cuda, monkeypatch, capsys):
    def refuse(*args):
        raise RuntimeError("invalid argument to getDefaultStream")

    monkeypatch.setattr(fake_cuda, "default_stream", refuse)
    assert _demo("right") and checking.restore_cuda_state() is None


def test_a_gpu_broken_outside_any_check_names_the_last_exercise_judged(fake_cuda, capsys):
    assert _demo("right")
    fake_cuda.broken = "an illegal memory access was encountered"
    verdict = _demo("right")
    assert verdict.detail.startswith("restart the kernel: code run after exercise 0 was judged left the GPU in a "
                                     "broken state")


def test_a_broken_gpu_raises_under_strict(fake_cuda, monkeypatch):
    fake_cuda.broken = "an illegal memory access was encountered"
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    with pytest.raises(CheckFailed, match="restart the kernel"):
        _demo("right")


@pytest.mark.parametrize("reused, repaired, expected", [
    (True, None, None),                       # memory freed after other streams is reused: nothing to repair
    (False, False, None),                     # stuck, and the repair ended the failed capture
    (False, True, checking.ALLOCATOR_STUCK),  # stuck, and the repair could not end it
    (False, RuntimeError("no such pool"), checking.ALLOCATOR_STUCK),   # stuck, and the repair raised
    (RuntimeError("no memory_snapshot"), None, None),   # another PyTorch without these calls: nothing to repair
])
def test_the_restore_reports_an_allocator_left_stuck_only_when_its_repair_failed(fake_cuda, monkeypatch, reused,
                                                                                 repaired, expected):
    def outcome(value):
        def call(device):
            if isinstance(value, Exception):
                raise value
            return value
        return call

    monkeypatch.setattr(checking, "_allocator_frees_after_streams", outcome(reused))
    monkeypatch.setattr(checking, "_allocator_capture_ended", outcome(repaired))
    assert checking.restore_cuda_state() == expected


def test_an_allocator_left_stuck_is_a_restart_verdict_with_its_own_hint(fake_cuda, monkeypatch, capsys):
    monkeypatch.setattr(checking, "_allocator_frees_after_streams", lambda device: False)
    monkeypatch.setattr(checking, "_allocator_capture_ended", lambda device: True)
    verdict = _demo("right")
    assert verdict.restart and checking.ALLOCATOR_STUCK in verdict.detail
    assert verdict.hint == checking.ALLOCATOR_HINT and "illegal memory access" not in verdict.hint
    fake_cuda.broken = "an illegal memory access was encountered"   # a sticky error keeps the general hint
    assert _demo("right").hint == checking.RESTART_HINT


class _FakeAllocator:
    """PyTorch's allocator as the repair sees it: captures' pools (n, 0) and learners' pools (0, n) it counts as
    running; memory freed after other streams is reused once every pool of `blocking` was ended."""

    def __init__(self, running: set, blocking: set) -> None:
        self.running, self.blocking, self.ended, self.released = set(running), set(blocking), [], []

    def end(self, device, pool) -> None:
        if pool not in self.running:
            raise RuntimeError("endAllocatePool: not a pool being allocated to")
        self.running.discard(pool)
        self.ended.append(pool)

    def release(self, device, pool) -> None:
        self.released.append(pool)

    def reused(self, device) -> bool:
        return self.blocking <= set(self.ended)


@pytest.mark.parametrize("running, blocking, ended, released, stuck", [
    # one failed capture: ended and released, older pools left alone once memory is reused
    ({(3, 0)}, {(3, 0)}, [(3, 0)], [(3, 0)], False),
    # two failed captures: newest first, each released
    ({(3, 0), (1, 0)}, {(3, 0), (1, 0)}, [(3, 0), (1, 0)], [(3, 0), (1, 0)], False),
    # an older pool counted as running is left alone once ending the newest was enough
    ({(4, 0), (2, 0)}, {(4, 0)}, [(4, 0)], [(4, 0)], False),
    # a learner's own pool held open (use_mem_pool around the check) is left alone when a capture's was enough
    ({(3, 0), (0, 2)}, {(3, 0)}, [(3, 0)], [(3, 0)], False),
    # a learner's own pool: tried only after every capture's, and never released (it is theirs)
    ({(0, 2)}, {(0, 2)}, [(0, 2)], [], False),
    # nothing the repair can end: still stuck
    (set(), {(9, 0)}, [], [], True),
])
def test_the_allocator_repair_ends_failed_captures_newest_first_and_stops_once_memory_is_reused(
        monkeypatch, running, blocking, ended, released, stuck):
    torch = pytest.importorskip("torch")
    allocator = _FakeAllocator(running, blocking)

    class EmptyGraph:   # the repair's own empty capture, made only to learn the captures' highest pool id
        def capture_begin(self) -> None: ...
        def capture_end(self) -> None: ...
        def pool(self): return (5, 0)

    monkeypatch.setattr(torch.cuda, "CUDAGraph", EmptyGraph)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, 3))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", allocator.end)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", allocator.release)
    monkeypatch.setattr(checking, "_probe_stream", lambda device: None)
    monkeypatch.setattr(checking, "_allocator_frees_after_streams", allocator.reused)
    assert checking._allocator_capture_ended(0) is stuck
    assert (allocator.ended, allocator.released) == (ended, released)


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["a host read inside torch.cuda.graph", "a capture ended through the CUDA runtime"])
def test_a_failed_capture_leaves_the_allocator_reusing_memory_after_the_restore(how):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.ones(8, device="cuda")
    if how == "a host read inside torch.cuda.graph":
        # the classic mistake: the read invalidates the capture, and the graph's exit raises before it tells the
        # allocator that the capture is over
        with pytest.raises(RuntimeError):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                (x * 2).sum().item()
    else:
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(side):
            graph.capture_begin()
            x.mul(2)
            checking._end_capture(side.cuda_stream)   # what the restore does to a capture torch did not end
        assert not checking._allocator_frees_after_streams(torch.cuda.current_device())   # the state to put back
    assert checking.restore_cuda_state() is None
    assert checking._allocator_frees_after_streams(torch.cuda.current_device())
    side = torch.cuda.Stream()
    let_go = torch.zeros(4096, device="cuda")
    let_go.record_stream(side)
    del let_go
    with checking.holding_freed_memory() as held:
        assert held.unheld == 0 and checking._free_blocks(torch.cuda.current_device()) == ([], 0), _pool_state(held)


def test_without_cuda_initialised_the_restore_touches_nothing(monkeypatch):
    fake = _FakeCuda(initialised=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake))
    for name in ("cupy", "cuda.core", "cuda.bindings"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert checking.restore_cuda_state() is None
    monkeypatch.delitem(sys.modules, "torch")
    assert checking.restore_cuda_state() is None


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_lab_sees_checkers_and_material_but_no_answers_and_no_modules(chapter):
    seen = vars(for_lab(chapter))
    assert any(name.startswith("check_") for name in seen)
    for name, value in seen.items():
        assert not name.startswith(("_", "reference")), f"lab {chapter} can reach {name}"
        assert type(value).__name__ != "module", f"lab {chapter} can reach the module {name} through check.{name}"


def test_lab02_cannot_reach_the_trace_reader_that_answers_exercise_1(root):
    assert not hasattr(for_lab("02"), "trace") and not hasattr(for_lab("02"), "gpu_idle")
    lab = nbformat.read(root / "labs" / "02_pytorch_dispatch.ipynb", as_version=4)
    first = next(c for c in lab.cells if c.cell_type == "code").source
    imported = {a.asname or a.name for node in ast.walk(ast.parse(first))
                if isinstance(node, ast.ImportFrom) and node.module in ("launchlab", "launchlab.trace")
                for a in node.names}
    assert "trace" not in imported and "gpu_idle" not in imported, imported


def test_every_lab_reaches_its_checkers_through_for_lab(root):
    for lab in sorted((root / "labs").glob("*.ipynb")):
        source = "\n".join(c.source for c in nbformat.read(lab, as_version=4).cells if c.cell_type == "code")
        assert f'check = for_lab("{lab.name[:2]}")' in source and "launchlab.checkers import ch" not in source, lab


def test_no_module_imports_another_modules_private_names(root):
    offenders = []
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("launchlab")):
                offenders += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders


def test_every_module_says_what_it_is_for_in_its_first_line(root):
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.splitlines()[0]) > 20, path


def test_importing_launchlab_leaves_matplotlib_settings_alone(root):
    script = ("import json, matplotlib\nbefore = {k: repr(v) for k, v in matplotlib.rcParams.items()}\n"
              "import launchlab, launchlab.plots\n"
              "after = {k: repr(v) for k, v in matplotlib.rcParams.items()}\n"
              "print(json.dumps(sorted(k for k in before if before[k] != after[k])))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(root / "utils"), "MPLBACKEND": "Agg", "PATH": ""}).stdout
    assert json.loads(out) == []


def test_a_figure_off_in_one_round_is_measured_again_and_fails_only_when_off_in_every_round():
    from launchlab.checking import FigureOff, measured_again

    rounds = iter([FigureOff("enqueue_us 9.5 against 5.6", "hint"), "in tolerance"])

    def hiccup_then_fine():
        outcome = next(rounds)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert measured_again(hiccup_then_fine, 3) == "in tolerance"
    calls = []

    def always_off():
        calls.append(1)
        raise FigureOff("enqueue_us 20 against 5.6", "sync per launch?")

    with pytest.raises(CheckFailed) as failed:
        measured_again(always_off, 3)
    assert len(calls) == 3 and "(off in each of 3 rounds)" in str(failed.value) and failed.value.hint == "sync per launch?"
    calls.clear()

    def wrong_type():
        calls.append(1)
        raise CheckFailed("returned a str, not a dict")

    with pytest.raises(CheckFailed, match="returned a str"):
        measured_again(wrong_type, 3)
    assert len(calls) == 1  # not measured again: no round can change a wrong type


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["default stream", "side stream", "large block", "awaiting another stream",
                                   "after a large buffer was cached", "beside a block of a destroyed stream"])
def test_holding_freed_memory_counts_what_a_graph_writes_after_its_buffer_is_let_go(where, monkeypatch):
    import torch

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    if where == "after a large buffer was cached":
        # a sixth of the device, let go and kept in the pool, as a long session leaves it: the hold then owns one
        # block that large, and counting what changed in it must need no temporary of its size (or 8 times it)
        cached = torch.empty(torch.cuda.get_device_properties(0).total_memory // 6, dtype=torch.uint8, device="cuda")
        del cached
    if where == "beside a block of a destroyed stream":
        # a block cached for a stream that another library made and has destroyed since (a CuPy stream, say): no
        # kernel can run on that stream any more, and the hold must take its block all the same
        from cuda.bindings import runtime

        error, made = runtime.cudaStreamCreate()
        assert error == runtime.cudaError_t.cudaSuccess, error
        with torch.cuda.stream(torch.cuda.ExternalStream(int(made))):
            orphan = torch.zeros(4096, device="cuda")
        torch.cuda.synchronize()
        del orphan
        runtime.cudaStreamDestroy(made)
    elements = (3 << 20) if where == "large block" else 4096     # 12 MiB: the large pool; 16 KiB: the small one
    side = torch.cuda.Stream()
    with torch.cuda.stream(side if where == "side stream" else torch.cuda.current_stream()):
        kept, let_go = torch.zeros(4096, device="cuda"), torch.zeros(elements, device="cuda")
    torch.cuda.synchronize()
    writes_kept, writes_both = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(writes_kept):
        kept.fill_(1.0)
    with torch.cuda.graph(writes_both):
        kept.fill_(2.0)
        let_go.fill_(2.0)
    with checking.holding_freed_memory() as held:
        writes_both.replay()
        assert held.written() == 0  # nothing let go yet
    if where == "awaiting another stream":
        let_go.record_stream(side)   # freed only once the allocator sees side's work done
    del let_go
    with checking.holding_freed_memory() as held:
        pool = _pool_state(held)
        assert held.unheld == 0, pool
        writes_kept.replay()
        assert held.written() == 0, pool
        writes_both.replay()
        # every byte of the let-go buffer (2.0f has no 0xFF byte), nothing else
        assert held.written() == elements * 4, pool
        held.refill(0)
        writes_both.replay()
        assert held.written() == elements, pool  # against zeros, only the float's high byte (0x40) shows
    if where == "after a large buffer was cached":
        torch.cuda.empty_cache()   # the sixth of the device goes back, not kept for the tests after this one


def _pool_state(held) -> str:
    """What a failed assertion needs to say: the default pool's free blocks left, and what the hold took."""
    import torch

    free, pending = checking._free_blocks(torch.cuda.current_device())
    return (f"held {len(held.blocks)} blocks, {sum(b.numel() for b in held.blocks):,} bytes, unheld {held.unheld:,}; "
            f"free left {[(kind, size) for _, kind, size in free][:12]}, pending {pending:,}; why unheld: {held.why}")
