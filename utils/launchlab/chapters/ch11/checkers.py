"""Checkers for lab 11, "Communication inside graphs".

Exercise 1 runs your all-reduce's source, with the Triton kernels it launches, on two NCCL ranks started with
torchrun, under a watchdog per rank and a deadline for the run: nothing hangs the notebook. Every rank holds
different data, and each knows every rank's input, so each checks the sum itself. The races an idle GPU never
shows are provoked: one rank writes its input late (a sleep captured before its copy), and one rank reads slowly
(while it reads, a kernel of the checker's pulls from its peer over the same link); what such a race shows only
now and then (a missing wait before returning, a barrier some programs skip or that comes after the announcement, a
relaxed or GPU-scope signal, also behind a module's constant or a helper's default) is read in the kernels' source,
in the order every program runs it. Exercise 2 runs on a CPU,
on tables planted so that no plausible wrong rule gets every size right.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import statistics
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from ... import checking, rank_checks
from ...checking import CheckFailed, exercise
from ...rank_checks import RankExercise, answer_rows, answered, needs_two_gpus

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["MARGIN", "check_one_shot", "check_path_choice", "check_tp_mlp"]

WATCHDOG_S = 60         # one answer on one rank: Triton compiles, four graphs, a trace; a wait never answered stops it
LATE_CYCLES = 100_000   # the late rank's sleep before it writes its input (about 50 us at Hopper's clock)
SLOWER_THAN_LIBRARY = 2.0  # your kernel's time per 4 KB all-reduce may be at most this many times the library's
MARGIN = 0.10           # exercise 2: leave NCCL only for a path at least this much faster (its median)

# ---- exercise 1: a one-shot all-reduce over symmetric memory -------------------------------------------------

_ONE_SHOT = RankExercise('''
    SIZES = (2048, 777, 2 ** 21)  # 4 KB of bfloat16; an odd size no block divides; 4 MB, past a grid's worth
    CALLS = 4                     # calls per captured graph
    GROUP = dist.group.WORLD.group_name
    MOST = max(SIZES)
    library_buffer = symm_mem.empty(2048, dtype=torch.bfloat16, device=device)
    symm_mem.rendezvous(library_buffer, GROUP)
    ballast = symm_mem.empty(64 << 20, dtype=torch.bfloat16, device=device)  # 128 MB a slow reader's peer serves
    ballast_handle = symm_mem.rendezvous(ballast, GROUP)
    pulled = torch.empty_like(ballast)
    low = torch.cuda.Stream(priority=0)
    high = torch.cuda.Stream(priority=-1)


    @triton.jit
    def _pull(ptrs, dst, numel, peer: tl.constexpr, BLOCK: tl.constexpr):
        """Copy the peer's ballast here: load on the link the slow reader's own reads use."""
        src = tl.load(ptrs.to(tl.pointer_type(tl.uint64)) + peer).to(tl.pointer_type(tl.bfloat16))
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < numel), mask=offs < numel)


    def pull_from_peer():
        """On this rank, a long pull from the next rank's memory, on a low-priority stream."""
        with torch.cuda.stream(low):
            n = ballast.numel()
            _pull[(triton.cdiv(n, 4096),)](ballast_handle.buffer_ptrs_dev, pulled, n, peer=(rank + 1) % world,
                                           BLOCK=4096)


    def stage(name):
        say(f"STAGE rank={rank} {name}")


    def every_input(seed, n):
        gens = [torch.Generator(device=device).manual_seed(seed * 10 + r) for r in range(world)]
        return [torch.randn(n, generator=g, device=device).to(torch.bfloat16) for g in gens]


    def sum_of(inputs):
        return sum(t.float() for t in inputs).to(torch.bfloat16)


    def wrongness(out, inputs):
        """How far out is from the sum, and which slip it matches."""
        want = sum_of(inputs).float()
        got = out.float()
        unwritten = int(torch.isnan(got).sum())
        return {"error": (got - want).abs().nan_to_num(float("inf")).max().item(), "unwritten": unwritten,
                "as_mean": (got - want / world).abs().max().item(),
                "as_own": (got - inputs[rank].float() * world).abs().max().item()}


    def judge(learner):
        buffer = symm_mem.empty(MOST + 8192, dtype=torch.bfloat16, device=device)
        handle = symm_mem.rendezvous(buffer, GROUP)
        outs = torch.full((CALLS, MOST + 8192), float("nan"), dtype=torch.bfloat16, device=device)
        row = {"eager": [], "graphs": []}
        seed = SEED
        for n in SIZES:  # one call each, eagerly, then a second at once: a signal left set shows in the second
            for call in range(2):
                stage(f"eager call {call + 1} at {n} elements")
                seed += 1
                inputs = every_input(seed, n)
                buffer[:n].copy_(inputs[rank])
                outs[0].fill_(float("nan"))
                yours(learner, buffer[:n], handle, outs[0, :n])
                torch.cuda.synchronize()
                found = wrongness(outs[0, :n], inputs)
                found.update(n=n, call=call + 1, spilled=int((~torch.isnan(outs[0, n:].float())).sum()))
                row["eager"].append(found)
        for n in (2048, 2 ** 21):
            for case in ("late writer", "slow reader"):
                for odd in range(world):  # each rank in turn writes late, or reads slowly
                    stage(f"{case} (rank {odd}) at {n} elements: capture")
                    inputs_static = torch.empty(CALLS, n, dtype=torch.bfloat16, device=device)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.stream(high):
                        with torch.cuda.graph(graph, stream=high):
                            for i in range(CALLS):
                                if case == "late writer" and rank == odd:
                                    torch.cuda._sleep(LATE_CYCLES)
                                buffer[:n].copy_(inputs_static[i])
                                learner(buffer[:n], handle, outs[i, :n])
                    worst = {"error": 0.0, "unwritten": 0}
                    for replay in range(3):
                        stage(f"{case} (rank {odd}) at {n} elements: replay {replay + 1}")
                        seed += 1
                        every = [every_input(seed * 100 + i, n) for i in range(CALLS)]
                        for i in range(CALLS):
                            inputs_static[i].copy_(every[i][rank])
                        torch.cuda.synchronize()
                        dist.barrier()
                        if case == "slow reader" and rank == odd:
                            pull_from_peer()
                        with torch.cuda.stream(high):
                            graph.replay()
                        torch.cuda.synchronize()
                        for i in range(CALLS):
                            found = wrongness(outs[i, :n], every[i])
                            worst["error"] = max(worst["error"], found["error"])
                            worst["unwritten"] = max(worst["unwritten"], found["unwritten"])
                    row["graphs"].append({"case": case, "odd": odd, "n": n, **worst})
                    del graph
        stage("timing at 4 KB")
        row.update(time_against_library(learner, buffer, handle, outs))
        stage("trace")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # what runs inside a graph too: an answer may branch on capturing
            learner(buffer[:2048], handle, outs[1, :2048])
        row["kernels"] = {how: [i.name for i in trace.intervals(trace.record(fn), {"kernel"})]
                          for how, fn in (("eager", lambda: learner(buffer[:2048], handle, outs[0, :2048])),
                                          ("graph", graph.replay))}
        del graph
        torch.cuda.synchronize()
        return row


    def time_against_library(learner, buffer, handle, outs):
        """us per 4 KB all-reduce, yours and the library's one-shot, each a copy in and the all-reduce, 20 to a
        graph, replayed back to back."""
        n, rounds = 2048, 20
        source = torch.randn(n, device=device).to(torch.bfloat16)

        def yours_once():
            buffer[:n].copy_(source)
            learner(buffer[:n], handle, outs[0, :n])

        def library_once():
            library_buffer.copy_(source)
            torch.ops.symm_mem.one_shot_all_reduce_out(library_buffer, "sum", GROUP, outs[1, :n])

        timed = {}
        for name, once in (("yours_us", yours_once), ("library_us", library_once)):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(rounds):
                    once()
            for _ in range(2):
                graph.replay()
            torch.cuda.synchronize()
            dist.barrier()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(11)]
            marks[0].record()
            for i in range(10):
                graph.replay()
                marks[i + 1].record()
            torch.cuda.synchronize()
            timed[name] = statistics.median(a.elapsed_time(b) * 1e3 / rounds for a, b in zip(marks, marks[1:]))
            del graph
        return timed
''', "nccl", lambda: {"SEED": checking.rng().randrange(10_000), "WATCHDOG_S": WATCHDOG_S, "LATE_CYCLES": LATE_CYCLES},
    imports='''
    import statistics
    import triton
    import triton.language as tl
    import torch.distributed._symmetric_memory as symm_mem
    from launchlab import trace
    from launchlab.child import say
    ''')

def _library_kernel(name: str) -> bool:
    """A kernel of NCCL's or of PyTorch's symmetric memory, by its demangled name (a Triton kernel's name is a plain
    Python identifier; PyTorch's all-reduce kernels are C++ templates, some in an anonymous namespace)."""
    low = name.lower()
    return "nccl" in low or "c10d" in low or "symmetric_memory" in low or (
        "::" in low and any(word in low for word in ("all_reduce", "allreduce", "one_shot", "two_shot", "multimem")))


def _names(names: dict | None) -> tuple[dict[str, str], dict[str, object]]:
    """From the globals the answer's kernels read: Triton functions under other names (`cas = tl.atomic_cas`,
    `from triton.language import debug_barrier as sync`) and plain constants (`SEM = "relaxed"`, also as
    tl.constexpr)."""
    aliases, constants = {}, {}
    for name, value in (names or {}).items():
        module = getattr(value, "__module__", None)
        if callable(value) and isinstance(module, str) and module.startswith("triton.language"):
            aliases[name] = getattr(value, "__name__", name)
        plain = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
        if type(plain) in (str, int, bool):
            constants[name] = plain
    return aliases, constants


def _kernel_calls(sources: list[str], names: dict | None = None):
    """Parse the answer's kernels: (trees, helper names, calls) where each call is (node, Triton name). A call
    is Triton's when made through a module (`tl.atomic_cas`, `language.debug_barrier`) or by a bare name that no
    kernel of the answer defines (`atomic_cas` imported from triton.language, or under a name of its own); a
    learner's own helper named `atomic_signal` is not an atomic."""
    import ast

    aliases, _ = _names(names)
    trees = []
    for source in sources:
        try:
            trees.append(ast.parse(source))
        except SyntaxError:
            continue
    helpers = {d.name for t in trees for d in ast.walk(t) if isinstance(d, ast.FunctionDef)}
    calls = []
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute):
                calls.append((node, node.func.attr))
            elif isinstance(node.func, ast.Name) and node.func.id not in helpers:
                calls.append((node, aliases.get(node.func.id, node.func.id)))
    return trees, helpers, calls


def _argument(node, name: str, position: int):
    """The expression passed as `name` (or at `position`) in a call, or None."""
    for k in node.keywords:
        if k.arg == name:
            return k.value
    return node.args[position] if position < len(node.args) else None


def _constant(node, name: str, position: int, default=None, constants: dict | None = None):
    """The argument `name` (or at `position`) of a call when it is written as a literal or names a constant of the
    answer's module; `...` when it is something else (a parameter, a variable: unknown here); `default` when
    absent."""
    import ast

    arg = _argument(node, name, position)
    if arg is None:
        return default
    if isinstance(arg, ast.Constant):
        return arg.value
    if isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.USub):   # a decrement: add(slot, -1), -INC
        inner = (arg.operand.value if isinstance(arg.operand, ast.Constant) else (constants or {}).get(
            arg.operand.id, ...) if isinstance(arg.operand, ast.Name) else ...)
        return -inner if type(inner) in (int, float) else ...
    if isinstance(arg, ast.Name) and arg.id in (constants or {}):
        return constants[arg.id]
    return ...


def _takes_off(val) -> bool:
    """Whether an add of `val` counts a 32-bit flag down: a negative literal, or one past 2**31 (-1 as 0xFFFFFFFF)."""
    return type(val) is int and (val < 0 or val >= 2**31)


def _flag_move(node, called: str, constants: dict | None = None) -> str | None:
    """"set" for an atomic that raises a flag (cas 0 -> 1, xchg 1, add, or or max of a positive literal: an
    announcement), "clear" for one that takes it back to 0 (cas 1 -> 0, xchg 0, and 0: a wait that consumes, or a
    reset), "poll" for one that only reads it (add, or or max of 0); None where the literals do not say."""
    if called == "atomic_cas":
        return {(0, 1): "set", (1, 0): "clear"}.get((_constant(node, "cmp", 1, None, constants),
                                                     _constant(node, "val", 2, None, constants)))
    if called == "atomic_xchg":
        return {1: "set", 0: "clear"}.get(_constant(node, "val", 1, None, constants))
    val = _constant(node, "val", 1, None, constants)
    if called in ("atomic_add", "atomic_or", "atomic_max"):  # adding, or-ing or max-ing 0 only reads
        if called == "atomic_add" and _takes_off(val):
            return None
        return "poll" if val == 0 else "set" if isinstance(val, int) and val > 0 else None
    if called == "atomic_and":
        return "clear" if val == 0 else None
    return None


def _awaits_zero(test) -> bool:
    """Whether a spin loop's test keeps spinning until the atomic in it returns 0 (`while atomic_add(f, 0) != 0`,
    `while atomic_cas(f, 0, 1) != 0`): the wait before an announcement, for the peer to have consumed the last one."""
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant)):
        return False
    c = test.comparators[0].value
    return (isinstance(test.ops[0], ast.NotEq) and c == 0) or (isinstance(test.ops[0], ast.Eq) and c not in (0, None))


def _own_names(fn) -> set[str]:
    """The parameters and locals of a kernel or helper: the module's values of these names do not apply in it."""
    import ast

    args = fn.args
    found = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    found |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return found | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _spun_on(loop, before: list, defs: dict) -> list:
    """The calls a `while` spins on: in its test and in the helpers its test calls (`while _take(slot) != 1`), or
    assigned, in its body or in the statement `before` it, to a name its test reads (a do-while written with a
    first try before the loop)."""
    import ast

    tested = {n.id for n in ast.walk(loop.test) if isinstance(n, ast.Name)}
    found = [n for n in ast.walk(loop.test) if isinstance(n, ast.Call)]
    for stmt in loop.body + before[-1:]:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id in tested for g in targets for t in ast.walk(g)):
                found += [n for n in ast.walk(stmt.value) if isinstance(n, ast.Call)]
    calls, seen = [], set()
    while found:
        n = found.pop()
        calls.append(n)
        name = getattr(n.func, "id", None)
        if name in defs and name not in seen:
            seen.add(name)
            found += [m for m in ast.walk(defs[name]) if isinstance(m, ast.Call)]
    return calls


def _while_loops(trees):
    """Each `while` in the trees, with the statement list it stands in and its place there."""
    import ast

    for tree in trees:
        for parent in ast.walk(tree):
            for field in ("body", "orelse"):
                stmts = getattr(parent, field, None)
                if isinstance(stmts, list):
                    yield from ((loop, stmts, i) for i, loop in enumerate(stmts) if isinstance(loop, ast.While))


def _spin_calls(trees) -> tuple[set[int], set[int]]:
    """(ids of the calls a `while` spins on (_spun_on), ids of those whose spin waits for 0)."""
    import ast

    defs = {d.name: d for t in trees for d in ast.walk(t) if isinstance(d, ast.FunctionDef)}
    spins, zero = set(), set()
    for loop, stmts, i in _while_loops(trees):
        found = {id(n) for n in _spun_on(loop, stmts[:i], defs)}
        spins |= found
        if _awaits_zero(loop.test):
            zero |= found
    return spins, zero


def _acquired_after_spin(trees) -> set[int]:
    """Ids of the atomics a `while` spins on that an atomic on the same pointer (as written) acquires right after
    the loop, before any load and any other loop: a relaxed poll until the flag is set, then `atomic_add(slot, -1,
    sem="acquire")`, orders what the peer released, as a read-modify-write of its release sequence."""
    import ast

    def acquires(n) -> bool:
        sem = _argument(n, "sem", 3)
        return sem is None or (isinstance(sem, ast.Constant) and sem.value in ("acquire", "acq_rel"))

    def atomics(stmts) -> list:
        return [n for st in stmts for n in ast.walk(st) if isinstance(n, ast.Call)
                and (_called_name(n) or "").startswith("atomic_") and n.args]

    found = set()
    for loop, stmts, i in _while_loops(trees):
        before_reads = []
        for st in stmts[i + 1:]:
            if isinstance(st, (ast.While, ast.For)) or any(
                    isinstance(n, ast.Call) and _called_name(n) == "load" for n in ast.walk(st)):
                break
            before_reads.append(st)
        later = {ast.unparse(n.args[0]) for n in atomics(before_reads) if acquires(n)}
        found |= {id(n) for n in atomics([loop.test]) if ast.unparse(n.args[0]) in later}
    return found


def _passed_values(trees, node, name: str, position: int, default, constants: dict) -> list:
    """What the argument `name` of an atomic can be: its literal or constant, or, where it is a parameter of the
    helper around it, every value a call of that helper passes for it, its default included, followed through
    helpers that pass on a parameter of their own, and both sides of an `a if c else b` ([...] if unknown)."""
    import ast

    defs = [d for tree in trees for d in ast.walk(tree) if isinstance(d, ast.FunctionDef)]

    def around(n) -> list:
        return [fn for fn in defs if any(m is n for m in ast.walk(fn))]

    def values_of(expr, fn, depth: int) -> list:
        """The values expr, read inside def fn, can take."""
        own = _own_names(fn) if fn is not None else set()
        if isinstance(expr, ast.Constant):
            return [expr.value]
        if isinstance(expr, ast.IfExp):
            return values_of(expr.body, fn, depth) + values_of(expr.orelse, fn, depth)
        if isinstance(expr, ast.Call) and getattr(expr.func, "attr", getattr(expr.func, "id", None)) == "constexpr" \
                and len(expr.args) == 1:  # tl.constexpr("relaxed")
            return values_of(expr.args[0], fn, depth)
        assigned = [n.value for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                    and any(isinstance(t, ast.Name) and t.id == getattr(expr, "id", None)
                            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))] if fn else []
        if assigned and depth < 4:  # a local: what it is set to
            return [v for value in assigned for v in values_of(value, fn, depth + 1)]
        if isinstance(expr, ast.Name) and expr.id in constants and expr.id not in own:
            return [constants[expr.id]]
        if isinstance(expr, ast.Name) and fn is not None and depth < 4:
            return passed_for(fn, expr.id, depth + 1)
        return [...]

    def passed_for(fn, param: str, depth: int) -> list:
        """Every value the calls of fn pass for its parameter, its default where a call leaves it out."""
        args = fn.args
        params = [a.arg for a in args.posonlyargs + args.args]
        every = params + [a.arg for a in args.kwonlyargs]
        if param not in every:
            return [...]
        defaults = dict(zip(params[len(params) - len(args.defaults):], args.defaults, strict=False))
        defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is not None}
        values = []
        for call in (c for d in defs for c in ast.walk(d) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Name) and c.func.id == fn.name):
            passed = _argument(call, param, params.index(param)) if param in params else next(
                (k.value for k in call.keywords if k.arg == param), None)
            caller = (around(call) or [None])[-1]
            if passed is not None:
                values += values_of(passed, caller, depth)
            elif param in defaults:
                values += values_of(defaults[param], None, depth)
            else:
                values.append(...)
        return values or [...]

    inner = (around(node) or [None])[-1]
    own = _own_names(inner) if inner is not None else set()
    value = _constant(node, name, position, default, {k: v for k, v in constants.items() if k not in own})
    arg = _argument(node, name, position)
    if value is not ... or arg is None:
        return [value]
    return values_of(arg, inner, 0)


_SIXTEEN_BITS = frozenset({"bfloat16", "float16", "element_ty"})  # element_ty: out's or a buffer's own dtype


def _sums_in_sixteen_bits(sources: list[str], names: dict | None = None) -> list[str]:
    """The lines of the answer's kernels that start an accumulator in a 16-bit type (`tl.zeros(..., tl.bfloat16)`,
    `tl.full(..., dtype=out_ptr.dtype.element_ty)`): a sum kept in bfloat16 rounds after every add."""
    import ast

    _, _, calls = _kernel_calls(sources, names)
    found = []
    for node, called in calls:
        if called not in ("zeros", "full"):
            continue
        dtype = _argument(node, "dtype", 1 if called == "zeros" else 2)
        named = dtype.attr if isinstance(dtype, ast.Attribute) else dtype.id if isinstance(dtype, ast.Name) else None
        if named in _SIXTEEN_BITS:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _atomics_off_system_scope(sources: list[str], names: dict | None = None) -> list[str]:
    """The atomics in the answer's Triton kernels that do not order across GPUs: a scope other than "sys", or none
    (Triton's default is the GPU's own), sem="relaxed", an announcement with acquire, or a spinning wait with
    release; read from literals, the module's constants, and what each call of a helper passes for its parameter.
    What none of these says is left to the runs."""
    import ast

    _, constants = _names(names)
    trees, _, calls = _kernel_calls(sources, names)
    # a spin that waits for 0 before announcing, a reset or a count-down outside any spin, and a poll that an
    # acquiring atomic on the same slot follows, order nothing the protocol needs: relaxed is enough there (the
    # announcement's release and the wait's acquire do the ordering)
    spins, free = _spin_calls(trees)
    acquired = _acquired_after_spin(trees)
    found = []
    for node, called in calls:
        if not called.startswith("atomic_"):
            continue
        # atomic_cas(pointer, cmp, val, sem, scope), atomic_xchg / atomic_add(pointer, val, mask, sem, scope)
        around = [fn for tree in trees for fn in ast.walk(tree)
                  if isinstance(fn, ast.FunctionDef) and any(n is node for n in ast.walk(fn))]
        own = set().union(*(_own_names(fn) for fn in around)) if around else set()
        move = _flag_move(node, called, {k: v for k, v in constants.items() if k not in own})
        for scope, sem in itertools.product(_passed_values(trees, node, "scope", 4, "gpu", constants),
                                            _passed_values(trees, node, "sem", 3, "acq_rel", constants)):
            # an announcement must release what came before it; a wait that spins on the flag must acquire what
            # comes after it (a reset after some other wait may release)
            announces = move == "set" and sem == "acquire"
            waits = move in ("clear", "poll") and sem == "release" and id(node) in spins
            written = ast.unparse(node)[:90]
            if not (isinstance(_argument(node, "scope", 4), ast.Constant)
                    and isinstance(_argument(node, "sem", 3), ast.Constant)):
                written += f" (scope {scope!r}, sem {sem!r})" if ... not in (scope, sem) else ""
            counts_down = called == "atomic_add" and _takes_off(_constant(node, "val", 1, None, constants))
            relaxed_ok = ((move == "clear" or counts_down) and id(node) not in spins) or (
                move == "poll" and (id(node) in free or id(node) in acquired))
            if (scope is not ... and scope != "sys") or (sem == "relaxed" and not relaxed_ok):
                found.append(f"line {node.lineno}: {written}")
            elif announces or waits:
                found.append(f"line {node.lineno}: {written} ({'announces' if announces else 'waits'}"
                             f" with {sem}, where it needs {'release' if announces else 'acquire'})")
            else:
                continue
            break
    return found


_PER_PROGRAM = {"program_id", "num_programs", "load", "arange"}  # calls whose value differs between programs


def _per_program_names(defs: dict, seeds: dict | None = None,
                        varying_calls: frozenset = frozenset(_PER_PROGRAM)) -> dict[str, set[str]]:
    """Per kernel or helper, the names whose value may differ from one program to the next: bound to
    tl.program_id() or a load, or computed from such a name, or a helper's parameter passed one, or one of `seeds`
    (a kernel's parameters the launch computes from the rank)."""
    import ast

    def varies(expr, tainted: set[str]) -> bool:
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id in tainted:
                return True
            name = isinstance(n, ast.Call) and (getattr(n.func, "attr", None) or getattr(n.func, "id", None))
            if name in varying_calls:
                return True
        return False

    tainted: dict[str, set[str]] = {name: set((seeds or {}).get(name, ())) for name in defs}
    changed = True
    while changed:
        changed = False
        for name, fn in defs.items():
            for n in ast.walk(fn):
                pairs = []
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    pairs = [(t, n.value) for t in targets]
                elif isinstance(n, ast.NamedExpr):  # (pid := tl.program_id(0))
                    pairs = [(n.target, n.value)]
                elif isinstance(n, ast.For):
                    pairs = [(n.target, n.iter)]
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defs:
                    helper = defs[n.func.id].args
                    params = [a.arg for a in helper.posonlyargs + helper.args]
                    passed = list(zip(params, n.args, strict=False)) + [(k.arg, k.value) for k in n.keywords if k.arg]
                    for param, arg in passed:
                        if param not in tainted[n.func.id] and varies(arg, tainted[name]):
                            tainted[n.func.id].add(param)
                            changed = True
                for target, value in pairs:
                    if varies(value, tainted[name]):
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name) and t.id not in tainted[name]:
                                tainted[name].add(t.id)
                                changed = True
    return tainted


_SMALL = 2**62  # the evaluator below gives up on larger numbers and longer strings


def _small_value(expr, space: dict):
    """expr's value where it is built from literals and names in `space` with arithmetic, comparisons and boolean
    operators on small ints, bools and short strings; ... otherwise. No call, no attribute, nothing large: a
    learner's dead branch (`if 9 ** 9 ** 9:`) is read, not run."""
    import ast
    import operator

    binary = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
              ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
              ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
    compare = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
               ast.Gt: operator.gt, ast.GtE: operator.ge}

    def small(v) -> bool:
        return (type(v) is bool or v is None or (type(v) is int and abs(v) < _SMALL)
                or (type(v) is str and len(v) < 256))

    def ev(n):
        if isinstance(n, ast.Constant):
            return n.value if small(n.value) else ...
        if isinstance(n, ast.Name):
            return space.get(n.id, ...)
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if v is ... or type(v) is str:
                return ...
            return {ast.Not: lambda: not v, ast.USub: lambda: -v, ast.UAdd: lambda: +v,
                    ast.Invert: lambda: ~v}.get(type(n.op), lambda: ...)()
        if isinstance(n, ast.BinOp) and type(n.op) in binary:
            a, b = ev(n.left), ev(n.right)
            if a is ... or b is ... or type(a) is not int or type(b) is not int:
                return ...
            if (isinstance(n.op, ast.Pow) and (b < 0 or b > 64 or abs(a) > 2**16)) or \
                    (isinstance(n.op, ast.LShift) and not 0 <= b <= 62) or \
                    (isinstance(n.op, (ast.FloorDiv, ast.Mod)) and b == 0) or (isinstance(n.op, ast.RShift) and b < 0):
                return ...
            v = binary[type(n.op)](a, b)
            return v if small(v) else ...
        if isinstance(n, ast.Compare) and all(type(op) in compare for op in n.ops):
            left = ev(n.left)
            for op, right_node in zip(n.ops, n.comparators, strict=True):
                right = ev(right_node)
                if left is ... or right is ...:
                    return ...
                try:
                    if not compare[type(op)](left, right):
                        return False
                except TypeError:
                    return ...
                left = right
            return True
        if isinstance(n, ast.BoolOp):   # Python's value: the first falsy (and) or truthy (or) operand, else the last
            v = ...
            for operand in n.values:
                v = ev(operand)
                if v is ...:
                    return ...
                if bool(v) != isinstance(n.op, ast.And):
                    return v
            return v
        if isinstance(n, ast.IfExp):
            test = ev(n.test)
            return ... if test is ... else ev(n.body if test else n.orelse)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Tuple):   # ("sys", "gpu")[rank]
            index = ev(n.slice)
            if type(index) is not int or not -len(n.value.elts) <= index < len(n.value.elts):
                return ...
            return ev(n.value.elts[index])
        return ...

    return ev(expr)


class _TooLarge(Exception):
    """The kernels unroll into more than the reading below will follow: their static rules are left to the runs."""


def _events(sources: list[str], names: dict | None = None, launch: dict | None = None,
            rank: int | None = None, world: int | None = None) -> list[list[tuple[str, bool]]]:
    """Per launched kernel, in the order one program runs them: ("B", sure) for a tl.debug_barrier(), ("W", sure)
    for a wait (a loop that spins on an atomic which does not raise the flag), ("A", sure) for an announcement (an
    atomic that raises one), followed by ("X", sure) where it is an exchange, an or or a max outside a spin or ("D", sure) where
    it is an add outside a spin or ("T", sure) an add that a spin tries, ("K", sure) for an atomic that takes a
    flag back to 0, followed by ("Q", sure) where it does so from any count (an exchange or an and with 0),
    ("N", sure) for an add that counts one down, ("Z", sure) for a spin
    until a flag reads 0, ("R", True) for a load of data (not of a pointer), ("S", True) for a tl.store. A helper is
    followed at each call, with the literals it is passed; a loop over literal bounds is unrolled; an `if` whose
    test those literals decide takes its side. Not sure: a barrier or wait that some programs or sizes skip (under
    an `if` on a value that differs between programs, unless both sides run the same, or in a runtime loop whose
    bounds are computed from values that are not constexpr, or in a spin loop's body). An `if` on anything else (a
    constexpr) takes the side with more, unless the launch fixes it: a literal, or `rank` for an argument computed
    from the rank (PER_RANK; left unknown when rank is None). A spin is a `while` that spins on an atomic
    (_spun_on). Raises _TooLarge past a budget of events."""
    import ast

    aliases, constants = _names(names)
    trees, _, _ = _kernel_calls(sources, names)
    defs = {d.name: d for t in trees for d in ast.walk(t) if isinstance(d, ast.FunctionDef)}
    spun, _ = _spin_calls(trees)   # a do-while's first try, before its loop, spins as its retries do
    def launch_params(name: str) -> dict:
        """The kernel's launch values by parameter name (positions mapped to names)."""
        named = {}
        for key, v in (launch or {}).get(name, {}).items():
            if key is LAUNCHES:   # ways not yet expanded (_launch_ways): none of them is known to hold
                continue
            if isinstance(key, int):
                args = defs[name].args.posonlyargs + defs[name].args.args
                key = args[key].arg if key < len(args) else None
            if key is not None:
                named[key] = v
        return named

    rank_seeds = {name: {k for k, v in launch_params(name).items() if v is VARIES_BY_RANK} for name in defs}
    per_program = _per_program_names(defs, rank_seeds)
    per_rank = _per_program_names(defs, rank_seeds, frozenset())   # what differs between ranks, not programs
    budget = [20_000]

    scope = {name: {k: v for k, v in constants.items() if k not in _own_names(fn)} for name, fn in defs.items()}
    constexpr = {name: {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
                        if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
                 for name, fn in defs.items()}

    def params(fn) -> list[str]:
        return [a.arg for a in fn.args.posonlyargs + fn.args.args]

    def called(n) -> str | None:
        if isinstance(n.func, ast.Attribute):
            return n.func.attr
        if isinstance(n.func, ast.Name):
            return n.func.id if n.func.id in defs else aliases.get(n.func.id, n.func.id)
        return None

    def value(expr, fn: str, env: dict):
        """expr's value from literals, the module's constants and env, or ... where they do not decide it."""
        return _small_value(expr, {**scope.get(fn, {}), **env})

    def is_atomic(n) -> bool:
        name = called(n)
        return bool(name) and name.startswith("atomic_") and name not in defs

    def varies(test, fn: str) -> bool:
        return any((isinstance(n, ast.Name) and n.id in per_program[fn]) or (isinstance(n, ast.Call) and (
            called(n) in _PER_PROGRAM)) for n in ast.walk(test))

    def varies_by_rank(test, fn: str) -> bool:
        return any(isinstance(n, ast.Name) and n.id in per_rank[fn] for n in ast.walk(test))

    def unsure(events):
        return [(kind, kind in "RS") for kind, _ in events]

    # names a kernel turns into pointers (`raw = tl.load(pads + peer)`, then `raw.to(tl.pointer_type(...))`): a load
    # into one reads the buffer table, not data
    pointer_names = {name: {n.func.value.id for n in ast.walk(fn) if isinstance(n, ast.Call)
                            and isinstance(n.func, ast.Attribute) and n.func.attr == "to"
                            and isinstance(n.func.value, ast.Name) and "pointer_type" in ast.unparse(n)}
                     for name, fn in defs.items()}

    def calls_in(expr, fn: str, env: dict, seen: frozenset, spinning: bool = False) -> list:
        found = []
        pointers = {id(n.func.value) for n in ast.walk(expr) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute) and n.func.attr == "to"
                    and "pointer_type" in ast.unparse(n)}
        pointers |= {id(n.value) for n in ast.walk(expr) if isinstance(n, ast.Assign) and len(n.targets) == 1
                     and isinstance(n.targets[0], ast.Name) and n.targets[0].id in pointer_names.get(fn, ())}
        for n in ast.walk(expr):
            if not isinstance(n, ast.Call):
                continue
            budget[0] -= 1
            if budget[0] < 0:
                raise _TooLarge
            name = called(n)
            if name == "debug_barrier" and (name not in defs or isinstance(n.func, ast.Attribute)):
                found.append(("B", True))
            elif name == "store":
                found.append(("S", True))
            elif name == "load" and id(n) not in pointers:
                found.append(("R", True))
            elif is_atomic(n) and name == "atomic_add" and _takes_off(
                    _constant(n, "val", 1, None, {**scope.get(fn, {}), **env})):
                found.append(("N", True))  # counts a flag down: one announcement consumed
            elif is_atomic(n) and _flag_move(n, name, {**scope.get(fn, {}), **env}) == "set":
                found.append(("A", True))
                tried = spinning or id(n) in spun
                if name in ("atomic_xchg", "atomic_or", "atomic_max") and not tried:  # 1 over a 1 is lost
                    found.append(("X", True))
                elif name == "atomic_add":  # 1 onto a 1 makes 2; in a spin, a tentative add undone if not 0
                    found.append(("T" if tried else "D", True))
            elif is_atomic(n) and _flag_move(n, name, {**scope.get(fn, {}), **env}) == "clear":
                found.append(("K", True))  # takes the slot back to 0, whatever count it holds, or only from 1
                if name != "atomic_cas":
                    found.append(("Q", True))  # whatever count it holds: an exchange or an and with 0
            elif name in defs and name not in seen | {fn}:
                helper = defs[name]
                bound = {p: v for p, a in zip(params(helper), n.args, strict=False)
                         if (v := value(a, fn, env)) is not ...}
                bound.update({k.arg: v for k in n.keywords if k.arg and (v := value(k.value, fn, env)) is not ...})
                found += body(walk(helper.body, name, bound, seen | {fn}))
        return found

    def trips(loop, fn: str, env: dict):
        """The values a for loop's target takes, where literals decide them and they are few; else None."""
        bounds = loop.iter.args if isinstance(loop.iter, ast.Call) else []
        if not (bounds and len(bounds) <= 3 and isinstance(loop.target, ast.Name)):
            return None
        values = [value(b, fn, env) for b in bounds]
        if not all(type(v) is int for v in values) or (len(values) == 3 and values[2] == 0):
            return None
        span = range(*values)
        return span if len(span) <= 64 else None

    def may_skip(loop, fn: str) -> bool:
        """A runtime loop whose bounds are computed from values that are not constexpr may run no trip."""
        if isinstance(loop.iter, ast.Call) and (getattr(loop.iter.func, "attr", None) == "static_range"):
            return False
        bounds = loop.iter.args if isinstance(loop.iter, ast.Call) else [loop.iter]
        static = constexpr.get(fn, set()) | set(scope.get(fn, {}))
        return not all(isinstance(b, (ast.Name, ast.Constant, ast.Attribute)) or all(
            n.id in static for n in ast.walk(b) if isinstance(n, ast.Name)) for b in bounds)

    def ends(side: list) -> bool:
        """Whether a side's events end in a return: nothing after it runs."""
        return bool(side) and side[-1][0] == "E"

    def body(side: list) -> list:
        """A side's events without its closing return."""
        return side[:-1] if ends(side) else side

    def walk(stmts: list, fn: str, env: dict, seen: frozenset) -> list:
        """The events of a statement list, ending in ("E", True) where it returns."""
        events = []
        env = dict(env)  # a name set from a value the launch decides (ME: tl.constexpr = rank) is read after it
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.IfExp):  # `f() if c else g()` alone
                stmt = ast.If(test=stmt.value.test, body=[ast.Expr(stmt.value.body)],
                              orelse=[ast.Expr(stmt.value.orelse)])
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.BoolOp) and len(stmt.value.values) == 2:
                test, then_expr = stmt.value.values   # `c and f()` runs f() only where c holds; `c or f()` where not
                if isinstance(stmt.value.op, ast.Or):
                    test = ast.UnaryOp(op=ast.Not(), operand=test)
                stmt = ast.If(test=test, body=[ast.Expr(then_expr)], orelse=[])
            if isinstance(stmt, ast.Return):
                if stmt.value is not None:
                    events += calls_in(stmt.value, fn, env, seen)
                return events + [("E", True)]
            if isinstance(stmt, ast.If):
                events += calls_in(stmt.test, fn, env, seen)
                decided = value(stmt.test, fn, env)
                then = walk(stmt.body, fn, env, seen)
                other = walk(stmt.orelse, fn, env, seen)
                if decided is not ...:
                    events += then if decided else other
                    if ends(then if decided else other):
                        return events
                elif varies(stmt.test, fn):
                    same = [k for k, _ in then if k not in "RSDKNTQ"] == [k for k, _ in other if k not in "RSDKNTQ"]
                    if ends(then) and ends(other):
                        return events + (max(then, other, key=len) if same
                                         else unsure(body(then) + body(other)) + [("E", True)])
                    if ends(then) or ends(other):  # some return here, the others go on to what follows
                        if varies_by_rank(stmt.test, fn):  # a rank that returns leaves its peers waiting
                            return events + unsure(body(then) + body(other)) + unsure(
                                body(walk(stmts[i + 1:], fn, env, seen)))
                        # programs that return here read and write nothing more, on every rank alike (the same
                        # test, the same grid): the programs that go on are the ones the rules are about
                        events += other if ends(then) else then
                        continue
                    # the same handshakes on both sides: read the side with more reads and stores, in its order
                    events += max(then, other, key=len) if same else unsure(then + other)
                else:
                    def weight(side):
                        return sum(sure for kind, sure in side if kind not in "RSDKNTQ")
                    if ends(then) != ends(other):  # a constexpr exit: read the side that goes on
                        events += other if ends(then) else then
                        continue
                    more = max((then, other), key=lambda side: (weight(side), len(side)))
                    events += more
                    if ends(more):
                        return events
            elif isinstance(stmt, ast.For):
                events += calls_in(stmt.iter, fn, env, seen)
                span = trips(stmt, fn, env)
                if span is not None:
                    for trip in span:  # unrolled, as tl.static_range is
                        events += body(walk(stmt.body, fn, {**env, stmt.target.id: trip}, seen))
                else:
                    inner = body(walk(stmt.body, fn, env, seen))
                    events += unsure(inner) if may_skip(stmt, fn) else inner
            elif isinstance(stmt, ast.While):
                events += calls_in(stmt.test, fn, env, seen, spinning=True)
                atomics = [n for n in _spun_on(stmt, stmts[:i], defs) if is_atomic(n)]
                scoped = {**scope.get(fn, {}), **env}   # constexprs the launch fixes (INC=1) count as literals
                if any(_flag_move(n, called(n), scoped) != "set" for n in atomics) and not _awaits_zero(stmt.test):
                    events.append(("W", True))
                elif atomics and _awaits_zero(stmt.test):
                    events.append(("Z", True))  # waits for the slot to be free: the last announcement consumed
                events += unsure(body(walk(stmt.body, fn, env, seen)))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            else:
                events += calls_in(stmt, fn, env, seen)
            simple = (isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
                      and len(targets := stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) == 1
                      and isinstance(targets[0], ast.Name))
            for n in ast.walk(stmt):   # what this statement stores, the read no longer knows (augmented, unpacked,
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):   # set in a branch or a loop)
                    env.pop(n.id, None)
            if simple and (v := value(stmt.value, fn, env)) is not ...:
                env[targets[0].id] = v
        return events

    called_somewhere = {n.func.id for t in trees for n in ast.walk(t)
                        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defs}
    launched = [name for name in defs if name not in called_somewhere]  # the kernels launched, not called

    def at_launch(name: str) -> dict:
        """The kernel's parameters the launch fixes: literals, the rank itself bound to `rank` and the world size to
        `world` (while the kernels are read per rank)."""
        bound = {PER_RANK: rank, PER_WORLD: world if rank is not None else None}
        return {key: bound.get(v, v) for key, v in launch_params(name).items()
                if v is not VARIES_BY_RANK and bound.get(v, v) is not None}

    return [body(walk(defs[name].body, name, at_launch(name), frozenset())) for name in launched]


def _handshakes(sources: list[str], every_program: bool = True, names: dict | None = None,
                launch: dict | None = None, rank: int | None = None, world: int | None = None) -> tuple[int, int, int]:
    """(atomics, tl.debug_barrier() calls, waits) in the answer's Triton kernels as one program runs them (see
    _events): those every program is sure to run, or, not every_program, all of them."""
    _, _, calls = _kernel_calls(sources, names)
    atomics = sum(called.startswith("atomic_") for _, called in calls)
    runs = [e for kernel in _events(sources, names, launch, rank, world) for e in kernel if e[1] or not every_program]
    return atomics, sum(kind == "B" for kind, _ in runs), sum(kind == "W" for kind, _ in runs)


def _barrier_before_exit(sources: list[str], names: dict | None = None, launch: dict | None = None,
                         rank: int | None = None, world: int | None = None) -> bool:
    """Whether every program runs a tl.debug_barrier() between its last load of data and the announcement after
    it, so no thread still reads a peer's buffer when the peer hears it may go on."""
    for kernel in _events(sources, names, launch, rank, world):
        reads = [i for i, (kind, _) in enumerate(kernel) if kind == "R"]
        after = [i for i, (kind, _) in enumerate(kernel) if kind == "A" and reads and i > reads[-1]]
        if after and not any(kind == "B" and sure for kind, sure in kernel[reads[-1]:after[0]]):
            return False
    return True


def _barrier_after_wait(sources: list[str], names: dict | None = None, launch: dict | None = None,
                        rank: int | None = None, world: int | None = None) -> bool:
    """Whether every read of data that follows a wait has a tl.debug_barrier() between them, so no thread reads a
    peer's buffer before the one thread that waited has seen every peer's announcement."""
    for kernel in _events(sources, names, launch, rank, world):
        waited = False
        for kind, _ in kernel:
            if kind == "W":
                waited = True
            elif kind == "B":
                waited = False
            elif kind == "R" and waited:
                return False
    return True


def _announcements_wait_for_a_free_slot(sources: list[str], names: dict | None = None, launch: dict | None = None,
                                        rank: int | None = None, world: int | None = None) -> bool:
    """Whether the answer has no unguarded announcement (_unguarded_announcement)."""
    return _unguarded_announcement(sources, names, launch, rank, world) is None


def _unguarded_announcement(sources: list[str], names: dict | None = None, launch: dict | None = None,
                            rank: int | None = None, world: int | None = None) -> str | None:
    """"exchange" where an exchange, an or or a max (`tl.atomic_xchg(slot, 1)`) announces outside a spin and after
    no spin until that slot reads 0: on a slot the peer has not consumed yet it writes 1 over 1, and one
    announcement is lost. "add" where an add announces so, in a kernel that consumes by taking a slot back to 0
    (cas 1 -> 0, xchg 0, and 0): a second add before the peer consumes the first makes 2, which cas 1 -> 0 never
    matches and xchg 0 takes as one. "kept" where an add announces, guarded or not, in a kernel that never counts
    a slot down nor takes it back to 0: the pads are not back at 0 after the call. "retry" where a spin tries an add (and
    undoes it unless the slot read 0) in a kernel that consumes with an exchange or an and with 0, which can take
    the tentative add as an announcement. None where none of these (an add with a wait that takes one off counts
    right)."""
    for kernel in _events(sources, names, launch, rank, world):
        free = False
        clears = any(kind == "K" for kind, _ in kernel)
        counts_down = any(kind == "N" for kind, _ in kernel)
        if any(kind == "T" for kind, _ in kernel) and any(kind == "Q" for kind, _ in kernel):
            return "retry"
        for kind, _ in kernel:
            if kind == "Z":
                free = True
            elif kind in "XD":
                if not free and kind == "X":
                    return "exchange"
                if not free and clears:
                    return "add"
                if kind == "D" and not (clears or counts_down):
                    return "kept"
                free = False
    return None


def _waits_after_sum(sources: list[str], names: dict | None = None, launch: dict | None = None,
                     rank: int | None = None, world: int | None = None) -> bool:
    """Whether every kernel that reads data waits for its peers after its last read, in every program: the wait
    before returning, after which no peer reads this rank's buffer."""
    for kernel in _events(sources, names, launch, rank, world):
        reads = [i for i, (kind, _) in enumerate(kernel) if kind == "R"]
        waits = [i for i, (kind, sure) in enumerate(kernel) if kind == "W" and sure]
        if reads and not (waits and waits[-1] > reads[-1]):
            return False
    return True


class _PerRank:
    """A launch argument computed from the rank: PER_RANK when it is the rank itself (`rank=handle.rank`), a
    constexpr each rank compiles with its own value, so the kernels are read once per rank; VARIES_BY_RANK when it is
    computed from the rank (`FIRST=handle.rank == 0`), so an `if` on it is read as one on tl.program_id(); PER_WORLD
    when it is the world size, bound to the number of ranks while the kernels are read per rank."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


PER_RANK, VARIES_BY_RANK, PER_WORLD = _PerRank("PER_RANK"), _PerRank("VARIES_BY_RANK"), _PerRank("PER_WORLD")


def _called_name(n) -> str | None:
    """The name a call calls: `f` for f(...) and x.f(...)."""
    return getattr(n.func, "attr", None) or getattr(n.func, "id", None)


def _is_rank(expr, aliases: frozenset) -> bool:
    """Whether an expression is the rank itself: `rank` or a name set to it, `.rank`, a call whose name says rank
    (get_rank(), local_rank(), a helper of the learner's; not num_ranks()), the RANK environment variable, or this rank's device index (the ranks
    run one to a GPU, in order), read through int() or not."""
    import ast

    if isinstance(expr, ast.Call) and _called_name(expr) == "int" and len(expr.args) == 1:
        return _is_rank(expr.args[0], aliases)
    return ((isinstance(expr, ast.Name) and expr.id in aliases)
            or (isinstance(expr, ast.Attribute) and (expr.attr == "rank" or (
                expr.attr == "index" and isinstance(expr.value, ast.Attribute) and expr.value.attr == "device")))
            or (isinstance(expr, ast.Call) and ((_called_name(expr) or "").lower().endswith("rank")
                                                or _called_name(expr) == "current_device"))
            or (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant)
                and "RANK" in str(expr.slice.value)))


def _is_world(expr, aliases: frozenset) -> bool:
    """Whether an expression is the world size: `world` or a name set to it, `.world_size`, get_world_size()."""
    import ast

    return ((isinstance(expr, ast.Name) and expr.id in aliases)
            or (isinstance(expr, ast.Attribute) and expr.attr == "world_size")
            or (isinstance(expr, ast.Call) and _called_name(expr) == "get_world_size"))


def _mentions_rank(expr, ranked: frozenset = frozenset({"rank"})) -> bool:
    """Whether an expression reads the rank anywhere in it (see _is_rank; `ranked`: the names that hold it)."""
    import ast

    return any(_is_rank(n, ranked) for n in ast.walk(expr))


def _assigned(tree) -> list[tuple[object, object]]:
    """(target name node, value) for every name the function sets, tuples unpacked pairwise
    (`r, w = handle.rank, handle.world_size`)."""
    import ast

    pairs = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Name):
                    pairs.append((t, n.value))
                elif isinstance(t, ast.Tuple):
                    values = n.value.elts if isinstance(n.value, ast.Tuple) and len(n.value.elts) == len(t.elts) \
                        else [n.value] * len(t.elts)
                    pairs += [(e, v) for e, v in zip(t.elts, values, strict=True) if isinstance(e, ast.Name)]
    return pairs


def _under_rank_test(tree, ranked: frozenset) -> set[int]:
    """ids of the nodes the wrapper runs only under an `if` whose test reads the rank: what one rank does and
    another does not."""
    import ast

    inside: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.IfExp)) and _mentions_rank(n.test, ranked):
            for branch in (n.body, n.orelse) if isinstance(n, ast.If) else ([n.body], [n.orelse]):
                for stmt in branch:
                    inside.update(id(x) for x in ast.walk(stmt))
    return inside


def _rank_names(tree) -> tuple[frozenset, frozenset, frozenset]:
    """The names the wrapper sets to the rank itself (`r = handle.rank`; `rank` always), every name it sets from the
    rank in any way (`first = r == 0`, or set under an `if` on the rank to another value than elsewhere), and the
    names it sets to the world size, each to a fixed point."""
    import ast

    aliases, ranked, worlds = {"rank"}, {"rank"}, {"world", "world_size"}
    pairs = _assigned(tree)
    values_of: dict[str, set[str]] = {}
    for target, value in pairs:
        values_of.setdefault(target.id, set()).add(ast.dump(value))
    changed = True
    while changed:
        changed = False
        controlled = _under_rank_test(tree, frozenset(ranked))
        for target, value in pairs:
            for group, test in ((aliases, _is_rank), (ranked, _mentions_rank), (worlds, _is_world)):
                if target.id not in group and (test(value, frozenset(group)) or (
                        group is ranked and id(target) in controlled and len(values_of[target.id]) > 1)):
                    group.add(target.id)
                    changed = True
    return frozenset(aliases), frozenset(ranked), frozenset(worlds)


def _launch_literals(wrapper: Callable) -> dict[str, dict[str | int, object]]:
    """Per kernel the answer's function launches (`kernel[grid](..., EXIT=False)`), the values it passes that the
    reading can use, by keyword or by position (an int key): literals, constexprs fixed at launch, so an `if EXIT:`
    in the kernel is read as it runs; PER_RANK for the rank itself, so an `if rank == 0:` is read as each rank runs it;
    VARIES_BY_RANK for a value computed from the rank, or one that launches under an `if` on the rank disagree on,
    read as a value that differs between programs; PER_WORLD for the world size. `**cfg` from a dict literal is
    read key by key. Where two launches of a kernel disagree on anything else, the name is left out."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(wrapper)))
    except (OSError, TypeError, SyntaxError):
        return {}
    aliases, ranked, worlds = _rank_names(tree)
    controlled = _under_rank_test(tree, ranked)
    dicts = {t.id: v for t, v in _assigned(tree) if isinstance(v, ast.Dict)}

    def read(arg):
        if _is_rank(arg, aliases):
            return PER_RANK
        if _mentions_rank(arg, ranked):
            return VARIES_BY_RANK
        if _is_world(arg, worlds):
            return PER_WORLD
        if isinstance(arg, ast.Constant) and type(arg.value) in (int, bool, str):
            return arg.value
        return ...

    found: dict[str, dict[str | int, object]] = {}
    by_rank: dict[str, list[dict]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name):
            keywords = []
            for k in n.keywords:
                if k.arg:
                    keywords.append((k.arg, k.value))
                elif isinstance(k.value, ast.Name) and k.value.id in dicts:   # **cfg, cfg a dict literal
                    d = dicts[k.value.id]
                    keywords += [(key.value, v) for key, v in zip(d.keys, d.values, strict=True)
                                 if isinstance(key, ast.Constant) and isinstance(key.value, str)]
            positional = []
            for a in n.args:
                if isinstance(a, ast.Starred):   # positions after *args are not known
                    break
                positional.append(a)
            values = {key: v for key, arg in keywords + list(enumerate(positional)) if (v := read(arg)) is not ...}
            name = n.func.value.id
            if id(n) in controlled:   # launched one way on one rank, another way on another: read each way
                by_rank.setdefault(name, []).append(values)
                continue
            found[name] = values if name not in found else {
                k: v for k, v in values.items() if found[name].get(k, ...) == v}
    for name, ways in by_rank.items():
        ways = [way for i, way in enumerate(ways) if way not in ways[:i]]
        if name not in found and len(ways) == 1:
            found[name] = ways[0]
        else:
            found[name] = {LAUNCHES: ways + ([found[name]] if name in found else [])}
    return found


LAUNCHES = _PerRank("LAUNCHES")   # key of a kernel launched one way on one rank, another way on another


def _launch_ways(launch: dict | None) -> list[dict | None]:
    """Each way the answer launches its kernels, one launch dict each: a kernel launched under an `if` on the rank
    with other values on each side is read once per side."""
    import itertools

    if not launch:
        return [launch]
    options = [[(name, way) for way in values[LAUNCHES]] if LAUNCHES in values else [(name, values)]
               for name, values in launch.items()]
    return [dict(choice) for choice in itertools.product(*options)]


_TWO_WAITS = ("a one-shot all-reduce waits twice, before it reads (every input is in) and before it returns (every "
              "peer has read)")
_LATENT = ("The Triton this course runs happens to place a barrier around a spin-loop atomic, so such a kernel runs "
           "right today; Triton does not promise it")


# what an announcement made with no spin until its slot is free says, and why it is wrong (_unguarded_announcement)
_ANNOUNCE_AS_SPEC = ("announce with tl.atomic_cas(slot, 0, 1, sem=\"release\", scope=\"sys\") in a loop that spins "
                     "while it returns 1, as the spec says")
# what an announcement made with no spin until its slot is free, or never consumed, says: what, why, what to do
_UNGUARDED = {
    "exchange": ("your kernels announce with an exchange, an or or a max (tl.atomic_xchg(slot, 1)) without first "
                 "waiting for the slot to read 0",
                 "if the peer has not yet consumed your last announcement, the new one writes 1 over 1 and is lost, "
                 "and the peer's next wait never ends", _ANNOUNCE_AS_SPEC),
    "add": ("your kernels announce with an add (tl.atomic_add(slot, 1)) without first waiting for the slot to read "
            "0, and consume by setting the slot back to 0 (a cas 1 -> 0, an exchange or an and with 0)",
            "a peer announces before it consumes, so you can pass the barrier and announce again before it has "
            "consumed your last announcement; the slot then holds 2, which a cas 1 -> 0 never matches (the peer "
            "waits forever) and an exchange with 0 takes as one announcement (two ranks on an idle GPU almost never "
            "show it)", _ANNOUNCE_AS_SPEC),
    "retry": ("your kernels announce with an add they undo unless the slot read 0, and consume with an exchange or "
              "an and with 0",
              "the consume can run between a peer's tentative add and its undo: it takes the add as an announcement, "
              "and the undo then counts the slot below 0",
              "consume with tl.atomic_cas(slot, 1, 0, sem=\"acquire\", scope=\"sys\") in a loop that spins until it "
              "returns 1: a tentative add makes it fail and try again"),
    "kept": ("your kernels announce with an add (tl.atomic_add(slot, 1)) and never count the slot down or take it "
             "back to 0",
             "the spec has every flag consumed by its owner, so the pads are back at 0 after every call; counts that "
             "only grow leave them non-zero, a wait for a count fixed when a graph was captured does not wait on its "
             "replays, and a kernel that shares the pads (the library's one-shot uses the same slots) reads the "
             "wrong values",
             "consume each announcement after your wait: tl.atomic_cas(slot, 1, 0, sem=\"acquire\", scope=\"sys\") "
             "in a loop that spins until it returns 1, as the spec says, so the pads are back at 0 when the call "
             "returns"),
}


# where a handshake's tl.debug_barrier() calls must stand: the rule, what breaking it says, and why
_BARRIERS_PLACED = (
    (_barrier_after_wait, "your kernels read a buffer after a wait with no tl.debug_barrier() between them, in every "
     "program", "one thread runs the waiting atomic; a barrier right after the wait keeps every other thread of the "
     "program from reading a peer's buffer before the wait is over (a barrier before the wait does not)."),
    (_barrier_before_exit, "your kernels announce that they are done without a tl.debug_barrier() between their last "
     "read of a buffer and the announcement, in every program", "one thread runs the announcing atomic; a barrier "
     "just before it keeps it until every thread of the program has finished reading the peers' buffers."),
)


def _read_in_source(sources: list[str], names: dict, launch: dict | None = None,
                    world: int | None = None) -> CheckFailed | None:
    """The first of exercise 1's rules read in the kernels' source that they break, or None: what races show only
    now and then, checked every time. Where the launch passes the rank, the kernels are read as each of the `world`
    ranks compiles them, so a barrier under `if rank == 0:` is missing on the other ranks."""
    ways = _launch_ways(launch)
    for way in ways:
        per_rank = world is not None and any(v is PER_RANK for kernel in (way or {}).values() for v in kernel.values())
        for rank in range(world) if per_rank else (None,):
            broken = _read_rules(sources, names, way, rank, world)
            if broken is not None:
                if rank is not None and any(_read_rules(sources, names, way, other, world) is None
                                            for other in range(world)):
                    broken = CheckFailed(f"as rank {rank} compiles them (with the rank its launch passes): {broken}",
                                         hint=broken.hint)
                if len(ways) > 1:
                    fixed = ", ".join(f"{k}={v!r}" for kernel in way.values() for k, v in kernel.items()
                                      if not isinstance(k, int) and not isinstance(v, _PerRank))
                    broken = CheckFailed(f"as one of your launches runs them ({fixed}): {broken}", hint=broken.hint)
                return broken
    return None


def _read_rules(sources: list[str], names: dict, launch: dict | None, rank: int | None,
                world: int | None = None) -> CheckFailed | None:
    """_read_in_source's rules, for one rank's values of the launch arguments computed from the rank (None: not
    bound)."""
    loose = _atomics_off_system_scope(sources, names)
    if loose:
        return CheckFailed(f"{len(loose)} atomic(s) in your kernels do not order memory across GPUs: {loose[0]}",
                           hint="give every signal atomic scope=\"sys\" (the peer is another GPU; the default scope "
                                "is this GPU only) and release (announce) or acquire (wait) semantics: a relaxed "
                                "signal does not order the buffer's contents with the flag, so a peer may see the "
                                "flag and still read what the buffer held before")
    # One thread of a program runs a scalar atomic. Triton 3.6 happens to put a bar.sync around a spin-loop atomic
    # whose result it uses (the result travels through shared memory), so a kernel without tl.debug_barrier()
    # runs right today; nothing in Triton promises it, so the barrier is read in the source.
    atomics, barriers, waits = _handshakes(sources, names=names, launch=launch, rank=rank, world=world)
    _, any_barriers, any_waits = _handshakes(sources, every_program=False, names=names, launch=launch, rank=rank, world=world)
    skipped = (" ({} more under an `if` on a value that differs between programs, such as tl.program_id(), or in a "
               "loop whose bounds are computed: some programs or sizes skip them)")
    if atomics and waits < 2:  # the race a slow reader shows only now and then: read, so it is caught every time
        return CheckFailed(f"your kernels wait for their peers {waits} time(s) a call in every program"
                           + (skipped.format(any_waits - waits) if any_waits > waits else "")
                           + f": {_TWO_WAITS}",
                           hint=RACE_HINTS["slow reader"])
    unguarded = _unguarded_announcement(sources, names, launch, rank, world) if atomics else None
    if unguarded:
        what, why, fix = _UNGUARDED[unguarded]
        return CheckFailed(what, hint=f"{why}: {fix}")
    if atomics and not _waits_after_sum(sources, names, launch, rank, world):
        return CheckFailed(f"your kernels wait for their peers only before they read the peers' buffers, not after: "
                           f"{_TWO_WAITS}", hint=RACE_HINTS["slow reader"])
    if atomics and barriers < 2 * min(waits, 2):
        return CheckFailed(f"your kernels signal with {atomics} atomic(s) and wait {waits} time(s), but every program "
                           f"calls tl.debug_barrier() {barriers} time(s)"
                           + (skipped.format(any_barriers - barriers) if any_barriers > barriers else "")
                           + ": each handshake needs one before it announces and one after its last wait",
                           hint="a signal atomic orders only the loads and stores of the thread that runs it; "
                                "without tl.debug_barrier() before announcing, the announcement can reach a peer "
                                "while other threads of the program still read its buffer, and without one after the "
                                f"wait, other threads can read before the wait is over. {_LATENT}")
    for placed, what, why in _BARRIERS_PLACED:
        if atomics and not placed(sources, names, launch, rank, world):
            return CheckFailed(what, hint=f"{why} {_LATENT}")
    sixteen = _sums_in_sixteen_bits(sources, names)
    if sixteen:
        return CheckFailed(f"your kernels start a sum in a 16-bit type ({sixteen[0]}): on two ranks that rounds once, as a "
                           "float32 sum does, so the outputs here were exact; on three ranks or more it rounds after every add",
                           hint="start the sum as tl.zeros([BLOCK], dtype=tl.float32), add each load .to(tl.float32) "
                                "and round once, when you store into out")
    return None


RACE_HINTS = {
    "late writer": ("wait at entry: announce on every peer's signal pad that your input is in, then wait for every "
                    "peer's announcement on yours, before reading any peer's buffer"),
    "slow reader": ("wait again before returning: once you return, your caller may overwrite your buffer, and a "
                    "slower peer may still be reading it; a second barrier after the sum keeps it until every peer "
                    "has read"),
}


def _hung_where(run) -> str:
    """The last stage each rank reported before the run stopped."""
    last: dict[str, str] = {}
    for line in run.tagged("STAGE"):
        words = line.split(" ", 2)
        if len(words) == 3:
            last[words[1]] = words[2]
    return "; ".join(f"{who.replace('=', ' ')}: {what}" for who, what in sorted(last.items())) or "before any call"


@exercise(1,
          "in one Triton kernel: a barrier over the signal pads (announce to every peer, then wait for every peer, "
          "and consume each signal, so the next call starts clean), the sum of every rank's buffer in float32 over "
          "all of numel (a loop or enough programs, masked at the tail), then the same barrier again before "
          "returning")
def check_one_shot(one_shot_all_reduce: Callable) -> str:
    """Three sizes eagerly, twice each; in graphs of 4 calls at 4 KB and 4 MB, each rank in turn writing late and
    each in turn reading slowly, three replays each: every output the bfloat16 sum of every rank's input, nothing
    written past it; no library collective; at 4 KB at most 2x the library one-shot's time in the same graph."""
    needs_two_gpus("exercise 2 runs", gpus="2 NVIDIA GPUs linked by NVLink")
    rows, _, run = answer_rows(one_shot_all_reduce, _ONE_SHOT)
    answered(rows, "one_shot_all_reduce")
    if len(rows) < 2:
        where = _hung_where(run) if run is not None else "unknown"
        stopped = run is not None and (run.timed_out or run.tagged("WATCHDOG"))
        if stopped:
            raise CheckFailed(f"the ranks did not finish and were stopped by the watchdog; last stage per rank: "
                              f"{where}",
                              hint="a wait that no peer answers never ends: consume each signal as you wait for it "
                                   "(set it back to 0), or the next call finds it still set; and wait only for "
                                   "signals your peers send in the same call")
        raise rank_checks.failed(run)
    for r in rows:
        where = f"rank {r['rank']}"
        for e in r["eager"]:
            at = f"{where}, call {e['call']} at {e['n']:,} elements"
            if e["unwritten"]:
                raise CheckFailed(f"{at}: {e['unwritten']:,} of the {e['n']:,} outputs were never written",
                                  hint="cover all of numel: loop over it in each program (tl.range from the "
                                       "program's start, stepping by the grid), or launch enough programs")
            if e["spilled"]:
                raise CheckFailed(f"{at}: {e['spilled']:,} values written past the end of out",
                                  hint="mask every load and store at the tail: offsets < numel")
            if not e["error"] <= 0.0:
                if e["as_mean"] == 0.0:
                    raise CheckFailed(f"{at}: out is the mean over ranks, not the sum",
                                      hint="sum the ranks' buffers; do not divide by the world size")
                if e["as_own"] <= 0.0:
                    raise CheckFailed(f"{at}: out is this rank's own input times the world size",
                                      hint="read every peer's buffer through handle.buffer_ptrs_dev: the ranks hold "
                                           "different data")
                hint = RACE_HINTS["late writer"] if e["call"] == 2 else None
                raise CheckFailed(f"{at}: out differs from the sum of every rank's input by {e['error']:.3g} "
                                  "(expected bit for bit: a float32 sum of two bfloat16 values, rounded once)",
                                  hint=hint)
    for r in rows:
        for g in r["graphs"]:
            if g["unwritten"] or not g["error"] <= 0.0:
                who = "writes its input late" if g["case"] == "late writer" else "reads slowly"
                raise CheckFailed(f"rank {r['rank']}: in a graph of 4 calls at {g['n']:,} elements where rank "
                                  f"{g['odd']} {who}, outputs differ from the sum by {g['error']:.3g}"
                                  + (f" ({g['unwritten']:,} never written)" if g["unwritten"] else ""),
                                  hint=f"{RACE_HINTS[g['case']]}; and {RACE_HINTS['slow reader' if g['case'] == 'late writer' else 'late writer']}")
    sources, names = rank_checks.kernel_sources(one_shot_all_reduce), rank_checks.kernel_globals(one_shot_all_reduce)
    try:
        broken = _read_in_source(sources, names, _launch_literals(one_shot_all_reduce), world=len(rows))
    except Exception as e:  # noqa: BLE001  kernels this reading cannot follow (too large, or a form it does not
        # know): the runs above judged them, and the reader's failure is not the learner's
        print(f"(lab 11's checker could not read your kernels' source: {type(e).__name__}; the runs above judged "
              "them)")
        broken = None
    if broken is not None:
        raise broken
    for r in rows:
        library = [k for names in r["kernels"].values() for k in names if _library_kernel(k)]
        if library:
            raise CheckFailed(f"rank {r['rank']}: one call, eager or replayed from a graph, ran the library's kernel "
                              f"{library[0][:80]!r}",
                              hint="write the all-reduce as a Triton kernel of your own: the exercise is the "
                                   "barrier and the sum, not a call to the library's")
        for how, names in r["kernels"].items():
            if len(names) != 1:
                where = "called eagerly" if how == "eager" else "replayed from a graph"
                raise CheckFailed(f"rank {r['rank']}: one call at 4 KB, {where}, launched {len(names)} kernels"
                                  + (f": {', '.join(repr(n[:60]) for n in names[:4])}" if names else ""),
                                  hint="do all of it in one Triton kernel: it writes every element of out, so "
                                       "nothing needs zeroing or copying first; each extra launch costs a few "
                                       "microseconds, as much as the all-reduce itself at 4 KB")
    ratio = max(r["yours_us"] / r["library_us"] for r in rows)
    if not ratio <= SLOWER_THAN_LIBRARY:  # NaN fails too
        raise CheckFailed(f"at 4 KB, in a graph of 20 copies and all-reduces, yours takes {rows[0]['yours_us']:.1f} "
                          f"us an all-reduce against the library one-shot's {rows[0]['library_us']:.1f} us "
                          f"({ratio:.2f}x; at most {SLOWER_THAN_LIBRARY}x)",
                          hint="a few programs (one per 4,096 elements, 32 at most) each with its own signal slots; "
                               "no flag for your own rank (stream order already puts your input's write before the "
                               "kernel and your caller's next write after it); num_warps=8; no host work in the call: "
                               "launch one kernel")
    return (f"3 sizes eagerly, twice each, and graphs at 4 KB and 4 MB with each rank in turn late and slow: every "
            f"output the exact sum; at 4 KB {rows[0]['yours_us']:.1f} us an all-reduce against the library "
            f"one-shot's {rows[0]['library_us']:.1f} us ({ratio:.2f}x)")


# ---- exercise 3: a tensor-parallel MLP in one graph per rank ---------------------------------------------------

TP_WIDTH, TP_MLP = 1024, 4096  # the model's width and MLP width (a Llama-sized layer, scaled down to check fast)
TP_TOLERANCE = 2e-2            # of the MLP's largest value: bfloat16 products, added in another order

_TP_MLP = RankExercise('''
    import torch.nn.functional as F
    from launchlab import trace
    from launchlab.checking import counting_graph_calls, holding_freed_memory


    def judge(learner):
        gen = torch.Generator(device=device).manual_seed(SEED)  # the same full weights on every rank
        w = lambda rows, cols: (torch.randn(rows, cols, generator=gen, device=device) / cols ** 0.5).to(torch.bfloat16)
        gate, up, down = w(MLP, WIDTH), w(MLP, WIDTH), w(WIDTH, MLP)
        part = slice(rank * MLP // world, (rank + 1) * MLP // world)
        x = torch.zeros(1, WIDTH, dtype=torch.bfloat16, device=device)
        # kept here, as a caller keeps its weights: the answer owes them nothing, and let go they would be held and filled
        shards = gate[part].contiguous(), up[part].contiguous(), down[:, part].contiguous()
        found = yours(learner, x, *shards)
        if not (isinstance(found, tuple) and len(found) == 2 and isinstance(found[0], torch.cuda.CUDAGraph)
                and isinstance(found[1], torch.Tensor)):
            return {"returned": type(found).__name__}
        graph, out = found
        with holding_freed_memory() as held:  # what the answer let go is someone else's from here on
            return judge_replays(graph, out, x, gate, up, down, gen, held)


    def judge_replays(graph, out, x, gate, up, down, gen, held):
        errors, replays, spread, seen = [], 0, 0.0, []
        for scale in (1, 1, 1, 40):  # fresh tokens into x, the same on every rank: the replay must read x as it is now;
            # the last one with activations of the size outlier features reach, where a SiLU written with exp overflows
            fresh = (scale * torch.randn(1, WIDTH, generator=gen, device=device)).to(torch.bfloat16)
            x.copy_(fresh)
            a = fresh.float()
            want = a + (F.silu(a @ gate.float().T) * (a @ up.float().T)) @ down.float().T
            with counting_graph_calls() as counts:
                yours(graph.replay)
                torch.cuda.synchronize()
            replays = max(replays, counts["replays"])
            got = out.float()
            seen.append(got.clone())
            # against the MLP's own size, not the residual's: a slip inside the MLP must not hide behind x
            errors.append(((got - want).abs().max() / (want - a).abs().max()).nan_to_num(float("inf")).item())
            everyone = got.clone()
            checkers_all_reduce(everyone)  # every rank's output, summed: equal to world x this rank's when all agree
            spread = max(spread, (everyone / world - got).abs().max().item())
        # the last token again, with the held memory filled with zeros and then with 0xFF again: out must not move,
        # or the graph reads memory it let go (an accumulating answer moves both times; this moves only with zeros);
        # and every write shows against one fill or the other
        scale_of_mlp = (want - a).abs().max()

        def apart(u, v) -> float:
            gap = (u.float() - v.float()).abs().masked_fill(u.isnan() & v.isnan(), 0)
            return (gap.max() / scale_of_mlp).nan_to_num(float("inf")).item()

        last, written, after = out.clone(), held.written(), {}
        for fill in (0, 255):
            held.refill(fill)
            yours(graph.replay)
            torch.cuda.synchronize()
            after[fill] = out.clone()
            written = max(written, held.written())
        freed_read = apart(after[0], last) > 1e-3 and apart(after[255], last) <= 1e-3
        events = trace.record(graph.replay)
        launches = trace.launch_counts(events)
        kernels = [i.name for i in trace.intervals(events, {"kernel"})]
        return {"errors": errors, "replays": replays, "spread": spread, "graph_launches": launches.graphs,
                "stale": all(torch.equal(seen[0], later) for later in seen[1:]), "freed_written": written,
                "freed_read": freed_read, "unheld": held.unheld,
                "kernel_launches": launches.kernels, "nccl_kernels": sum("nccl" in k.lower() for k in kernels),
                "shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch.")}
''', "nccl", lambda: {"SEED": checking.rng().randrange(10_000), "WIDTH": TP_WIDTH, "MLP": TP_MLP,
                      "WATCHDOG_S": WATCHDOG_S}, also_alone=True)

@exercise(3,
          "compute this rank's part, silu(x @ w_gate.T) * (x @ w_up.T) @ w_down.T, all-reduce it (the sum) and add "
          "x once; warm up on a side stream, capture all of it into one graph writing a buffer you return with it")
def check_tp_mlp(tp_mlp_graph: Callable) -> str:
    """Four fresh tokens (one 40 times larger) through one replay on each of two ranks: out is the whole model's
    x + MLP(x) within 2% of the MLP's largest value, the same on both ranks; one graph launch, one NCCL kernel, nothing launched outside it; and
    one rank alone (the whole MLP on one GPU) the same."""
    needs_two_gpus("exercise 2 runs")
    rows, alone, run = answer_rows(tp_mlp_graph, _TP_MLP)
    answered(rows, "tp_mlp_graph")
    if len(rows) < 2:
        if run is not None and (run.timed_out or run.tagged("WATCHDOG")):
            raise CheckFailed("the ranks did not finish and were stopped by the watchdog: a collective on one rank "
                              "waited for a partner the other rank never issued",
                              hint="every rank must issue the same collectives with the same sizes, in the same "
                                   "order, in the warm-up and in the capture: a size that differs between ranks "
                                   "(a rank's own padding, a shape from its own data) leaves a partner waiting")
        raise rank_checks.failed(run)
    for r in rows:
        where = f"rank {r['rank']}"
        if "returned" in r:
            raise CheckFailed(f"{where}: tp_mlp_graph returned {r['returned']}, not (graph, out)",
                              hint="return the torch.cuda.CUDAGraph you captured and the tensor its replay writes")
        if r["shape"] != [1, TP_WIDTH] or r["dtype"] != "bfloat16":
            raise CheckFailed(f"{where}: out is a {r['dtype']} tensor of shape {r['shape']}, not bfloat16 of shape "
                              f"[1, {TP_WIDTH}] like x",
                              hint="the next layer reads out as it reads x: the same shape, in bfloat16 (round a "
                                   "float32 result into it inside the capture)")
        if r["replays"] != 1:
            raise CheckFailed(f"{where}: one call of graph.replay() made {r['replays']} graph replays",
                              hint="return the torch.cuda.CUDAGraph itself: its replay runs the captured work")
        if r["freed_written"]:
            raise CheckFailed(f"{where}: the replays wrote at least {r['freed_written']:,} bytes of memory your "
                              "function had let go when it returned: a buffer made outside the capture that nothing "
                              "keeps; the "
                              "memory is handed to the next tensor made, and every replay overwrites it",
                              hint="make the buffers the graph writes inside the capture (the graph keeps those), or "
                                   "keep a reference to each for as long as the graph lives (return it, or hold it "
                                   "beside the graph)")
        if r["freed_read"]:
            raise CheckFailed(f"{where}: out changes when the memory your function let go is filled with other "
                              "bytes: the graph reads a buffer made outside the capture that nothing keeps (a copy "
                              "of x or of a weight, say), and whatever is made there next is what it reads",
                              hint="capture on x itself and on the weights you were given, not on copies; or make "
                                   "what the graph reads inside the capture, or keep it alive beside the graph")
        worst = max(r["errors"])
        if not worst <= TP_TOLERANCE:
            if r["stale"]:
                raise CheckFailed(f"{where}: four different tokens gave the same out: the replay does not read x "
                                  "as it is now, or does not write out",
                                  hint="capture your work on the x you were given (not a copy), and write out "
                                       "inside the capture")
            raise CheckFailed(f"{where}: out differs from x + MLP(x) of the whole model by {worst:.3g} of the "
                              "MLP's largest value (at most 0.02)",
                              hint=("the partial down projections are what add up: all-reduce this rank's "
                                    "silu(x @ w_gate.T) * (x @ w_up.T) @ w_down.T (the sum), then add x once; and "
                                    "capture on x itself, with every buffer the graph uses made inside the capture or "
                                    "kept alive (a tensor made outside it and let go is handed to whatever comes "
                                    "next, while every replay still reads and writes it)"))
        if r["spread"] > 0:
            raise CheckFailed(f"{where}: the ranks' outputs differ by {r['spread']:.3g}: every rank must end with "
                              "the same output")
        if r["graph_launches"] != 1 or r["kernel_launches"]:
            raise CheckFailed(f"{where}: one replay made {r['graph_launches']} graph launches and "
                              f"{r['kernel_launches']} kernel launches; everything should be inside one graph")
        if r["nccl_kernels"] != 1:
            raise CheckFailed(f"{where}: one replay ran {r['nccl_kernels']} NCCL kernels",
                              hint="one all-reduce per MLP: of the partial down projections")
    answered(alone, "tp_mlp_graph")
    if not alone or "failed" in alone[0]:
        raise CheckFailed("on one rank alone (world size 1, the whole MLP), "
                          + (alone[0]["failed"] if alone else "the run reported nothing"))
    if "returned" in alone[0] or not max(alone[0]["errors"]) <= TP_TOLERANCE:
        raise CheckFailed("on one rank alone, holding the whole MLP, out is not x + MLP(x)",
                          hint="use the world size the ranks were started with (dist.get_world_size()), never a "
                               "number typed in: two ranks cannot tell x / 2 from x / world")
    return ("4 fresh tokens (one 40 times larger) on each of two ranks and on one rank alone: x + MLP(x) of the "
            f"whole model within {max(max(r['errors']) for r in rows):.2g} of the MLP's largest value, the same on both "
            "ranks; one graph launch running one NCCL kernel, nothing launched outside it; no write to or read of "
            "memory let go" + (f" ({unheld:,} free bytes could not be held)"
                               if (unheld := max(r["unheld"] for r in rows + alone)) else ""))


def judged_together(checker: Callable, answers: Iterable[Callable]) -> AbstractContextManager[None]:
    """Inside the block, `checker` judges each of `answers` from one run of two ranks that met them all in turn
    (exercise 1; exercise 2 runs in this process, and judges each answer as it comes)."""
    exercise = {check_one_shot.__name__: _ONE_SHOT, check_tp_mlp.__name__: _TP_MLP}.get(checker.__name__)
    if exercise is None:
        return contextlib.nullcontext()
    return rank_checks.judged_together(exercise, answers)


# ---- exercise 2: the path per message size --------------------------------------------------------------------

PATHS = ("nccl", "nccl symmetric", "one-shot", "two-shot")
SIZES = (4 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20)


def _medians(samples: list[dict]) -> dict[tuple[int, str], float]:
    found: dict[tuple[int, str], list[float]] = {}
    for s in samples:
        if math.isfinite(s["us"]):
            found.setdefault((s["bytes"], s["path"]), []).append(s["us"])
    return {key: statistics.median(values) for key, values in found.items()}


def reference_choice(samples: list[dict]) -> dict[int, str]:
    """The rule exercise 2 states: per size, NCCL unless a path's median is at least MARGIN lower than NCCL's;
    then the lowest median."""
    medians = _medians(samples)
    chosen = {}
    for size in sorted({s["bytes"] for s in samples}):
        here = {path: us for (b, path), us in medians.items() if b == size}
        best = min(here, key=here.get)
        chosen[size] = best if "nccl" not in here or here[best] <= (1 - MARGIN) * here["nccl"] else "nccl"
    return chosen


def _samples(median: float, nccl: bool = False) -> list[float]:
    """Seven samples in the order taken: a warm-up's slow one first, five around the median, one lucky."""
    return [median * (1.02 if nccl else 1.6), *(median * f for f in (1.0, 0.99, 1.01, 0.995, 1.005)), median * 0.97]


def _planted(r: random.Random, cast: dict[str, str]) -> tuple[list[dict], str]:
    """Samples where each plausible wrong rule picks wrong at some size, with what was planted where.

    The roles are the course's three other paths; `cast` renames them, so the answer changes from table to table.
    Each size is scaled by a power of two, which keeps its exact ratios exact."""
    nan, inf = float("nan"), float("inf")
    one, two, sym = cast["one-shot"], cast["two-shot"], cast["nccl symmetric"]
    planted = {
        # NCCL stays: sym 7% faster; `one` has a NaN and six finite samples whose median, 9.01, is 9.9% below
        # (the low middle sample is 11% below; NCCL / 1.1 is 9.09); `two` has no rows here at all.
        4 << 10: {"nccl": _samples(10.0, nccl=True), sym: _samples(9.3),
                  one: [16.0, nan, 9.12, 8.9, 8.8, 9.3, 8.7]},
        # `one` wins (median 10.6, 11.7% faster) with a NaN and eight finite samples whose upper middle, 11.0, is
        # under 10% faster; `sym` also beats the margin (10.7) and is met first; `two` has one very lucky sample
        64 << 10: {"nccl": _samples(12.0, nccl=True), sym: _samples(10.7),
                   one: [16.64, 10.0, 11.2, 9.9, nan, 11.3, 10.2, 11.0, 9.8], two: [*_samples(12.5)[:-1], 6.25]},
        # NCCL failed here (NaN throughout): the lowest median wins, `two`'s over its finite samples (an inf
        # among them moves it past `one`'s)
        256 << 10: {"nccl": [nan] * 7, sym: _samples(30.0), one: _samples(28.0),
                    two: [43.2, 27.0, 26.0, 28.6, 26.5, 28.8, inf]},
        # `two` 10.1% faster than NCCL: it wins; `sym` failed here (NaN throughout)
        1 << 20: {sym: [nan] * 7, "nccl": _samples(20.0, nccl=True), one: _samples(19.0), two: _samples(17.98)},
        # `two` wins (median 80.5, 10.6% faster) despite an outlier that moves its mean past NCCL's, and only with
        # its fast first sample: without it the median is 81.25, under 10%; `sym` has a lucky sample
        16 << 20: {"nccl": _samples(90.0, nccl=True), sym: [*_samples(86.0)[:2], 25.8, *_samples(86.0)[3:]],
                   one: _samples(130.0), two: [70.0, 80.0, 82.0, 702.0, 79.0, 83.0, 80.5]},
    }
    leads = {(64 << 10, sym)}   # met first at its size: a rule that takes the first path beating the margin
    groups, first = [], []
    for size, paths in planted.items():
        scale = r.choice((0.5, 1.0, 2.0))
        for path, samples in paths.items():
            group = [{"path": path, "bytes": size, "us": us * scale} for us in samples]
            (first if (size, path) in leads else groups).append(group)
    # Taken round by round, in a random order of paths within a round, except that a failed path comes first
    # (where NaN is kept, a NaN met first wins every comparison, min or sorted, instead of losing by luck), and
    # the path that leads its size comes before the others of the first round.
    failed = [g for g in groups if all(math.isnan(s["us"]) for s in g)]
    others = [g for g in groups if g not in failed]
    rows = []
    for k in range(max(len(g) for g in groups + first)):
        r.shuffle(others)
        rows += [g[k] for g in failed + first + others if k < len(g)]
    return rows, ("NCCL failed (NaN) at 256 KB, another path at 1 MB, scattered NaN and an inf, a path absent at "
                  "4 KB, paths 0.1% either side of 10% faster, two paths beating it at 64 KB, even numbers of finite "
                  "samples, first samples slowed by warm-up and one fast, lucky samples, an outlier")


@exercise(2,
          "per size: each path's median over its finite samples (NaN: the path failed there); keep NCCL unless "
          "another path's median is at least 10% lower than NCCL's, and then take the lowest")
def check_path_choice(fastest_path: Callable) -> str:
    """Planted samples for four sizes and four paths in shuffled order: the answer must name the right path for
    every size, keyed by bytes."""
    r = checking.rng()
    roles = ["nccl symmetric", "one-shot", "two-shot"]
    casts = [dict(zip(roles, order, strict=True)) for order in itertools.permutations(roles)]
    first = r.choice(casts)
    second = r.choice([c for c in casts if c != first])  # two tables whose answers differ: none can be typed in
    for table, cast in enumerate((first, second), start=1):
        _judge_table(fastest_path, *_planted(r, cast), table)
    return f"the right path at each of {len(SIZES)} sizes in two tables (each with a failed path, slow first samples, " \
           "lucky samples and an outlier)"


def _judge_table(fastest_path: Callable, samples: list[dict], what: str, table: int) -> None:
    """One planted table: the answer must name the rule's path for every size, keyed by bytes."""
    want = reference_choice(samples)
    given = [dict(s) for s in samples]
    got = fastest_path(given)
    if given != samples:
        raise CheckFailed("your function changed the samples it was given", hint="read the samples; do not edit them")
    if not isinstance(got, dict):
        raise CheckFailed(f"fastest_path returned {type(got).__name__}, not a dict of bytes -> path")
    if set(got) != set(want):
        kb = {size // 1024 for size in want}
        hint = "key the answer by the sizes in bytes, as the samples give them" if set(got) == kb else None
        raise CheckFailed(f"your answer's sizes are {sorted(got)}, the samples' are {sorted(want)} (bytes)", hint=hint)
    for size in sorted(want):
        if got[size] != want[size]:
            raise CheckFailed(f"table {table}: at {size:,} bytes you chose {got[size]!r}; the rule chooses "
                              f"{want[size]!r} (samples: {what})")
