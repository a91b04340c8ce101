"""A lab never hands out its answer: nothing public in the learner package passes an exercise's checker.

For every exercise, every public function and class a learner can reach in `launchlab` (each module's public
names, the checkers modules apart, and what `for_lab` hands each lab besides its checkers) whose signature
takes the exercise's arguments is handed to the exercise's checker, which must FAIL it. A function declared to
return a record (a dataclass) is also handed over unpacked to the record's float fields, the one line a
learner would write around it (`s = split(...); return s.busy_us, s.host_wait_us, s.gpu_gap_us`), and with
the record's last float fields summed into one, for a record split finer than the exercise asks (queued and
replay gaps added into one GPU gap). A function whose hints ask for items with leading fields of any type
(`Iterable[tuple[object, float, float, float]]`: a call id a learner may leave None) is also handed over with
None put before each item's fields, for items that are that much shorter. Only the signature leaves a
candidate out. Exercises that run on a GPU are marked gpu (skipped without CUDA); the
others are the CPU tier.

Library functions handed a checker's arguments do what they were written to do: a rank's watchdog or shutdown
ends its process, a run may hang. So each checker call runs in a process of its own, forked from a server
that has imported the package and never touched CUDA or run a parallel region, and is stopped after LIMIT_S.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import importlib
import inspect
import json
import os
import pkgutil
import re
import select
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

import launchlab
from launchlab import course, trace
from launchlab.checkers import for_lab

CHECKERS_MODULE = re.compile(r"launchlab\.chapters\.ch\d\d\.checkers")
LIMIT_S = 30.0   # a checker fails a wrong answer in about a second on a CPU; a call this long is a hang
PARALLEL = max(1, min(8, len(os.sched_getaffinity(0))))   # checker calls at once (lab 08's start two ranks each)


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


def _floats(record: type) -> list[str]:
    """The float fields of a record, in order."""
    hints = typing.get_type_hints(record)
    return [f.name for f in dataclasses.fields(record) if hints.get(f.name) is float]


def _unpacked(fn: Callable, record: type, summed: int = 1) -> Callable | None:
    """fn returning its record's float fields instead of the record: the one there is, or a tuple of them; with
    `summed` > 1, the last `summed` of them added into one value."""
    floats = _floats(record)
    if not floats or not 1 <= summed <= len(floats):
        return None

    def unpacked(*args):
        result = fn(*args)
        values = [getattr(result, name) for name in floats]
        values = (*values[:len(values) - summed], sum(values[len(values) - summed:]))
        return values if len(values) > 1 else values[0]

    return unpacked


def _unpackings(fn: Callable, record: type) -> list[tuple[str, Callable]]:
    """fn unpacked to its record's floats, then with the last two, three, ... of them summed into one."""
    name = record.__name__
    return [(f"its {name}'s floats" if summed == 1 else f"its {name}'s floats, the last {summed} summed",
             _unpacked(fn, record, summed)) for summed in range(1, len(_floats(record)) + 1)]


def _leading_any(fn: Callable) -> dict[int, tuple[int, int]]:
    """{positional index: (item length, leading fields)} for each parameter that fn's hints declare an iterable of
    fixed-length tuples whose first fields may be anything (`object`, or a union with None): an id a learner
    may leave None."""
    try:
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())
    except Exception:  # an annotation that does not resolve here, or no signature: nothing to pad
        return {}
    found = {}
    for index, param in enumerate(params):
        hint = hints.get(param.name)
        if typing.get_origin(hint) not in (list, tuple, collections.abc.Iterable, collections.abc.Sequence):
            continue
        item = (typing.get_args(hint) or (None,))[0]
        fields = typing.get_args(item)
        if typing.get_origin(item) is not tuple or not fields or Ellipsis in fields:
            continue
        lead = 0
        while lead < len(fields) and (fields[lead] is object or type(None) in typing.get_args(fields[lead])):
            lead += 1
        if 0 < lead < len(fields):
            found[index] = (len(fields), lead)
    return found


def _padded(fn: Callable) -> Callable | None:
    """fn with None put before each item's fields, where its hints ask for items with leading fields of any type
    and the items passed are that much shorter (a learner's `[(None, *k) for k in kernels]`)."""
    pads = _leading_any(fn)
    if not pads:
        return None

    def padded(*args):
        args = list(args)
        for index, (size, lead) in pads.items():
            items = args[index] if index < len(args) else None
            if isinstance(items, (list, tuple)) and items and all(
                    isinstance(i, (list, tuple)) and len(i) == size - lead for i in items):
                args[index] = [(None,) * lead + tuple(i) for i in items]
        return fn(*args)

    return padded


def _variants(where: str, fn: Callable) -> list[tuple[str, Callable]]:
    """fn as it is, with None padding its items' leading fields where its hints ask for them, and each of those
    unpacked where it returns a record."""
    padded = _padded(fn)
    found = [(where, fn), *([(f"{where}, None before each item's fields", padded)] if padded else [])]
    record = _record_returned(fn)
    if record:
        found += [(f"{label}, {how}", unpacked) for label, called in list(found)
                  for how, unpacked in _unpackings(called, record) if unpacked]
    return found


@functools.cache
def candidates(n: int) -> tuple[tuple[str, Callable], ...]:
    """What is handed to a checker whose learner's function takes n arguments."""
    found = []
    for where, fn in library():
        if _fits(fn, n):
            found += _variants(where, fn)
    return tuple(found)


# ---- the server: one forked process per checker call ----------------------------------------------------------

def _judge_in_child(checker: Callable, fn: Callable, out: int) -> None:
    """In a forked child: its own process group, no stdin or stdout, the verdict written to `out`, then exit."""
    os.setsid()
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    try:
        verdict = checker(fn)
        message = {"outcome": "pass" if verdict else "fail", "detail": str(getattr(verdict, "detail", ""))[:300]}
    except BaseException as exc:  # whatever the candidate did (SystemExit included), the child reports it
        message = {"outcome": "fail", "detail": f"the checker raised {type(exc).__name__}: {exc}"[:300]}
    os.write(out, json.dumps(message).encode())
    os._exit(0)


def _judge_all(checker: Callable, found: tuple[tuple[str, Callable], ...], reply) -> None:
    """Judge every candidate in a child of its own, PARALLEL at once; one JSON line per candidate, in order."""
    running: dict[int, tuple[int, float, int]] = {}   # pid: (index, started, read end)
    results: dict[int, dict] = {}
    queue = list(range(len(found)))
    while queue or running:
        while queue and len(running) < PARALLEL:
            index = queue.pop(0)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _judge_in_child(checker, found[index][1], write)
            os.close(write)
            running[pid] = (index, time.monotonic(), read)
        time.sleep(0.005)
        for pid, (index, started, read) in list(running.items()):
            seconds = time.monotonic() - started
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done and seconds < LIMIT_S:
                continue
            if not done:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            try:
                os.killpg(pid, signal.SIGKILL)   # anything the call left running in its group
            except ProcessLookupError:
                pass
            text = b""
            while select.select([read], [], [], 0)[0] and (chunk := os.read(read, 65536)):
                text += chunk
            os.close(read)
            if text:
                result = json.loads(text)
            elif not done:
                result = {"outcome": "slow", "detail": f"stopped after {LIMIT_S:g} s"}
            else:
                code = os.waitstatus_to_exitcode(status)
                result = {"outcome": "died", "detail": f"its process ended with status {code} before a verdict"}
            results[index] = {"where": found[index][0], "seconds": round(seconds, 3), **result}
            del running[pid]
    for index in range(len(found)):
        reply.write(json.dumps(results[index]) + "\n")
    reply.write(json.dumps({"done": len(found)}) + "\n")
    reply.flush()


def serve() -> None:
    """The server: import the package, then judge what stdin asks for, a line each: '07 4' hands exercise 4 of
    lab 07 every candidate; '07 4 launchlab.trace _attribute_idle' hands it that function alone (and unpacked)."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)   # nothing but replies on the reply channel
    for n in range(8):
        candidates(n)
    for line in sys.stdin:
        number, ex, *named = line.split()
        chapter = course.chapter(number)
        exercise = chapter.exercise(int(ex))
        checker = getattr(importlib.import_module(chapter.checkers_module), exercise.checker)
        if named:
            fn = getattr(importlib.import_module(named[0]), named[1])
            record = _record_returned(fn)
            found = ((named[1], fn), *(((f"{named[1]} unpacked", _unpacked(fn, record)),) if record else ()))
        else:
            found = candidates(exercise.required_params)
        together = getattr(importlib.import_module(chapter.checkers_module), "judged_together", None)
        if together is None:
            _judge_all(checker, found, reply)
        else:  # lab 08 runs each answer in two ranks: one pair of ranks meets every candidate in turn, not one each
            with together(checker, [fn for _, fn in found]):
                _judge_all(checker, found, reply)


class Server:
    """The test's end of the server: ask for an exercise, read back a verdict per candidate."""

    def __init__(self, workdir: Path):
        env = {k: v for k, v in os.environ.items() if k != "LAUNCHLAB_CHECK_TRIALS"}
        env.update(LAUNCHLAB_STRICT="0", LAUNCHLAB_RESULTS_DIR=str(workdir / "runs"),
                   PYTORCH_NVML_BASED_CUDA_CHECK="1",   # so that the server's own imports never initialise CUDA
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
        self.log = workdir / "server.log"
        self.stderr = self.log.open("wb")
        self.process = subprocess.Popen([sys.executable, "-c", "import test_no_answers; test_no_answers.serve()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                        cwd=workdir, env=env, text=True)

    def judge(self, chapter: str, exercise: int, module: str = "", name: str = "") -> list[dict]:
        self.process.stdin.write(f"{chapter} {exercise} {module} {name}\n")
        self.process.stdin.flush()
        results = []
        while True:  # the server stops every call at LIMIT_S, so it always answers; pytest-timeout guards the rest
            line = self.process.stdout.readline()
            if not line:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the judging server stopped answering (exit {self.process.poll()}):\n{tail}")
            result = json.loads(line)
            if "done" in result:
                return results
            results.append(result)

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    judging = Server(tmp_path_factory.mktemp("no_answers"))
    yield judging
    judging.close()


def _exercises() -> Iterator:
    # Every GPU exercise's candidates run in the GPU tier's parallel phase (`concurrent`), a timed one's too: the
    # server judges PARALLEL of them at once in either phase, so a timed checker here never has the GPU to itself.
    for chapter in course.chapters():
        for ex in chapter.exercises:
            yield pytest.param(chapter, ex, id=f"lab{chapter.number}-ex{ex.number}-{ex.checker}",
                               marks=[pytest.mark.gpu, pytest.mark.concurrent] if ex.runs_on == "gpu" else [])


@pytest.mark.parametrize(("chapter", "ex"), list(_exercises()))
def test_no_library_function_passes_a_checker(chapter, ex, server, record_property):
    started = time.monotonic()
    results = server.judge(chapter.number, ex.number)
    record_property("candidates", len(results))
    record_property("seconds", round(time.monotonic() - started, 3))
    passed = [r["where"] for r in results if r["outcome"] == "pass"]
    slow = [r["where"] for r in results if r["outcome"] == "slow"]
    assert not passed, (f"lab {chapter.number}, {ex.heading}: the learner package hands out the answer; "
                        f"{ex.checker} PASSED {', '.join(passed)}. Make it private (a leading underscore) and "
                        "give the checker a reference of its own")
    assert not slow, (f"lab {chapter.number}, {ex.heading}: {ex.checker} did not judge {', '.join(slow)} within "
                      f"{LIMIT_S:g} s; a checker should fail a wrong answer quickly")


def test_the_server_can_see_a_pass(server):
    """A harness that failed every call would pass the test above whatever the library held: the course's own
    split, unpacked, passes exercise 4 of lab 07 (as an IdleSplit, not the tuple asked for, it fails)."""
    results = {r["where"]: r for r in server.judge("07", 4, "launchlab.trace", "_attribute_idle")}
    assert results["_attribute_idle unpacked"]["outcome"] == "pass", results
    assert results["_attribute_idle"]["outcome"] == "fail", results


def split_by_call(kernels: Iterable[tuple[object, float, float, float]],
                  window: tuple[float, float]) -> trace.LaunchSplit:
    """A public function of the shape a learner attack found lab 07's answer in (`trace.split_by_launch`, now
    private): kernels with a call id first, the idle time in finer parts than the exercise asks."""
    return trace._split_by_launch(kernels, window)


def test_a_helper_one_line_away_is_handed_over():
    """Such a function is handed to the checker as the learner called it: None before each kernel's fields, and
    its queued and replay gaps summed into the GPU gap, which is the exercise's answer."""
    variants = dict(_variants("split_by_call", split_by_call))
    answer = variants["split_by_call, None before each item's fields, its LaunchSplit's floats, the last 2 summed"]
    kernels, window = [(4.0, 5.0, 6.0), (1.0, 2.0, 3.0), (-1.0, 3.5, 4.0)], (0.0, 8.0)
    split = trace._attribute_idle(kernels, window)
    assert answer(kernels, window) == pytest.approx((split.busy_us, split.host_wait_us, split.gpu_gap_us))
