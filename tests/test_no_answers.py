"""A lab never hands out its answer: nothing public in the learner package passes an exercise's checker.

For every exercise, every public function and class a learner can reach in `launchlab` (each module's public
names, the checkers modules apart, and what `for_lab` hands each lab besides its checkers) whose signature
takes the exercise's arguments is handed to the exercise's checker, which must FAIL it. A function declared to
return a record (a dataclass) is also handed over unpacked to the record's float fields, the one line a
learner would write around it (`s = trace.split(...); return s.busy_us, s.host_wait_us, s.gpu_gap_us`). Only
the signature leaves a candidate out. Exercises that run on a GPU are marked gpu (skipped without CUDA); the
others are the CPU tier.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
import signal
import threading
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import launchlab
from launchlab import course
from launchlab.checkers import for_lab

CHECKERS_MODULE = re.compile(r"launchlab\.chapters\.ch\d\d\.checkers")
LIMIT_S = 20.0  # a checker fails a wrong answer in well under a second on a CPU; a call this long is a hang


def _in_launchlab(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == "launchlab" or module.startswith("launchlab.")


@functools.cache
def library() -> tuple[tuple[str, Callable], ...]:
    """(where a learner finds it, it) for every public function and class of the learner package, each once."""
    found: dict[int, tuple[str, Callable]] = {}
    for info in sorted(pkgutil.walk_packages(launchlab.__path__, "launchlab."), key=lambda i: i.name):
        if CHECKERS_MODULE.fullmatch(info.name):
            continue
        module = importlib.import_module(info.name)
        for name, obj in sorted(vars(module).items()):
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)) and _in_launchlab(obj):
                found.setdefault(id(obj), (f"{info.name}.{name}", obj))
    for chapter in course.chapters():
        for name, obj in sorted(vars(for_lab(chapter.number)).items()):
            if not name.startswith("check_") and callable(obj):
                found.setdefault(id(obj), (f"for_lab({chapter.number!r}).{name}", obj))
    return tuple(found.values())


def _fits(fn: Callable, n: int) -> bool:
    """Whether fn accepts the n positional arguments a checker passes to the learner's function."""
    try:
        inspect.signature(fn).bind(*[None] * n)
    except (TypeError, ValueError):
        return False
    return True


def _record_returned(fn: Callable) -> type | None:
    """The dataclass a function is declared to return, if it is one."""
    if inspect.isclass(fn):
        return None
    try:
        returned = typing.get_type_hints(fn).get("return")
    except Exception:  # an annotation that does not resolve here: no record to unpack
        return None
    return returned if isinstance(returned, type) and dataclasses.is_dataclass(returned) else None


def _unpacked(fn: Callable, record: type) -> Callable | None:
    """fn returning its record's float fields instead of the record: one of them alone, or a tuple of them."""
    hints = typing.get_type_hints(record)
    floats = [f.name for f in dataclasses.fields(record) if hints.get(f.name) is float]
    if not floats:
        return None

    def unpacked(*args):
        result = fn(*args)
        values = tuple(getattr(result, name) for name in floats)
        return values if len(values) > 1 else values[0]

    return unpacked


@functools.cache
def candidates(n: int) -> tuple[tuple[str, Callable], ...]:
    """What is handed to a checker whose learner's function takes n arguments."""
    found = []
    for where, fn in library():
        if not _fits(fn, n):
            continue
        found.append((where, fn))
        record = _record_returned(fn)
        unpacked = _unpacked(fn, record) if record else None
        if unpacked:
            found.append((f"{where}, its {record.__name__}'s floats", unpacked))
    return tuple(found)


class _TooSlow(BaseException):
    """Raised inside a checker that ran past its limit; not an Exception, so the checker cannot call it a FAIL."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM, main thread only), leaving pytest-timeout's own alarm set."""
    outer = signal.getitimer(signal.ITIMER_REAL)[0] if hasattr(signal, "setitimer") else 0.0
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer") or \
            0 < outer <= seconds:
        yield
        return

    def stop(signum, frame):
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, stop)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def _exercises() -> Iterator:
    for chapter in course.chapters():
        for ex in chapter.exercises:
            yield pytest.param(chapter, ex, id=f"lab{chapter.number}-ex{ex.number}-{ex.checker}",
                               marks=[pytest.mark.gpu] if ex.runs_on == "gpu" else [])


@pytest.mark.parametrize(("chapter", "ex"), list(_exercises()))
def test_no_library_function_passes_a_checker(chapter, ex, lenient_checkers, results_dir, tmp_path, monkeypatch,
                                              record_property):
    monkeypatch.chdir(tmp_path)  # a candidate handed a checker's arguments may write a file where it is told
    checker = getattr(importlib.import_module(chapter.checkers_module), ex.checker)
    passed, slow, started = [], [], time.monotonic()
    tried = candidates(ex.required_params)
    for where, fn in tried:
        try:
            with _deadline(LIMIT_S):
                verdict = checker(fn)
        except _TooSlow:
            slow.append(where)
            continue
        if verdict:
            passed.append(where)
    record_property("candidates", len(tried))
    record_property("seconds", round(time.monotonic() - started, 3))
    assert not passed, (f"lab {chapter.number}, {ex.heading}: the learner package hands out the answer; "
                        f"{ex.checker} PASSED {', '.join(passed)}. Make it private (a leading underscore) and "
                        "give the checker a reference of its own")
    assert not slow, (f"lab {chapter.number}, {ex.heading}: {ex.checker} did not judge {', '.join(slow)} within "
                      f"{LIMIT_S:g} s; a checker should fail a wrong answer quickly")
