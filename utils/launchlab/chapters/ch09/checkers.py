"""Checkers for lab 09, "Past graphs: programmatic dependent launch and persistent kernels".

Exercise 1 compiles your producer and consumer after the checker's prelude and runs them in a child process
(a kernel that reads out of bounds can take the CUDA context down with it), after a kernel that keeps the GPU
busy while the host enqueues them, the consumer launched with programmatic dependent launch. It judges the data
first: x holds NaN until the producer writes it (in one of the runs, old finite values instead), so a consumer that
reads x before its wait gets NaN or old values, however it tests them.
Then the overlap, on the GPU's clock: the consumer's prologue must stamp in while the producer is still in its
planted stretch of work. Your producer runs before the checker's consumer and your consumer after the checker's
producer as well, so a failure names the kernel at fault. Exercise 2 reads the edges of the graph you captured
back from the driver (one chain of stage kernels, every edge programmatic), then runs it against x + stages.
Exercise 3 runs the checker's persistent kernel over your grid barrier in a child process with a deadline
(a barrier that never releases cannot be stopped from Python), hundreds of stages of cells that the next
block wrote in the stage before, with a slow warp in every third stage, and compares with the host. Exercise 4 runs on
a CPU: the lab's three workloads and made-up ones whose tables hide traps (the fastest rung not allowed, ties
within the noise and a near miss just outside it, slow and lucky runs, chains of different lengths), planted so
that reading one run, a mean, a minimum or maximum, the table's order or a tie in microseconds goes wrong on every
draw.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import random
import re
import statistics
import tomllib
from collections.abc import Callable

from ... import checking, devicegraphs, graphs
from ...checking import CheckFailed, checker_call_in_child, every_case_right, exercise, require_cuda

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "PDL_PRELUDE",
    "RUNGS",
    "STAGES_SOURCE",
    "STAGE_SOURCE",
    "TIE",
    "WORKLOADS",
    "check_grid_barrier",
    "check_pdl_chain",
    "check_pdl_pair",
    "check_rung",
]

CHILD_START_S = 40  # what a child may spend starting and compiling, before its GPU waits
CHILD_EXIT_S = 5  # after its RESULT line, how long a child may take to exit
GPU_TIMEOUT_S = 10  # one GPU wait; a right answer needs milliseconds


def _in_child(call: str, timeout_s: float) -> dict:
    """Run `call` (an expression on this module, returning a dict) in a child process; its dict back."""
    return checker_call_in_child("ch09", call, timeout_s, CHILD_EXIT_S, "a loop on the GPU that never ends?")


def _source(answer: object, what: str) -> str:
    """The CUDA source a learner's function returned, or CheckFailed saying what it returned instead."""
    if answer is None:
        raise CheckFailed(f"{what} returned None: did it forget to `return` the CUDA source?")
    if not isinstance(answer, str):
        raise CheckFailed(f"{what} returned {type(answer).__name__} {answer!r:.60}; return the CUDA source as a string")
    if "__" not in answer:
        raise CheckFailed(f"{what} returned {answer!r:.80}, which holds no CUDA function: return the CUDA source")
    return answer


def _device():
    """The current cuda.core Device."""
    from cuda.core import Device

    device = Device()
    device.set_current()
    return device


def _require_pdl() -> None:
    """Fail the check unless this GPU has programmatic dependent launch (compute capability 9.0 or newer)."""
    device = _device()
    if int(device.arch) < 90:
        raise CheckFailed(f"programmatic dependent launch needs compute capability 9.0 (Hopper) or newer; this GPU "
                          f"is sm_{device.arch}")


def _compile(source: str):
    """`source` compiled by NVRTC for this GPU (cuda.core ObjectCode)."""
    from cuda.core import Program, ProgramOptions

    device = _device()
    # The toolkit's headers, so an answer may include cooperative_groups.h or cuda/atomic as the lecture does.
    include = devicegraphs.cuda_include_dirs()
    options = ProgramOptions(arch=f"sm_{device.arch}", include_path=include or None)
    return Program(source, "c++", options).compile("cubin")


def _first_line(exc: BaseException) -> str:
    """The line that says what went wrong: a compiler's first `error:` line (with its file and line), not the
    log's header; else the first line that mentions an error; else the first line."""
    lines = str(exc).strip().splitlines()
    compiler = [line.strip() for line in lines if re.search(r"\(\d+\): (?:catastrophic )?error", line)]
    other = [line.strip() for line in lines if "error" in line.lower()]
    return (compiler or other or lines or [""])[0][:300]


# ---- exercise 1: the wait and the trigger in a producer/consumer pair ---------------------------------------

PDL_PRELUDE = r"""
// Lab 09's device helpers: the checker puts them before your source.
// PDL's two instructions, as in the lecture: cudaGridDependencySynchronize() and
// cudaTriggerProgrammaticLaunchCompletion() in CUDA C++.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// NVRTC declares neither CUDA C++ name, so they are spelled here too: use whichever you like (#undef both before
// including a CUDA header that declares them).
#define cudaGridDependencySynchronize() pdl_wait()
#define cudaTriggerProgrammaticLaunchCompletion() pdl_trigger()

__device__ __forceinline__ unsigned long long launchlab_now() {   // the GPU's nanosecond clock
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The producer's work: a stretch of stamps[2] ns that touches nothing, then x = source, then the stamp of its
// last block out in stamps[0]. Every thread of every block calls it. Its blocks end in a drawn order, stamps[3] ns
// apart (rotated by stamps[4]), so nothing but the whole producer's end says that all of x is written.
__device__ void launchlab_produce(const float* source, float* x, int n, unsigned long long* stamps) {
    unsigned long long start = launchlab_now();
    unsigned long long late = ((blockIdx.x * 5u + (unsigned int)stamps[4]) % gridDim.x) * stamps[3];
    while (launchlab_now() - start < stamps[2] + late) { }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = source[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicMax(&stamps[0], launchlab_now());
    }
}

// The consumer's prologue: what a real kernel spends computing indices, loading constants, clearing shared
// memory. It reads nothing the producer writes; it stamps its first block in, in stamps[1].
__device__ void launchlab_prologue(unsigned long long* stamps) {
    if (threadIdx.x == 0) atomicMin(&stamps[1], launchlab_now());
}
"""
# The checker's side of each run: a kernel that keeps the GPU busy while the host enqueues the pair, and a
# producer and a consumer known to be right, run against each of yours.
CHECKER_PAIR_SOURCE = r"""
extern "C" __global__ void launchlab_hold(unsigned long long ns) {
    unsigned long long start = launchlab_now();
    while (launchlab_now() - start < ns) { }
}
extern "C" __global__ void launchlab_producer(const float* source, float* x, int n, unsigned long long* stamps) {
    pdl_trigger();
    launchlab_produce(source, x, n, stamps);
}
extern "C" __global__ void launchlab_consumer(const float* x, float* y, int n, unsigned long long* stamps) {
    launchlab_prologue(stamps);
    pdl_wait();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = 2.0f * x[i] + 1.0f;
}
"""
PRODUCE_NS = 40_000  # the producer's stretch of work before it writes x
STAGGER_NS = 3_000  # how far apart the producer's blocks end: a consumer that goes on at the first block's end fails
LEAD_NS = PRODUCE_NS // 4  # how long before the producer's end the consumer's prologue must have run
HOLD_NS = 3_000_000  # the GPU is kept busy this long while the host enqueues producer and consumer
PRODUCER_BLOCKS = 8
PAIR_GUARD = 512  # cells after y[n] that must stay untouched
SENTINEL = -1234.5  # what y holds before the consumer runs
NO_STAMP = (1 << 64) - 1
PAIRINGS = {"yours": ("producer", "consumer"), "your consumer": ("launchlab_producer", "consumer"),
            "your producer": ("producer", "launchlab_consumer")}


def _pair_cases(seed: int) -> list[dict]:
    """Three runs: block sizes 128, 256 and 384 in a drawn order, n never a multiple of the block."""
    rng = random.Random(seed)
    blocks = [128, 256, 384]
    rng.shuffle(blocks)
    cases = []
    for block in blocks:
        n = rng.randrange(3_000, 20_000)
        n += 1 if n % block == 0 else 0
        cases.append({"n": n, "block": block, "seed": rng.randrange(1 << 30), "stale": False})
    # In one run x starts with old finite values, not NaN: a consumer that waits only when it reads NaN, or spins
    # until x is no longer NaN, reads those and gets y wrong, as it would on data a real producer overwrites.
    cases[rng.randrange(len(cases))]["stale"] = True
    return cases


def _pair_trial(source: str, cases: list, timeout_s: float = 10.0) -> dict:
    """Each pairing of producer and consumer (yours with yours, the checker's with yours) on each case, in a
    child process: what y held and when the consumer's prologue ran against the producer's end."""
    import cupy as cp
    import numpy as np
    from cuda.core import LaunchConfig, launch

    _device()
    try:
        yours = _compile(PDL_PRELUDE + source)
        kernels = {name: yours.get_kernel(name) for name in ("producer", "consumer")}
    except Exception as exc:
        return {"error": f"your source did not compile, or lacks a `producer` or `consumer` kernel: {_first_line(exc)}",
                "hint": "define both kernels with extern \"C\" and the signatures given, using the prelude's helpers"}
    checker = _compile(PDL_PRELUDE + CHECKER_PAIR_SOURCE)
    kernels.update({name: checker.get_kernel(name)
                    for name in ("launchlab_hold", "launchlab_producer", "launchlab_consumer")})
    stream = _device().create_stream()

    def run(producer: str, consumer: str, case: dict) -> dict:
        n, block = case["n"], case["block"]
        rng = np.random.default_rng(case["seed"])
        source_x = cp.asarray(rng.uniform(-8, 8, n).astype(np.float32))
        x = cp.full(n + PAIR_GUARD, np.nan, dtype=cp.float32)  # a read before the producer wrote it gives NaN
        old = (-source_x - 3).astype(cp.float32)  # or, in the stale run, x's old values
        if case.get("stale"):
            x[:n] = old
        y = cp.full(n + PAIR_GUARD, SENTINEL, dtype=cp.float32)
        stamps = cp.asarray(np.array([0, NO_STAMP, PRODUCE_NS, STAGGER_NS, case["seed"] % PRODUCER_BLOCKS],
                                     dtype=np.uint64))
        cp.cuda.Device().synchronize()
        launch(stream, LaunchConfig(grid=1, block=32), kernels["launchlab_hold"], np.uint64(HOLD_NS))
        launch(stream, LaunchConfig(grid=PRODUCER_BLOCKS, block=256), kernels[producer],
               source_x.data.ptr, x.data.ptr, np.int32(n), stamps.data.ptr)
        launch(stream, LaunchConfig(grid=-(-n // block), block=block, programmatic_stream_serialization=True),
               kernels[consumer], x.data.ptr, y.data.ptr, np.int32(n), stamps.data.ptr)
        devicegraphs.wait(stream, timeout_s, "your producer and consumer")
        want, got, after = 2 * source_x.get() + np.float32(1), y[:n].get(), y[n:].get()
        wrong = np.flatnonzero(got != want)
        first = int(wrong[0]) if wrong.size else -1
        end, begin = (int(v) for v in stamps.get()[:2])
        stale = int((got == 2 * old.get() + np.float32(1)).sum()) if case.get("stale") else 0
        return {"n": n, "block": block, "wrong": int(wrong.size), "nan": int(np.isnan(got).sum()), "stale": stale,
                "untouched": int((got == np.float32(SENTINEL)).sum()), "first": first,
                "got": float(got[first]) if first >= 0 else 0.0, "want": float(want[first]) if first >= 0 else 0.0,
                "past_end": int((after != np.float32(SENTINEL)).sum()),
                "produced": end != 0, "prologue": begin != NO_STAMP,
                "lead_ns": end - begin if end and begin != NO_STAMP else None}

    found = {}
    try:
        for name, (producer, consumer) in PAIRINGS.items():
            run(producer, consumer, cases[0])  # warm-up: loads the modules, so no launch waits for the host
            found[name] = [run(producer, consumer, case) for case in cases]
    except TimeoutError:
        return {"error": f"your kernels did not finish within {timeout_s:g} s and were stopped",
                "hint": "no loop in your kernels should depend on anything but n"}
    except Exception as exc:
        return {"error": f"running your kernels failed: {_first_line(exc)}",
                "hint": "check the signatures: producer(const float* source, float* x, int n, unsigned long long* "
                        "stamps), consumer(const float* x, float* y, int n, unsigned long long* stamps), and that "
                        "no thread writes y[i] for i >= n"}
    return {"pairings": found}


WAIT_HINT = ("every thread of the consumer must call pdl_wait() before it reads x: before the wait, x may still hold "
             "NaN or its old values, the producer's planted stretch of work not yet over")


def _data_problem(runs: list[dict], who: str) -> CheckFailed | None:
    """What was wrong with y in one pairing's runs; None if every y was 2 x + 1 and nothing past the end moved."""
    for r in runs:
        where = f"{who}, n = {r['n']:,} with blocks of {r['block']}"
        if r["past_end"]:
            return CheckFailed(f"{where}: {r['past_end']} cells after y[n - 1] were written",
                               hint="write y[i] only for i < n: the last block is only partly inside the array")
        if not r["wrong"]:
            continue
        stale = r.get("stale", 0)
        old = f"{stale:,} from x's old values, " if stale else ""
        detail = (f"{where}: {r['wrong']:,} of {r['n']:,} values of y are wrong ({r['nan']:,} NaN, {old}"
                  f"{r['untouched']:,} never written); first y[{r['first']}] = {r['got']:g}, expected {r['want']:g}")
        if r["nan"] or stale:
            if who == "your producer before the checker's consumer":
                return CheckFailed(detail, hint="the producer must call launchlab_produce(source, x, n, stamps) in "
                                                "every thread: it writes x")
            return CheckFailed(detail + ": the consumer read x before the producer had written it", hint=WAIT_HINT)
        if r["untouched"]:
            return CheckFailed(detail, hint="cover every i < n whatever the block size: i = blockIdx.x * blockDim.x "
                                            "+ threadIdx.x (a grid-stride loop is fine too), bounded by n itself")
        return CheckFailed(detail, hint="y[i] = 2 * x[i] + 1")
    return None


def _best_lead(runs: list[dict]) -> float | None:
    leads = [r["lead_ns"] for r in runs if r["lead_ns"] is not None]
    return max(leads) / 1e3 if leads else None


def _pair_problem(report: dict) -> CheckFailed | None:
    """What went wrong in a pair trial, from what the child reported; None if the pair is right and overlaps."""
    found = report["pairings"]
    # the checker's producer with your consumer first, then yours with the checker's: each names the kernel at fault
    for name, who in (("your consumer", "the checker's producer before your consumer"),
                      ("your producer", "your producer before the checker's consumer"), ("yours", "your pair")):
        problem = _data_problem(found[name], who)
        if problem:
            return problem
    if not any(r["produced"] for r in found["yours"]):
        return CheckFailed("your producer never called launchlab_produce: the checker has no stamp of its end",
                           hint="call launchlab_produce(source, x, n, stamps) in every thread of the producer")
    if not any(r["prologue"] for r in found["yours"]):
        return CheckFailed("your consumer never called launchlab_prologue: the checker cannot see when it came in",
                           hint="call launchlab_prologue(stamps) in every thread of the consumer, before its wait")
    late = f"{PRODUCE_NS / 1e3:.0f} us stretch of work"
    lead = _best_lead(found["your consumer"])
    if lead is None or lead * 1e3 < LEAD_NS:
        return CheckFailed(f"after the checker's producer, your consumer's prologue ran {_ran(lead)} the producer "
                           f"ended (the producer lets it launch before its {late}): it did not overlap",
                           hint="run launchlab_prologue(stamps) before pdl_wait(): work after the wait waits for the "
                                "whole producer, so nothing overlaps")
    lead = _best_lead(found["your producer"])
    if lead is None or lead * 1e3 < LEAD_NS:
        return CheckFailed(f"before the checker's consumer, your producer let it come in {_ran(lead)} the producer "
                           "ended: the consumer launched only when the producer was (nearly) done",
                           hint="call pdl_trigger() at the start of the producer: the trigger publishes nothing, it "
                                "only lets the consumer launch early; the consumer's wait still guards x")
    lead = _best_lead(found["yours"])
    if lead is None or lead * 1e3 < LEAD_NS:
        return CheckFailed(f"together, your consumer's prologue ran {_ran(lead)} your producer ended",
                           hint="trigger at the start of the producer; prologue before the wait in the consumer")
    return None


def _without_comments(source: str) -> str:
    """`source` with its comments blanked out, its string and character literals kept as they are."""
    literal_or_comment = r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/'
    return re.sub(literal_or_comment, lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", source, flags=re.S)


PDL_WAIT = re.compile(r"\bpdl_wait\s*\(|griddepcontrol\.wait|\bcudaGridDependencySynchronize\s*\(")


def _ptx_functions(ptx: str) -> dict[str, str]:
    """Each kernel's and device function's PTX body, by name (a definition after its declaration wins)."""
    heads = list(re.finditer(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)\s*\(",
                             ptx, re.M))
    return {m.group(1): ptx[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(ptx)]
            for i, m in enumerate(heads)}


def _consumer_ptx(source: str) -> str | None:
    """The PTX NVRTC builds from the prelude and your source, or None where it cannot here (no NVRTC library, an
    error: the run then reports what the compiler said)."""
    try:
        from cuda.bindings import nvrtc

        ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
        err, program = nvrtc.nvrtcCreateProgram((PDL_PRELUDE + source).encode(), b"your_pair.cu", 0, [], [])
        if err != ok:
            return None
        try:
            options = [b"--gpu-architecture=compute_90"]
            options += [f"-I{folder}".encode() for folder in devicegraphs.cuda_include_dirs()]
            (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
            if err != ok:
                return None
            err, size = nvrtc.nvrtcGetPTXSize(program)
            ptx = b" " * size
            (err,) = nvrtc.nvrtcGetPTX(program, ptx)
            return ptx.decode(errors="replace") if err == ok else None
        finally:
            nvrtc.nvrtcDestroyProgram(program)
    except Exception:  # noqa: BLE001  (no NVRTC here, or one that cannot load: the source is read instead)
        return None


def _consumer_waits_in_ptx(source: str) -> bool | None:
    """Whether the consumer as NVRTC builds it (macros expanded, dead code gone) runs griddepcontrol.wait, in its
    body or a function it calls; None when NVRTC cannot build it here, it holds no consumer kernel, or a call goes
    through a pointer (which PTX does not name)."""
    ptx = _consumer_ptx(source)
    if ptx is None:
        return None
    bodies = {name: re.sub(r"//[^\n]*", "", body) for name, body in _ptx_functions(ptx).items()}
    if "consumer" not in bodies:
        return None
    seen: set[str] = set()
    todo = ["consumer"]
    while todo:
        name = todo.pop()
        if name in seen or name not in bodies:
            continue
        seen.add(name)
        if "griddepcontrol.wait" in bodies[name]:
            return True
        if re.search(r"\bcall(?:\.uni)?\s*(?:\([^)]*\)\s*,\s*)?%", bodies[name]):
            return None  # an indirect call: its target is not in the PTX's text
        todo += re.findall(r"\bcall(?:\.uni)?\s*(?:\([^)]*\)\s*,\s*)?(\w+)", bodies[name])
    return False


def _waits_for_the_producer(source: str) -> bool:
    """Whether your consumer runs PDL's wait: read from the PTX NVRTC builds, or where it cannot build it here, from
    the source with its comments left out."""
    in_ptx = _consumer_waits_in_ptx(source)
    return in_ptx if in_ptx is not None else bool(PDL_WAIT.search(_without_comments(source)))


def _ran(lead_us: float | None) -> str:
    if lead_us is None:
        return "at no recorded time before"
    return f"{lead_us:.1f} us before" if lead_us >= 0 else f"{-lead_us:.1f} us after"


@exercise(1,
          "producer: pdl_trigger(); launchlab_produce(source, x, n, stamps). consumer: launchlab_prologue(stamps); "
          "pdl_wait(); then y[i] = 2 x[i] + 1 for every i < n. The wait guards the reads; the trigger, and the "
          "prologue before the wait, buy the overlap")
def check_pdl_pair(pair_source: Callable[[], str]) -> str:
    """Your pair, your consumer after the checker's producer and your producer before the checker's consumer:
    y = 2 x + 1 exactly, nothing past the end written, and the consumer's prologue well before the producer's end."""
    source = _source(pair_source(), "pair_source()")
    if not _waits_for_the_producer(source):
        raise CheckFailed("your consumer never calls pdl_wait(): a flag or a spin of your own is not PDL's wait, and "
                          "no flag tells a consumer that every block of the producer has finished writing x",
                          hint=WAIT_HINT)
    require_cuda("programmatic dependent launch")
    _require_pdl()
    cases = _pair_cases(checking.rng().randrange(1 << 30))
    # every GPU wait is bounded, and the first that runs out ends the child
    report = _in_child(f"_pair_trial({source!r}, {cases!r}, {GPU_TIMEOUT_S!r})", CHILD_START_S + 2 * GPU_TIMEOUT_S)
    problem = _pair_problem(report)
    if problem:
        raise problem
    found = report["pairings"]
    sizes = ", ".join(f"{r['n']:,} ({r['block']})" for r in found["yours"])
    return (f"y = 2 x + 1 on n = {sizes} (block size in brackets), read only after the wait; the consumer's "
            f"prologue ran up to {_best_lead(found['yours']):.1f} us before the producer ended (it must run "
            f"{LEAD_NS / 1e3:.0f} us before, of a {PRODUCE_NS / 1e3:.0f} us stretch)")


# ---- exercise 2: a PDL chain captured into a graph ----------------------------------------------------------

STAGE_SOURCE = r"""
// One stage of the chain: dst = src + 1. It lets the next stage launch at once, and waits for the stage before
// it to finish before reading src: both instructions do nothing unless the launch carries the PDL attribute.
extern "C" __global__ void launchlab_add_one(const float* src, float* dst, int n) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + 1.0f;
}
"""
STAGE_KERNEL = "launchlab_add_one"
LAB_STAGES, LAB_N = 8, 1000  # the lab's example; the checker draws others
CHAIN_GUARD = 256  # cells after each buffer's n that must stay untouched
GUARD_VALUE = -3.0


@functools.lru_cache(maxsize=1)
def stage_kernel():
    """launchlab_add_one compiled with cuda.core for this GPU (once per process)."""
    return _compile(STAGE_SOURCE).get_kernel(STAGE_KERNEL)


def _chain_cases(seed: int) -> list[tuple[int, int]]:
    """(stages, n) of the two chains one check captures: an odd and an even stage count, neither the lab's, and
    sizes above 1,024 elements that are no multiple of 128."""
    rng = random.Random(seed)
    odd, even = rng.choice([3, 5, 7, 9, 11]), rng.choice([4, 6, 10, 12])
    cases = []
    for stages in (odd, even):
        n = rng.randrange(1_500, 9_000)
        cases.append((stages, n + 1 if n % 128 == 0 else n))
    return cases


def _chain_problem(shape: graphs.Topology, edges: list[tuple[int, int, str]], stages: int) -> CheckFailed | None:
    """What is wrong with a captured chain of `stages` stage kernels; None if it is one chain of programmatic edges."""
    if shape.nodes == 0:
        return CheckFailed("your graph is empty: nothing was recorded into the builder",
                           hint="launch each stage on the builder: launch(builder, config, kernel, ...). A launch on "
                                "another stream runs at once, outside the graph")
    others = [f"{kind.lower()} {name}" for kind, name in zip(shape.kinds, shape.names, strict=True)
              if kind != "KERNEL" or name != STAGE_KERNEL]
    if others:
        return CheckFailed(f"your graph has {shape.summary()}, among them {', '.join(others[:3])}; expected only "
                           f"{STAGE_KERNEL} kernel nodes")
    if shape.nodes != stages:
        hint = "one launch per stage: for k in range(stages)"
        if shape.nodes == LAB_STAGES:
            hint = f"use the stages argument, not the lab's example ({LAB_STAGES})"
        return CheckFailed(f"your graph has {shape.nodes} stage kernels; the chain has {stages} stages", hint=hint)
    if not shape.is_chain():
        return CheckFailed(f"your graph is {shape.summary()}: each stage must depend on the one before",
                           hint="launch every stage on the builder itself, in order")
    default = [(a, b) for a, b, kind in edges if kind != "programmatic"]
    if len(default) == len(edges):
        return CheckFailed(f"all {len(edges)} edges are full dependencies (default edges): no stage may start before "
                           "the one before has finished",
                           hint="launch with LaunchConfig(grid=..., block=..., programmatic_stream_serialization=True): "
                                "a PDL launch is captured as a programmatic edge")
    if default:
        into = ", ".join(f"stage {_chain_position(shape, b)}" for _, b in default[:4])
        return CheckFailed(f"{len(default)} of {len(edges)} edges are full dependencies: the edges into {into}",
                           hint="the attribute goes on the launch that depends: every stage after the first needs "
                                "programmatic_stream_serialization=True")
    return None


def _chain_position(shape: graphs.Topology, node: int) -> int:
    """A node's place in a chain (0 for the first stage)."""
    before = {b: a for a, b in shape.edges}
    place = 0
    while node in before:
        node, place = before[node], place + 1
    return place


def _chain_data_problem(out, expected, guards_moved: int, stages: int, n: int) -> CheckFailed | None:
    """What is wrong with buffers[stages % 2] after a replay (NumPy arrays); None if it is x + stages."""
    import numpy as np

    if guards_moved:
        return CheckFailed(f"{guards_moved} cells after the first n of the buffers were written",
                           hint="pass n itself to the kernel, not the buffers' length (they are longer than n)")
    wrong = np.flatnonzero(out != expected)
    if not wrong.size:
        return None
    first = int(wrong[0])
    detail = (f"{stages} stages on n = {n:,}: {wrong.size:,} of {n:,} results differ from x + {stages}; first at "
              f"[{first}]: {out[first]:g}, expected {expected[first]:g}")
    if first > 0 and wrong.size == n - first:  # a wrong tail and nothing else: a grid too small for n
        return CheckFailed(detail + f": the last {wrong.size} elements were never computed",
                           hint="launch enough blocks to cover n: grid = (n + block - 1) // block")
    if bool(np.isnan(out).any()):
        return CheckFailed(detail + " (NaN: a stage read the buffer nobody had written)",
                           hint="stage k reads buffers[k % 2] and writes buffers[(k + 1) % 2]")
    steps = np.round(out[wrong] - expected[wrong] + stages)
    if bool(np.all(steps == steps[0])):
        return CheckFailed(detail + f" (x + {int(steps[0])} instead)",
                           hint="stage k reads buffers[k % 2] and writes buffers[(k + 1) % 2], for k in range(stages)")
    return CheckFailed(detail)


@exercise(2,
          "for k in range(stages): launch(builder, LaunchConfig(grid=(n + 255) // 256, block=256, "
          "programmatic_stream_serialization=True), kernel, buffers[k % 2].data.ptr, buffers[(k + 1) % 2].data.ptr, "
          "np.int32(n))")
def check_pdl_chain(capture_pdl_chain: Callable) -> str:
    """Your builder holds `stages` stage kernels in one chain whose edges are all programmatic (read back from the
    driver), and one launch of the graph leaves x + stages in buffers[stages % 2], for two chains the checker draws."""
    import cupy as cp
    import numpy as np

    require_cuda("programmatic dependent launch")
    _require_pdl()
    kernel = stage_kernel()
    stream = _device().create_stream()
    rng = checking.numpy_generator()
    lines = []
    for stages, n in _chain_cases(int(rng.integers(1 << 30))):
        x = rng.uniform(-100, 100, n).astype(np.float32)
        a, b = (cp.full(n + CHAIN_GUARD, GUARD_VALUE, dtype=cp.float32) for _ in range(2))
        builder = stream.create_graph_builder().begin_building()
        try:
            capture_pdl_chain(builder, kernel, stages, (a, b), n)
            if getattr(builder, "is_building", False):  # ending it yourself is fine too
                builder.end_building()
        except BaseException:
            graphs.end_abandoned_capture(getattr(builder, "stream", stream))
            raise
        shape, edges = graphs.topology(builder), graphs.edge_types(builder)
        problem = _chain_problem(shape, edges, stages)
        if problem:
            raise problem
        graph = builder.complete()
        a[:n], b[:n] = cp.asarray(x), cp.nan  # after the capture: a launch that ran outside the graph is undone
        cp.cuda.Device().synchronize()
        graph.launch(stream)
        devicegraphs.wait(stream, GPU_TIMEOUT_S, "your chain")
        expected = x.copy()
        for _ in range(stages):
            expected = expected + np.float32(1)
        out = (a, b)[stages % 2][:n].get()
        guards_moved = int((a[n:] != GUARD_VALUE).sum() + (b[n:] != GUARD_VALUE).sum())
        problem = _chain_data_problem(out, expected, guards_moved, stages, n)
        if problem:
            raise problem
        lines.append(f"{stages} stages on {n:,} elements")
    return (f"{' and '.join(lines)}: one chain of stage kernels, every edge programmatic (read from the driver), "
            "and each graph's launch gives x + stages")


# ---- exercise 3: the grid barrier of a persistent kernel ----------------------------------------------------

STAGES_SOURCE = r"""
// The checker's persistent kernel: every stage in one launch, your grid_barrier between stages. Block k owns
// the chunk cells from k * chunk; stage s reads its own cells and the next block's, which that block wrote in
// stage s - 1. In every third stage one block's last warp starts late, so a block that goes on too early reads stale
// cells; in the others the blocks arrive close together.
extern "C" __global__ void launchlab_stages(unsigned int* a, unsigned int* b, int chunk, int stages,
                                            unsigned int* count, unsigned int* generation,
                                            unsigned long long slow_ns) {
    int n = chunk * (int)gridDim.x;
    for (int s = 0; s < stages; ++s) {
        const unsigned int* src = (s % 2 == 0) ? a : b;
        unsigned int* dst = (s % 2 == 0) ? b : a;
        if (s % 3 == 0 && blockIdx.x == (unsigned int)(s / 3) % gridDim.x && threadIdx.x >= blockDim.x - 32) {
            unsigned long long start, t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
            do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - start < slow_ns);
        }
        for (int j = threadIdx.x; j < chunk; j += blockDim.x) {
            int i = (int)blockIdx.x * chunk + j;
            dst[i] = src[i] * 3u + src[(i + chunk) % n] + (unsigned int)s;
        }
        grid_barrier(count, generation);
    }
}
"""
# How late the slow warp starts: longer than a barrier takes with the jitter's naps, so a block whose threads
# arrive before the slow warp has written is released while it still writes.
SLOW_NS = 25_000

# Put before your barrier, and only around it: each atomic your barrier makes may nap before and after it (one in
# eight, up to about 16 us, by a hash of the block and the clock), so the windows a memory-model bug leaves open
# (between an arrival and reading the generation, between a release and resetting the count) stay open long
# enough for the other blocks to walk through them, as a busy GPU would some day. A right barrier does not depend
# on timing. The atomics are renamed to forwarding templates, so every spelling that compiles without the naps
# (::atomicAdd, a pointer to it, a call in a template) compiles with them.
BARRIER_JITTER = r"""
__device__ __forceinline__ void launchlab_jitter() {
    unsigned int h = (blockIdx.x * 2654435761u) ^ (unsigned int)clock64();
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    if ((h & 7u) == 0u) __nanosleep(1024u + (h >> 16) % 7168u);
}
#define LAUNCHLAB_JITTERED(name)                                                              \
    template <class... A> __device__ __forceinline__ auto launchlab_##name(A... a)           \
        -> decltype(::name(a...)) {                                                           \
        launchlab_jitter(); auto r = ::name(a...); launchlab_jitter(); return r;              \
    }
LAUNCHLAB_JITTERED(atomicAdd) LAUNCHLAB_JITTERED(atomicSub) LAUNCHLAB_JITTERED(atomicExch)
LAUNCHLAB_JITTERED(atomicInc) LAUNCHLAB_JITTERED(atomicCAS)
#define atomicAdd launchlab_atomicAdd
#define atomicSub launchlab_atomicSub
#define atomicExch launchlab_atomicExch
#define atomicInc launchlab_atomicInc
#define atomicCAS launchlab_atomicCAS
#line 1 "your_barrier.cu"
"""
JITTER_END = "\n#undef atomicAdd\n#undef atomicSub\n#undef atomicExch\n#undef atomicInc\n#undef atomicCAS\n"


def barrier_program(source: str) -> str:
    """The program the checker compiles: your barrier, its atomics jittered, then the checker's persistent kernel
    (its lines named as its own, so a compiler error there does not point into your source)."""
    return BARRIER_JITTER + source + JITTER_END + '#line 1 "checker_stages.cu"\n' + STAGES_SOURCE


def _barrier_cases(seed: int) -> list[dict]:
    """Three launches: most SMs, about half of them, and a handful of blocks; block sizes 64 to 384 in a drawn
    order, hundreds of stages (one count odd), a chunk of one to three cells a thread."""
    rng = random.Random(seed)
    blocks = rng.sample([64, 128, 256, 384], 3)
    fractions = [rng.uniform(0.8, 0.99), rng.uniform(0.4, 0.6), None]
    cases = []
    for block, fraction in zip(blocks, fractions, strict=True):
        cases.append({"block": block, "fraction": fraction, "few": rng.randrange(2, 9),
                      "stages": rng.randrange(150, 300), "per_thread": rng.randrange(1, 4),
                      "seed": rng.randrange(1 << 30)})
    cases[1]["stages"] |= 1  # one odd stage count: the result ends in b
    return cases


def _grid_for(case: dict, sms: int) -> int:
    """The blocks of one case on a GPU of `sms` SMs: never all SMs, never the block size, at least 2."""
    grid = case["few"] if case["fraction"] is None else int(case["fraction"] * sms)
    grid = max(2, min(grid, sms - 1))
    return grid - 1 if grid == case["block"] else grid


def stages_reference(a, chunk: int, stages: int):
    """The host's result of launchlab_stages on a (a uint32 NumPy array): the last buffer the kernel writes."""
    import numpy as np

    src = a.astype(np.uint32)
    for s in range(stages):
        src = src * np.uint32(3) + np.roll(src, -chunk) + np.uint32(s)
    return src


HANG_HINT = ("count arrivals once per block (thread 0), compare the arrival's old value with gridDim.x - 1, have "
             "that last block reset count to 0 and then bump generation, and spin on the volatile generation "
             "until it changes from the value read before arriving")
EARLY_HINT = ("no thread may go on before every block has finished the stage: __syncthreads() before thread 0 "
              "arrives, __threadfence() around the arrival, spin until generation changes, __syncthreads() after")


def _barrier_trial(source: str, cases: list, timeout_s: float = 10.0) -> dict:
    """The checker's persistent kernel over your barrier on each case (in a child process)."""
    import cupy as cp
    import numpy as np
    from cuda.core import LaunchConfig, launch

    device = _device()
    try:
        kernel = _compile(barrier_program(source)).get_kernel("launchlab_stages")
    except Exception as exc:
        return {"error": f"your source did not compile with the checker's kernel: {_first_line(exc)}",
                "hint": "define __device__ void grid_barrier(unsigned int* count, volatile unsigned int* generation)"}
    sms = device.properties.multiprocessor_count
    stream = device.create_stream()
    count = cp.zeros(1, dtype=cp.uint32)
    # generation starts a few dozen bumps short of 2**32, so it wraps to 0 during the first launch: a barrier that
    # waits with `<` on a target one past what it saw releases too soon there.
    generation = cp.asarray(np.array([(1 << 32) - random.Random(cases[0]["seed"]).randrange(16, 64)], dtype=np.uint32))
    done = []
    for case in cases:  # count and generation carry over: a barrier must leave them ready for the next launch
        block, stages = case["block"], case["stages"]
        grid, chunk = _grid_for(case, sms), case["block"] * case["per_thread"]
        rng = np.random.default_rng(case["seed"])
        start = rng.integers(0, 1 << 32, grid * chunk, dtype=np.uint32)
        a, b = cp.asarray(start), cp.asarray(rng.integers(0, 1 << 32, grid * chunk, dtype=np.uint32))
        where = f"{grid} blocks of {block} threads, {stages} stages"
        cp.cuda.Device().synchronize()
        try:
            launch(stream, LaunchConfig(grid=grid, block=block, is_cooperative=True), kernel, a.data.ptr, b.data.ptr,
                   np.int32(chunk), np.int32(stages), count.data.ptr, generation.data.ptr, np.uint64(SLOW_NS))
            devicegraphs.wait(stream, timeout_s, "the persistent kernel")
        except TimeoutError:
            return {"error": f"on {where}, your barrier never let the kernel finish: it was stopped after "
                             f"{timeout_s:g} s (blocks spinning for an arrival or a release that never came)",
                    "hint": HANG_HINT}
        except Exception as exc:
            return {"error": f"on {where}, the persistent kernel failed: {_first_line(exc)}", "hint": HANG_HINT}
        out = (b if stages % 2 else a).get()
        expected = stages_reference(start, chunk, stages)
        wrong = np.flatnonzero(out != expected)
        done.append({"grid": grid, "block": block, "stages": stages, "cells": grid * chunk, "wrong": int(wrong.size),
                     "first": int(wrong[0]) if wrong.size else -1, "chunk": chunk, "count": int(count.get()[0])})
        if _barrier_problem(done[-1]):
            break  # the first launch that went wrong says enough
    return {"cases": done}


def _barrier_problem(r: dict) -> CheckFailed | None:
    """What went wrong with one launch, from what the child reported; None if it matched the host."""
    where = f"on {r['grid']} blocks of {r['block']} threads, {r['stages']} stages"
    if r["wrong"]:
        block = r["first"] // r["chunk"]
        return CheckFailed(f"{where}: {r['wrong']:,} of {r['cells']:,} cells differ from the host's result (the "
                           f"first in block {block}'s chunk): some block went on before the others had finished a "
                           "stage", hint=EARLY_HINT)
    if r["count"] != 0:
        return CheckFailed(f"{where}: the kernel finished, but count is {r['count']} after it; it must be back to 0, "
                           "or the next launch's barriers miscount",
                           hint="the last block to arrive resets count to 0, before it bumps generation")
    return None


@exercise(3,
          "__syncthreads(); in thread 0: read generation, __threadfence(), then if atomicAdd(count, 1) == "
          "gridDim.x - 1 { reset count to 0; __threadfence(); bump generation } else spin while generation is "
          "unchanged; __threadfence(); then __syncthreads()")
def check_grid_barrier(grid_barrier_source: Callable[[], str]) -> str:
    """The checker's persistent kernel over your barrier, three cooperative launches of hundreds of stages each
    (in a child process with a deadline): every cell equal to the host's, count back to 0 after each launch."""
    source = _source(grid_barrier_source(), "grid_barrier_source()")
    require_cuda("a persistent kernel")
    cases = _barrier_cases(checking.rng().randrange(1 << 30))
    # every GPU wait is bounded, and the first that runs out ends the child
    report = _in_child(f"_barrier_trial({source!r}, {cases!r}, {GPU_TIMEOUT_S!r})", CHILD_START_S + 2 * GPU_TIMEOUT_S)
    every_case_right(report["cases"], len(cases), _barrier_problem, "launches")
    runs = ", ".join(f"{c['grid']} blocks of {c['block']} x {c['stages']} stages" for c in report["cases"])
    return f"{runs}: every cell equal to the host's, no hang, count back to 0 after each launch"


# ---- exercise 4: the right rung for each workload -----------------------------------------------------------

RUNGS = ("graph", "graph + PDL", "persistent", "fused")  # simplest first
TIE = 0.05  # rungs whose per-stage medians are this close (as a fraction of the fastest) are a tie
SAMPLES = 7


def allowed(workload: dict, rung: str) -> bool:
    """Whether the workload allows a rung: one kernel for every stage needs own_kernels, fusing needs fusable too."""
    if rung == "persistent":
        return bool(workload["own_kernels"])
    if rung == "fused":
        return bool(workload["own_kernels"] and workload["fusable"])
    return True


def persistent_needs_fusable(workload: dict, rung: str) -> bool:
    """A wrong reading of the rules: persistent allowed only where fused is."""
    return allowed(workload, rung) and (rung != "persistent" or bool(workload["fusable"]))


def rung_by(workload: dict, summary: Callable = statistics.median, per_stage: bool = True,
            respect: bool = True, tie: float = TIE, absolute: float | None = None, order: str = "rungs",
            from_simpler: bool = False, allow: Callable[[dict, str], bool] = allowed) -> str:
    """The simplest rung within `tie` of the fastest allowed one, the rungs compared by summary(samples) / stages.
    The defaults give the right answer; the others, the mistakes the checker names: `absolute` a tie of that many
    microseconds instead of a fraction, `order="table"` the first tied rung in the table's order, not in RUNGS,
    `from_simpler` the gap taken as a fraction of the slower rung's time (fastest >= (1 - tie) * slower), `allow`
    another reading of which rungs a workload allows."""
    times = {}
    for rung in RUNGS:
        m = workload["measurements"][rung]
        if allow(workload, rung) or not respect:
            times[rung] = summary(m["samples_us"]) / (m["stages"] if per_stage else 1)
    best = min(times.values())
    limit = best + absolute if absolute is not None else best / (1 - tie) if from_simpler else (1 + tie) * best
    ranked = RUNGS if order == "rungs" else tuple(workload["measurements"])
    return next(rung for rung in ranked if rung in times and times[rung] <= limit)


def first_sample(samples: list) -> float:
    return samples[0]


def last_sample(samples: list) -> float:
    return samples[-1]


def unsorted_middle(samples: list) -> float:
    return samples[len(samples) // 2]


ONE_RUN_HINT = ("compare medians, not one run (the first, the last, or the middle one of the unsorted samples): any "
                "one run may be a lucky or a slow one, and the runs are in the order they were taken; "
                "statistics.median sorts them")
SLIPS = [
    ({"summary": statistics.fmean}, "compare medians, not means: one slow sample (a first run, a hiccup) pulls a "
                                    "mean far off"),
    ({"summary": min}, "compare medians, not the fastest sample: one lucky run is not the rung's speed"),
    ({"summary": max}, "compare medians, not the slowest sample: one slow run is not the rung's speed"),
    *(({"summary": one}, ONE_RUN_HINT) for one in (first_sample, last_sample, unsorted_middle)),
    ({"per_stage": False}, "divide each median by the stages it was measured over: the rungs were timed over "
                           "chains of different lengths"),
    ({"order": "table"}, "of the tied rungs take the simplest, the first in RUNGS: the order of "
                         "workload['measurements'] says nothing"),
    ({"tie": 0.0}, f"a rung within {TIE:.0%} of the fastest allowed one is a tie: take the simplest such rung, the "
                   "first in RUNGS; a rung that is not measurably faster is not worth its complexity"),
    ({"from_simpler": True}, "the tie is a fraction of the fastest rung's time, per_stage <= (1 + TIE) * fastest, "
                             "not of the slower one's (fastest >= (1 - TIE) * per_stage allows 5.26%)"),
    ({"absolute": TIE}, f"the tie is a fraction of the fastest rung's time, per_stage <= (1 + TIE) * fastest, not "
                        f"{TIE:g} us: a gap of a few nanoseconds can be 10% and one of a microsecond 3%"),
    ({"allow": persistent_needs_fusable}, "persistent needs own_kernels alone (it runs your own kernels, one program "
                                          "a stage); only fused needs fusable as well"),
]

FLAGS_ONLY_HINT = ("your rung is the same for every workload with the same own_kernels and fusable, whatever its "
                   "measurements (ignoring them does that, and so does a tie written as 5 rather than 0.05): of the "
                   "rungs the flags allow, compare each one's median(samples_us) / stages and take the first in "
                   f"RUNGS within {TIE:.0%} of the fastest")

# The made-up workloads' gaps, as the simpler rung's per-stage median over the faster one's, less 1: a tie well
# inside TIE, a miss just outside it and inside 1 / (1 - TIE) - 1 = 5.26% (so taking the gap as a fraction of the
# slower rung's time calls it a tie), and 12% or more everywhere else. Each run is within JITTER of its rung's time
# (NEAR_JITTER for the near miss's two rungs), so a median, and the gap, moves by less than that. Nothing is planted
# at exactly 5%: a measured gap never lands on the boundary, so `<` and `<=` both pass.
TIE_GAP = (0.032, 0.042)
NEAR_GAP = (0.0511, 0.0515)
JITTER, NEAR_JITTER = 0.003, 0.0002
# Per-stage times of the workloads' graph rung, in us: most anywhere a graph's stage takes, one tie at large stages
# (its gap a third of a microsecond or more) and the near miss at small ones (its gap under 0.07 us), so no tie
# of a fixed number of microseconds agrees with the rule on both.
BASE_US, LARGE_US, SMALL_US = (0.5, 3.0), (15.0, 30.0), (0.6, 0.9)


def _measured(rng: random.Random, us_per_stage: float, stages: int, changed: dict | None = None,
              jitter: float = JITTER) -> dict:
    """A rung's made-up measurement: SAMPLES runs of `stages` stages within `jitter` of us_per_stage, run i then
    multiplied by changed[i] (a slow run above 1, a lucky one below)."""
    samples = [us_per_stage * stages * rng.uniform(1 - jitter, 1 + jitter) for _ in range(SAMPLES)]
    for i, factor in (changed or {}).items():
        samples[i] *= factor
    return {"stages": stages, "samples_us": [round(s, 4) for s in samples]}


def _workload(rng: random.Random, name: str, own_kernels: bool, fusable: bool, ratios: dict, base: tuple,
              stages: dict | None = None, changed: dict | None = None, listed: tuple | None = None,
              jitter: float = JITTER) -> dict:
    """A made-up workload: per-stage times as ratios to a base drawn from `base`, each rung timed over its own chain
    length, the rungs in a drawn order but for `listed`, two rungs the table lists in that order."""
    us = rng.uniform(*base)
    rungs = list(RUNGS)
    rng.shuffle(rungs)
    if listed and rungs.index(listed[0]) > rungs.index(listed[1]):
        i, j = rungs.index(listed[1]), rungs.index(listed[0])
        rungs[i], rungs[j] = rungs[j], rungs[i]
    measurements = {rung: _measured(rng, us * ratios[rung], (stages or {}).get(rung, rng.choice([50, 100, 200, 400])),
                                    (changed or {}).get(rung), jitter) for rung in rungs}
    return {"name": name, "own_kernels": own_kernels, "fusable": fusable, "measurements": measurements}


def planted_workloads(rng: random.Random) -> list[tuple[str, dict]]:
    """(trap, workload) for made-up workloads, each with its trap: the fastest rung not allowed, two ties the simpler
    rung wins, a near miss the faster rung wins, a chain of ties (each rung within the tie of the next faster one,
    the simplest not within it of the fastest), slow runs in the fastest rung, lucky runs in a slower one, chains
    of different lengths. Built so that every rule the checker names as a slip gives a wrong rung on some workload
    of every draw: the slow and lucky runs sit at positions that cover all SAMPLES between them (so reading any one
    run, the first, the last or the unsorted middle, goes wrong somewhere), and a mildly slow run (1.3x) moves a
    maximum but not a mean (so the two slips can be told apart); one tie lists its faster rung first and the other
    its simpler one (so the table's order goes wrong either way); one tie is at large stages and the near miss at
    small ones (so no tie in microseconds fits). The names say nothing of the trap."""
    positions = list(range(SAMPLES))
    rng.shuffle(positions)
    slow_runs, lucky_run, lucky_runs = positions[:3], positions[3], positions[4:]

    def gap(bounds):
        return 1 + rng.uniform(*bounds)

    # each rung within the tie of the next faster one, the simplest not within it of the fastest: a tie taken step
    # by step from the fastest, not against the fastest, ends at the simplest
    chained = (gap(TIE_GAP), gap(TIE_GAP))
    ties = ["persistent ties graph + PDL", "graph + PDL ties graph"]
    large = rng.choice(ties)
    faster_first = rng.choice(ties)
    pairs = {"persistent ties graph + PDL": ("graph + PDL", "persistent"),
             "graph + PDL ties graph": ("graph", "graph + PDL")}

    def tie_extra(trap):
        simpler, faster = pairs[trap]
        return {"listed": (faster, simpler) if trap == faster_first else (simpler, faster),
                "base": LARGE_US if trap == large else BASE_US}

    made = [
        ("fusable chain", True, True, {"graph": 1.0, "graph + PDL": 0.84, "persistent": 0.92, "fused": 0.12}, {}),
        ("fused is fastest but not allowed, and one run of the right rung is slow", True, False,
         {"graph": 1.0, "graph + PDL": 0.86, "persistent": 0.72, "fused": 0.1},
         {"changed": {"persistent": {rng.randrange(SAMPLES): 1.3}}}),
        ("a library kernel between stages", False, True,
         {"graph": 1.0, "graph + PDL": 0.83, "persistent": 0.55, "fused": 0.3}, {}),
        ("persistent ties graph + PDL", True, False,
         {"graph": 1.0, "graph + PDL": 0.8, "persistent": 0.8 / gap(TIE_GAP), "fused": 0.2},
         tie_extra("persistent ties graph + PDL")),
        ("graph + PDL ties graph", False, False,
         {"graph": 1.0, "graph + PDL": 1 / gap(TIE_GAP), "persistent": 0.6, "fused": 0.1},
         tie_extra("graph + PDL ties graph")),
        ("persistent just past the tie", True, False,
         {"graph": 1.0, "graph + PDL": 0.8, "persistent": 0.8 / gap(NEAR_GAP), "fused": 0.15},
         {"base": SMALL_US, "jitter": NEAR_JITTER}),
        ("slow runs in the fastest rung", True, False,
         {"graph": 1.0, "graph + PDL": 0.87, "persistent": 0.7, "fused": 0.2},
         {"changed": {"persistent": {i: rng.uniform(3.0, 8.0) for i in slow_runs}, "graph + PDL": {lucky_run: 0.6}}}),
        ("lucky runs in a slower rung", False, False,
         {"graph": 1.0, "graph + PDL": 0.8, "persistent": 0.5, "fused": 0.3},
         {"changed": {"graph": {i: 0.6 for i in lucky_runs},
                      "graph + PDL": {rng.choice(lucky_runs): rng.uniform(3.0, 8.0)}}}),
        ("ties chained", True, False,
         {"graph": 1.0, "graph + PDL": 1 / chained[1], "persistent": 1 / (chained[0] * chained[1]), "fused": 0.2},
         # two stages for persistent: a time divided by stages - 1 comes out twice its time a stage
         {"stages": {"graph": 8, "graph + PDL": 8, "persistent": 2, "fused": 8}}),
        ("chains of different lengths", True, False,
         {"graph": 1.0, "graph + PDL": 0.85, "persistent": 0.72, "fused": 0.2},
         {"stages": {"graph": 60, "graph + PDL": 100, "persistent": 400, "fused": 50}}),
    ]
    rng.shuffle(made)
    return [(trap, _workload(rng, f"made-up workload {i + 1}", own, fusable, ratios, **{"base": BASE_US, **extra}))
            for i, (trap, own, fusable, ratios, extra) in enumerate(made)]


# The lab's three workloads: made-up measurements, shaped like the lecture's ladder, declared in workloads.toml.
WORKLOADS = tomllib.loads((importlib.resources.files(__package__) / "workloads.toml").read_text(encoding="utf-8"))[
    "workloads"]


def _per_stage_line(workload: dict) -> str:
    parts = []
    for rung in RUNGS:
        m = workload["measurements"][rung]
        mark = "" if allowed(workload, rung) else " (not allowed)"
        parts.append(f"{rung} {statistics.median(m['samples_us']) / m['stages']:.3f}{mark}")
    return "per-stage medians (us): " + ", ".join(parts)


def _rung_of(choose_rung: Callable, workload: dict) -> str:
    """The learner's rung for one workload (given a copy), or CheckFailed saying what was returned instead."""
    yours = choose_rung(copy.deepcopy(workload))
    what = f"for {workload['name']!r}"
    if yours is None:
        raise CheckFailed(f"choose_rung returned None {what}: did it forget to `return` the rung's name?")
    if not isinstance(yours, str):
        raise CheckFailed(f"choose_rung returned {type(yours).__name__} {yours!r:.40} {what}; return one of "
                          f"{', '.join(map(repr, RUNGS))}")
    if yours not in RUNGS:
        raise CheckFailed(f"choose_rung returned {yours!r} {what}, which is not a rung: return one of "
                          f"{', '.join(map(repr, RUNGS))}, spelled as in RUNGS")
    return yours


def _rung_failure(trap: str, workload: dict, yours: str, judged: list[tuple[dict, str]]) -> CheckFailed:
    """The failure for the first workload answered wrong, with the hint of the slip that gives every answer, or of
    answers that follow the flags alone; else the exercise's own hint."""
    expected = rung_by(workload)
    what = f"for {workload['name']!r}" + (f" (its trap: {trap})" if trap else "")
    detail = f"{what} you chose {yours!r}, expected {expected!r}; {_per_stage_line(workload)}"
    if not allowed(workload, yours):
        flags = f"own_kernels={workload['own_kernels']}, fusable={workload['fusable']}"
        return CheckFailed(detail, hint=f"{yours!r} is not allowed here ({flags}): persistent needs own_kernels, "
                                        "fused needs own_kernels and fusable; the fastest figure does not matter")
    everywhere = [hint for change, hint in SLIPS if all(rung_by(w, **change) == y for w, y in judged)]
    if everywhere:
        return CheckFailed(detail, hint=everywhere[0])
    by_flags: dict[tuple[bool, bool], set[str]] = {}
    for w, y in judged:
        by_flags.setdefault((w["own_kernels"], w["fusable"]), set()).add(y)
    if all(len(rungs) == 1 for rungs in by_flags.values()):   # the right rule's rungs vary within a pair of flags
        return CheckFailed(detail, hint=FLAGS_ONLY_HINT)
    # No slip gives every answer: naming the one nearest would mislead as often as not (two slips at once, or one
    # the checker does not know), so the exercise's own hint says the whole rule
    return CheckFailed(detail)


@exercise(4,
          "keep the rungs the workload allows; per-stage time = median(samples_us) / stages; among the allowed "
          f"rungs, return the first in RUNGS within {TIE:.0%} of the fastest")
def check_rung(choose_rung: Callable[[dict], str]) -> str:
    """The lab's three workloads, then made-up ones that each hide a trap, against the reference rule."""
    planted = planted_workloads(checking.rng())
    cases = [("", w) for w in WORKLOADS] + planted
    judged = [(trap, w, _rung_of(choose_rung, w)) for trap, w in cases]
    for trap, workload, yours in judged:
        if yours != rung_by(workload):
            raise _rung_failure(trap, workload, yours, [(w, y) for _, w, y in judged])
    answers = [f"{w['name']}: {yours}" for _, w, yours in judged[:len(WORKLOADS)]]
    return (f"{'; '.join(answers)}; and {len(planted)} made-up workloads (fastest rung not allowed, ties, a near "
            "miss, slow and lucky runs, chains of different lengths)")
