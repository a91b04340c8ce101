"""Checkers that run a learner's function in ranks: its source, run by torchrun on every rank under a deadline.

The plumbing the checkers of chapters 08 and 11 share. A checker declares a `RankExercise`, whose body defines
`judge(learner)` (run on every rank for every answer, returning a row of plain values); `answer_rows` runs the answer's
source there and reads each rank's row back. The learner's errors are reported per answer; a rank that hangs is
stopped by its watchdog, and the whole run by the deadline. `judged_together` lets one set of ranks meet several
answers in turn (the mutation suites' way of paying for one start-up instead of one each).
"""

from __future__ import annotations

import ast
import dis
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from .checking import NEEDS_GPU, CheckFailed
from .env import gpu_count
from .ranks import RankRun, run_ranks

__all__ = ["RankExercise", "alone_rows", "answer_rows", "answered", "failed", "judged_together", "kernel_sources",
           "needs_two_gpus", "rows_of"]

RANK_TIMEOUT_S = 240

# Every rank program: the imports a learner's function may use, the checker's own exceptions, and the helper that
# tells the learner's errors (reported, then on to the next answer) from the checker's (the rank stops).
PRELUDE = '''
import linecache
import sys
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from launchlab.ranks import Watchdog, init, result, shutdown, unrolled


class YourCodeRaised(Exception):
    """The learner's function raised: that answer's row says so, and the ranks go on to the next answer."""


class CollectiveFailed(Exception):
    """A collective of the checker's failed: the partner rank is gone or out of step; this rank stops."""


def said(exc):
    """An exception's first line, and the reason where the first only says where (a Triton CompilationError: its
    last line, or the error it was raised from where its last line is only a caret)."""
    lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    if not lines[0].endswith(":") or len(lines) == 1:
        return lines[0][:400]
    reason, inner, seen = lines[-1], exc, {id(exc)}
    # Triton wraps an error inside a called kernel in one that shows only where: follow the causes while the
    # reason is still a caret (a chain that loops back ends the walk)
    while not reason.strip("^~ ") and inner.__cause__ is not None and id(inner.__cause__) not in seen:
        inner = inner.__cause__
        seen.add(id(inner))
        last = [line.strip() for line in str(inner).splitlines() if line.strip()]
        if last and last[-1].strip("^~ "):
            reason = f"{type(inner).__name__}: {last[-1]}"
    if not reason.strip("^~ "):  # no reason anywhere: at least the line it points at
        reason = next((line for line in reversed(lines[1:]) if line.strip("^~ ")), reason)
    return f"{lines[0]} ... {reason}"[:400]


def yours(fn, *args):
    try:
        return fn(*args)
    except (NotImplementedError, CollectiveFailed):
        raise
    except Exception as exc:
        raise YourCodeRaised(said(exc)) from exc


def checkers_all_reduce(t):
    try:
        dist.all_reduce(t)
    except Exception as exc:
        raise CollectiveFailed(f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc
    return t


def difference(a, b):
    """Largest absolute difference of two tensors, or infinity where they cannot be compared."""
    if not isinstance(a, torch.Tensor) or a.shape != b.shape:
        return float("inf")
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


# EXERCISE IMPORTS
rank, world, device = init(sys.argv[1])
'''

# The answers, one after another: a collective first checks that every rank reached the same answer (one left
# out of step by the answer before stops the run; judged_together starts fresh ranks for the answers after it).
EPILOGUE = '''
for index, (name, source) in enumerate(LEARNERS):
    watchdog = Watchdog(rank, WATCHDOG_S)  # stops this rank if this answer has not finished in time
    mark = torch.tensor([1000.0 + index], device=device)
    if checkers_all_reduce(mark).item() != world * (1000.0 + index):
        watchdog.finish()
        break
    filename = f"<your {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    space = dict(globals())
    try:
        try:
            exec(compile(source, filename, "exec"), space)
        except Exception as exc:
            raise YourCodeRaised(said(exc)) from exc
        row = judge(space[name])
    except NotImplementedError as exc:
        row = {"not_implemented": str(exc)}
    except YourCodeRaised as exc:
        row = {"raised": str(exc)}
    result(rank=rank, index=index, **row)
    watchdog.finish()
shutdown()
'''


@dataclass(frozen=True)
class RankExercise:
    """A rank program's middle: `judge(learner) -> dict`, run on every rank for every answer."""

    body: str
    backend: str
    constants: Callable[[], dict]
    also_alone: bool = False  # also run on one rank, where the world size is 1: a size typed in shows
    imports: str = ""  # what this exercise's ranks import beside the prelude's (a learner's function may use it)
    timeout_s: float = RANK_TIMEOUT_S


def _python_function(kernel: object) -> Callable | None:
    """The Python function under a Triton kernel (a JITFunction wraps it as .fn; an autotuned or heuristics-wrapped
    kernel wraps a JITFunction as .fn), or None for anything that is not a Triton kernel."""
    for _ in range(4):
        module = getattr(type(kernel), "__module__", None)
        if not isinstance(module, str) or not module.startswith("triton."):
            return None
        kernel = getattr(kernel, "fn", None)
        if inspect.isfunction(kernel):
            return kernel
    return None


def _global_names(code: object) -> list[str]:
    """The global names a code object and the functions nested in it read, in the order they first appear (not
    the names after a dot: `dist.all_reduce` reads `dist`, and a function of yours named all_reduce stays behind)."""
    names = [ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS")]
    for const in code.co_consts:
        if inspect.iscode(const):
            names += _global_names(const)
    return list(dict.fromkeys(names))


def _helpers(fn: Callable) -> list[tuple[object, Callable]]:
    """What `fn` calls that must travel with it, in the order first met: the Triton kernels it names and the ones
    they name, each with its Python function, and the plain functions defined where `fn` is (a notebook's own
    helpers), each as itself. Anything imported from a module the ranks can import stays behind, and a kernel's
    body is followed only to other kernels (nothing else can run inside one)."""
    found: list[tuple[object, Callable]] = []
    home = getattr(fn, "__module__", None)
    todo: list[tuple[Callable, bool]] = [(fn, False)]
    while todo:
        current, in_kernel = todo.pop(0)
        code, space = getattr(current, "__code__", None), getattr(current, "__globals__", {})
        for name in _global_names(code) if code else ():
            value = space.get(name)
            inner = _python_function(value)
            is_kernel = inner is not None
            if (not is_kernel and not in_kernel and inspect.isfunction(value) and value is not fn
                    and value.__module__ == home):
                inner = value
            if inner is not None and all(value is not seen for seen, _ in found):
                found.append((value, inner))
                todo.append((inner, is_kernel))
    return found


def _jit_helpers(fn: Callable) -> list[tuple[object, Callable]]:
    """The Triton kernels among `fn`'s helpers, each with its Python function."""
    return [(kernel, inner) for kernel, inner in _helpers(fn) if kernel is not inner]


def kernel_sources(fn: Callable) -> list[str]:
    """The sources of the Triton kernels `fn` launches, directly, through the kernels it names or through its own
    helpers."""
    sources = []
    for _, kernel in _jit_helpers(fn):
        try:
            sources.append(textwrap.dedent(inspect.getsource(kernel)))
        except (OSError, TypeError):
            continue
    return sources


def kernel_globals(fn: Callable) -> dict[str, object]:
    """The module-level names the Triton kernels `fn` launches read (_names_read: their code, defaults and
    annotations), with their values: constants, Triton functions under names of the learner's own."""
    found: dict[str, object] = {}
    for _, inner in _jit_helpers(fn):
        space = getattr(inner, "__globals__", {})
        for name in _names_read(inner):
            if name in space:
                found.setdefault(name, space[name])
    return found


# Names the rank program owns: a notebook's own value of these never travels (the rank's device is not yours).
RANK_NAMES = frozenset({"rank", "world", "device"})


def _plain(value: object) -> bool:
    """A value whose repr() is Python that rebuilds it: a number, a string, or a tuple of them."""
    if type(value) is float:
        return value == value and abs(value) != float("inf")
    if type(value) in (int, bool, str):
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _binding(name: str, value: object, home: str | None) -> str | None:
    """The line that gives a rank `name` as the learner's notebook has it, for what can travel as a line: a module
    (`import triton.language as language`), a function or class of an installed module (`from triton.language
    import debug_barrier`), a plain constant (`BLOCK = 1024`, also as `tl.constexpr(1024)`). None for anything
    else. Imports are tried: one that fails on a rank leaves the name undefined, as it was before lines travelled."""
    if inspect.ismodule(value):
        if sys.modules.get(value.__name__) is not value:
            return None
        line = f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}"
        return f"try:\n    {line}\nexcept ImportError:\n    pass"
    module, short = getattr(value, "__module__", None), getattr(value, "__name__", None)
    if isinstance(module, str) and isinstance(short, str) and module != home and callable(value) \
            and getattr(sys.modules.get(module), short, None) is value:
        line = f"from {module} import {short}" + (f" as {name}" if short != name else "")
        return f"try:\n    {line}\nexcept ImportError:\n    pass"
    if _plain(value):
        return f"{name} = {value!r}"
    if type(value).__name__ == "constexpr" and type(value).__module__.startswith("triton.") \
            and _plain(getattr(value, "value", None)):
        return f"{name} = __import__('triton.language', fromlist=['constexpr']).constexpr({value.value!r})"
    return None


def _names_read(owner: Callable) -> list[str]:
    """The global names a function reads: in its code, and in its decorators, defaults and annotations, which run
    when its `def` runs (read from its source)."""
    code = getattr(owner, "__code__", None)
    names = _global_names(code) if code else []  # a library's C function has no code to read
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(owner)))
    except (OSError, TypeError, SyntaxError):
        return names
    names += [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return list(dict.fromkeys(names))


def _bindings(fn: Callable, helpers: list[tuple[object, Callable]]) -> list[str]:
    """The lines that bind the names `fn` and what travels with it read from the notebook and that are not
    themselves shipped: imports made bare (`from triton.language import atomic_cas`), modules under other names,
    module-level constants. The learner's value wins over a rank program's name of its own, but for RANK_NAMES."""
    shipped = {id(value) for value, _ in helpers} | {id(fn)}
    home = getattr(fn, "__module__", None)
    lines: dict[str, str] = {}
    for owner in [fn, *(inner for _, inner in helpers)]:
        space = getattr(owner, "__globals__", {})
        for name in _names_read(owner):
            if name in space and name not in RANK_NAMES and id(space[name]) not in shipped and name not in lines:
                line = _binding(name, space[name], home)
                if line:
                    lines[name] = line
    return list(lines.values())


def _source(fn: Callable) -> tuple[str, str]:
    """(name, source) of the learner's function as written, after the sources of the Triton kernels it uses and
    the lines that bind the notebook names they read (imports, constants)."""
    name = getattr(fn, "__name__", "")
    helpers = _helpers(fn)
    bindings = _bindings(fn, helpers)
    parts = ["\n".join(bindings)] if bindings else []
    for kernel, inner in reversed(helpers):
        what = "the Triton kernel" if kernel is not inner else "your helper"
        try:
            parts.append(textwrap.dedent(inspect.getsource(inner)))
        except (OSError, TypeError) as exc:
            raise CheckFailed(f"cannot read the source of {what} {inner.__name__} ({exc}); define it with "
                              f"`{'@triton.jit ' if kernel is not inner else ''}def` in a notebook cell") from None
    try:
        parts.append(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError) as exc:
        raise CheckFailed(f"cannot read the source of {name or fn!r} ({exc}); define it with `def` in a notebook "
                          "cell") from None
    if not name.isidentifier():
        raise CheckFailed(f"define your function with `def` (the ranks run its source by name), not as {name!r}")
    return name, "\n\n".join(parts)


def _program(learners: list[tuple[str, str]], ex: RankExercise) -> str:
    lines = "".join(f"{name} = {value!r}\n" for name, value in {**ex.constants(), "LEARNERS": learners}.items())
    prelude = PRELUDE.replace("# EXERCISE IMPORTS\n", textwrap.dedent(ex.imports))
    return f"{prelude}\n{lines}\n{textwrap.dedent(ex.body)}\n{EPILOGUE}"


def _run(program: str, ex: RankExercise, nprocs: int = 2) -> RankRun:
    run = run_ranks(program, nprocs=nprocs, args=(ex.backend,), timeout_s=ex.timeout_s, echo=False)
    if not run.ok and not run.timed_out and not run.results():
        # Once in a while on a loaded machine a gloo rank dies while the group forms, before any code of the
        # learner's ran: run it again, so a verdict never rests on that. Code that fails fails twice.
        run = run_ranks(program, nprocs=nprocs, args=(ex.backend,), timeout_s=ex.timeout_s, echo=False)
    return run


def _runs(program: str, ex: RankExercise) -> tuple[RankRun, RankRun | None]:
    """The program on two ranks and, for an exercise that also runs alone, on one rank beside them."""
    if not ex.also_alone:
        return _run(program, ex), None
    with ThreadPoolExecutor(2) as pool:  # two child processes at once: the one-rank run costs no extra wall time
        pair, alone = pool.submit(_run, program, ex), pool.submit(_run, program, ex, 1)
        return pair.result(), alone.result()


def rows_of(run: RankRun, index: int) -> list[dict]:
    """Each rank's row for answer `index`, by rank (fewer than 2 when a rank stopped before reporting it)."""
    return sorted((r for r in run.results() if r.get("index") == index), key=lambda r: r["rank"])


# judged_together's shared runs at most: each answer that stops one costs a fresh start of the ranks for the rest
MAX_SHARED_RUNS = 8

# answer -> its rows from both ranks, and its row from one rank alone (exercises that run alone), inside
# judged_together
_TOGETHER: dict[Callable, tuple[list[dict], list[dict]]] = {}


def answer_rows(fn: Callable, ex: RankExercise) -> tuple[list[dict], list[dict], RankRun | None]:
    """Both ranks' rows for the learner's `fn`, its one-rank row where the exercise runs alone, and the two-rank
    run (None when judged_together already ran it)."""
    if fn in _TOGETHER:
        return (*_TOGETHER[fn], None)
    run, alone = _runs(_program([_source(fn)], ex), ex)
    return rows_of(run, 0), alone_rows(alone, 0, ex.timeout_s), run


def alone_rows(alone: RankRun | None, index: int, timeout_s: float = RANK_TIMEOUT_S) -> list[dict]:
    """The one-rank run's row for answer `index`; where it reported none, a row saying how that run ended."""
    if alone is None:
        return []
    return rows_of(alone, index) or [{"rank": 0, "failed": str(failed(alone, timeout_s))}]


def failed(run: RankRun, timeout_s: float = RANK_TIMEOUT_S) -> CheckFailed:
    """What stopped the ranks, as a failed check."""
    if run.timed_out:
        return CheckFailed(f"the ranks did not finish within {timeout_s:.0f} s and were stopped")
    errors = [line for line in run.lines if "Error" in line or "WATCHDOG" in line]
    return CheckFailed(f"the ranks failed (exit {run.returncode}): " + (errors[-1][:300] if errors else
                       "; ".join(run.lines[-3:])[:300]))


def needs_two_gpus(runs_here: str, ranks: str = "ranks", gpus: str = "2 NVIDIA GPUs") -> None:
    """Fail before any rank starts where this machine has fewer than two GPUs, naming the exercises that run here."""
    if gpu_count() < 2:
        raise CheckFailed(f"this exercise {NEEDS_GPU} for each of its 2 {ranks}, and this machine has {gpu_count()}; "
                          f"run this cell on a machine with {gpus} ({runs_here} here)")


def answered(rows: list[dict], what: str) -> None:
    """Fail on what the learner's function itself did wrong on a rank: not written yet, raised."""
    for r in rows:
        if "not_implemented" in r:
            raise NotImplementedError(f"your {what} still raises NotImplementedError in the ranks")
    # a rank's own error first: a peer's lost connection is only the echo of it
    for r in sorted(rows, key=lambda r: bool(_PEER_GONE.search(r.get("raised", "")))):
        if "raised" in r:
            left = [o["rank"] for o in rows if "raised" not in o and o["rank"] != r["rank"]]
            if left and _PEER_GONE.search(r["raised"]):
                others = " and ".join(f"rank {rank}" for rank in left)
                raise CheckFailed(f"rank {r['rank']}: your {what} raised {r['raised']}; {others} returned from it "
                                  f"without an error, so {others} never met rank {r['rank']} in its collective",
                                  hint=_SKIPPED_COLLECTIVE_HINT)
            raise CheckFailed(f"rank {r['rank']}: your {what} raised {r['raised']}",
                              hint=_NOT_DEFINED_HINT if re.search(r"\bNameError\b", r["raised"]) else None)


# A collective whose peer went away: gloo's and NCCL's words for it
_PEER_GONE = re.compile(r"Connection (closed|reset) by peer|remote (process|worker|rank) (exited|crashed|closed)"
                        r"|peer (closed|exited|disconnected)", re.IGNORECASE)
_SKIPPED_COLLECTIVE_HINT = ("every rank must make the same collective calls, in the same order and with the same "
                            "sizes: a collective under `if rank == 0:` (or on any path only some ranks take) leaves "
                            "the others waiting in it until the peer's connection closes")


# The ranks run your source in fresh processes: what your notebook made outside any function that is not an import
# or a plain constant (those travel as lines, see _bindings) is not there
_NOT_DEFINED_HINT = ("each rank is a fresh Python process that runs the source of your function, your own functions "
                     "and Triton kernels it calls, with torch, dist and the exercise's imports; your notebook's "
                     "imports and plain constants (numbers, strings, tuples of them) travel with it, but a tensor or "
                     "any other object made elsewhere in your notebook does not: make it inside your function")


@contextmanager
def judged_together(ex: RankExercise, answers: Iterable[Callable]) -> Iterator[None]:
    """Inside the block, a checker of `ex` judges each of `answers` from one run of the ranks that met them all in
    turn.

    An answer whose ranks did not all report (a rank stopped, or an answer before it left the ranks out of step)
    is judged alone, as outside the block, and the answers after it meet fresh ranks together again (at most
    MAX_SHARED_RUNS runs in all; after a run that timed out, the rest are judged alone). Answers that make the ranks
    disagree about their collectives, or hang, are best judged alone from the start, since each one stops a shared
    run.
    """
    fns = list(answers)
    try:
        pending, passes = fns, 0
        while pending and passes < MAX_SHARED_RUNS:
            passes += 1
            run, alone = _runs(_program([_source(fn) for fn in pending], ex), ex)
            first_missing = None
            for index, fn in enumerate(pending):
                rows_, alone_ = rows_of(run, index), rows_of(alone, index) if alone else []
                if len(rows_) == 2 and (alone is None or alone_):
                    _TOGETHER[fn] = (rows_, alone_)
                elif first_missing is None:
                    first_missing = index
            if first_missing is None or run.timed_out or alone is not None and alone.timed_out:
                break  # all judged; or an answer hung the ranks: the rest are judged alone
            # the first answer without its rows stopped this run, or follows the one that put it out of step: it is
            # judged alone, and the answers after it meet fresh ranks
            pending = [fn for fn in pending[first_missing + 1:] if fn not in _TOGETHER]
        yield
    finally:
        for fn in fns:
            _TOGETHER.pop(fn, None)
