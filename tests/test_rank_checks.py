"""launchlab.rank_checks on a CPU: what travels to the ranks with a learner's function."""

import pytest

from launchlab import checking, rank_checks
from launchlab.checking import CheckFailed


class CompilationError(Exception):
    """Stands in for Triton's: its message names where, then the code, then a caret, then (maybe) why."""


def _said():
    """The ranks' said(), run from the prelude's own text."""
    prelude, space = rank_checks.PRELUDE, {}
    exec(prelude[prelude.index("def said("):prelude.index("def yours(")], space)
    return space["said"]


def _scale(values):
    return [2 * v for v in _offset(values)]


def _offset(values):
    return [v + checking.rng().random() * 0 for v in values]


def answer_with_helpers(values):
    def run():  # a helper named only inside a nested function still travels
        return _scale(values)

    return run()


def test_a_learners_own_helpers_travel_with_the_answer_and_imports_stay_behind():
    name, source = rank_checks._source(answer_with_helpers)
    assert name == "answer_with_helpers"
    assert "def _scale(" in source and "def _offset(" in source
    assert "def rng(" not in source  # launchlab is importable on every rank: its code stays behind
    space = {"checking": checking}
    exec(compile(source, "<ranks>", "exec"), space)
    assert space["answer_with_helpers"]([1, 2]) == [2, 4]
    assert rank_checks.kernel_sources(answer_with_helpers) == []  # plain functions are no Triton kernels


import json as jason  # noqa: E402  (a module a notebook imported under another name)
from math import sqrt as root  # noqa: E402  (a name a notebook imported bare, and renamed)

WIDTH = 3  # constants a notebook set at its top level
SHAPE = (2, (1, 0.5))
rank = 7  # the rank program's own name: the notebook's value must not travel


def answer_reading_notebook_names(values, scale=WIDTH):  # a default is read when the def runs
    return [root(v) * scale * SHAPE[1][1] for v in values], jason.dumps(SHAPE), rank


def test_names_the_notebook_imported_bare_or_set_travel_as_lines():
    name, source = rank_checks._source(answer_reading_notebook_names)
    assert "from math import sqrt as root" in source and "import json as jason" in source
    assert "WIDTH = 3" in source and "SHAPE = (2, (1, 0.5))" in source and "rank =" not in source
    space = {"rank": 1, "WIDTH": 5}  # a rank program's own names: rank keeps its value, WIDTH takes the notebook's
    exec(compile(source, "<ranks>", "exec"), space)
    assert space["answer_reading_notebook_names"]([4.0]) == ([3.0], "[2, [1, 0.5]]", 1)


def test_a_module_the_ranks_cannot_import_by_its_name_binds_nothing():
    import types

    ghost = types.ModuleType("not_importable_anywhere")
    assert rank_checks._binding("ghost", ghost, "home") is None


def _kernel_body(ptr):
    return ptr


class _TritonKernel:
    """Stands in for a triton.jit kernel on a CPU: what rank_checks reads of one is its module and its .fn."""

    __module__ = "triton.runtime.jit"

    def __init__(self, fn):
        self.fn = fn


_fake_kernel = _TritonKernel(_kernel_body)


def _launcher(ptr):
    return _fake_kernel.fn(ptr)


def answer_launching_through_a_helper(ptr):
    return _launcher(ptr)


def test_a_kernel_launched_through_a_helper_travels_and_its_source_is_read():
    name, source = rank_checks._source(answer_launching_through_a_helper)
    assert "def _launcher(" in source and "def _kernel_body(" in source
    assert rank_checks.kernel_sources(answer_launching_through_a_helper) == [
        "def _kernel_body(ptr):\n    return ptr\n"]


def test_an_error_whose_first_line_only_says_where_is_reported_with_its_reason():
    said = _said()
    where_then_why = CompilationError("at 16:4:\n    for start in tl.range(0, n):\n    ^\nLoop-carried variable peer changed type")
    assert said(where_then_why) == ("CompilationError: at 16:4: ... Loop-carried variable peer changed type")
    assert said(ValueError("one line\nand more")) == "ValueError: one line"


def test_an_error_raised_from_another_is_reported_with_the_inner_reason():
    said = _said()
    try:
        try:
            raise TypeError("unsupported operand for constexpr")
        except TypeError as inner:
            raise CompilationError("at 12:8:\n    acc += helper(x)\n        ^") from inner
    except CompilationError as outer:
        assert said(outer) == "CompilationError: at 12:8: ... TypeError: unsupported operand for constexpr"


def all_reduce(values):  # shares its name with dist.all_reduce: an attribute read must not ship it
    raise AssertionError("never called")


def answer_reading_an_attribute_of_that_name(values):
    import types

    dist = types.SimpleNamespace(all_reduce=lambda v: v)
    return dist.all_reduce(values)


def test_a_name_read_after_a_dot_ships_nothing():
    _, source = rank_checks._source(answer_reading_an_attribute_of_that_name)
    assert "def all_reduce" not in source


def test_a_name_your_notebook_defined_elsewhere_is_explained():
    with pytest.raises(CheckFailed) as missing:
        rank_checks.answered([{"rank": 0, "raised": "NameError: name 'BLOCK' is not defined"}], "one_shot_all_reduce")
    assert "NameError" in str(missing.value) and "fresh Python process" in missing.value.hint
    with pytest.raises(CheckFailed) as in_kernel:  # a kernel's missing global, wrapped by Triton's compiler
        rank_checks.answered([{"rank": 0, "raised": "CompilationError: at 5:4: ... NameError('BLOCK is not defined')"}],
                             "one_shot_all_reduce")
    assert "fresh Python process" in in_kernel.value.hint
    with pytest.raises(CheckFailed) as other:
        rank_checks.answered([{"rank": 1, "raised": "ValueError: bad shape"}], "one_shot_all_reduce")
    assert other.value.hint is None  # the exercise's own hint, not this one


def test_a_chain_of_causes_is_followed_to_a_reason_and_never_around_a_loop():
    said = _said()
    innermost = ValueError("BLOCK must be a power of two")
    middle = CompilationError("at 3:2:\n    x = f(y)\n    ^")
    middle.__cause__ = innermost
    outer = CompilationError("at 9:4:\n    acc += g(x)\n    ^")
    outer.__cause__ = middle
    assert said(outer) == "CompilationError: at 9:4: ... ValueError: BLOCK must be a power of two"
    a, b = CompilationError("at 1:1:\n    ^"), CompilationError("at 2:2:\n    ^")
    a.__cause__, b.__cause__ = b, a  # raise a from b after raise b from a
    assert said(a).startswith("CompilationError: at 1:1: ...")


def _plain_in_a_kernel(ptr):
    return ptr


def _inner_kernel_body(ptr):
    return ptr


_inner_kernel = _TritonKernel(_inner_kernel_body)


def _outer_kernel_body(ptr):
    return _inner_kernel(_plain_in_a_kernel(ptr))


_outer_kernel = _TritonKernel(_outer_kernel_body)


def answer_launching_a_kernel_that_names_a_kernel(ptr):
    return _outer_kernel.fn(ptr)


def test_a_kernels_body_is_followed_to_the_kernels_it_names_and_no_further():
    _, source = rank_checks._source(answer_launching_a_kernel_that_names_a_kernel)
    assert "def _outer_kernel_body(" in source and "def _inner_kernel_body(" in source
    assert "def _plain_in_a_kernel(" not in source  # nothing but a kernel can run inside one


def summed_first(x):
    import torch.distributed._functional_collectives as funcol
    return funcol.all_reduce(x, "sum", dist.group.WORLD)  # noqa: F821  (dist: the ranks' own import)


def aborts_the_rank(x):
    import os
    os.abort()  # a library function handed the answer's arguments may end its process: here, at once


def summed_after(x):
    import torch.distributed._functional_collectives as funcol
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))  # noqa: F821


def test_answers_after_one_that_stops_the_shared_run_meet_fresh_ranks_together(monkeypatch):
    """judged_together on lab 08 exercise 1 (two gloo ranks): the answer that kills its rank is left to be judged
    alone, and the one after it is judged from a second shared run, not alone."""
    from launchlab.chapters.ch08 import checkers as ch08

    runs = []
    real_runs = rank_checks._runs
    monkeypatch.setattr(rank_checks, "_runs", lambda program, ex: runs.append(program) or real_runs(program, ex))
    answers = [summed_first, aborts_the_rank, summed_after]
    with ch08.judged_together(ch08.check_functional_all_reduce, answers):
        together = [fn in rank_checks._TOGETHER for fn in answers]
        assert together == [True, False, True], together
        assert len(runs) == 2 and "def summed_after(" in runs[1] and "def summed_first(" not in runs[1]
        assert ch08.check_functional_all_reduce(summed_after)
    assert not any(fn in rank_checks._TOGETHER for fn in answers)


GLOO_GONE = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:33416"
NCCL_GONE = "DistBackendError: NCCL error: remote process exited or there was a network error"


@pytest.mark.parametrize("lost", [GLOO_GONE, NCCL_GONE], ids=["gloo", "nccl"])
def test_a_rank_left_waiting_in_a_collective_names_the_rank_that_skipped_it(lost):
    with pytest.raises(CheckFailed) as failed:
        rank_checks.answered([{"rank": 0, "raised": lost}, {"rank": 1}], "all_reduce_functional")
    assert "rank 1 never met rank 0 in its collective" in str(failed.value), failed.value
    assert lost in str(failed.value) and "same collective calls" in failed.value.hint


def test_a_ranks_own_error_comes_before_its_peers_lost_connection():
    rows = [{"rank": 0, "raised": GLOO_GONE}, {"rank": 1, "raised": "ValueError: shapes (4,) and (8,) differ"}]
    with pytest.raises(CheckFailed) as failed:
        rank_checks.answered(rows, "all_reduce_functional")
    assert str(failed.value).startswith("rank 1: your all_reduce_functional raised ValueError"), failed.value
