"""Checkers for lab 06, "Device-side graph launch and conditional nodes".

Exercise 1 launches your graph from the checker's own kernel; exercises 2 and 3 compile your CUDA source and
run it in a child process with a timeout (a loop on the GPU that never stops cannot be interrupted, and a bad
device launch can corrupt the CUDA context), in graphs whose first node is the checker's own counting kernel, so
every launch of your kernel, tail launches included, is counted; exercise 2's queues are followed by cells that
must stay untouched. Exercise 4 reads your WHILE node and its body back before launching it.
"""

from __future__ import annotations

from collections.abc import Callable

from ... import checking, devicegraphs, graphs
from ...checking import CheckFailed, checker_call_in_child, every_case_right, exercise, require_cuda

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "BISECTION_PRELUDE",
    "HALVING_SOURCE",
    "MAX_COUNT",
    "check_device_launchable",
    "check_scheduler",
    "check_tail_loop",
    "check_while_loop",
]

LAUNCHER_SOURCE = r"""
extern "C" __global__ void launch_child(cudaGraphExec_t child, int* status) {
    *status = (int)cudaGraphLaunch(child, cudaStreamGraphFireAndForget);
}
extern "C" __global__ void count(int* hits) { atomicAdd(hits, 1); }
"""
# The checker's own kernel, run before yours in the graph it builds: it counts every launch of that graph.
COUNTER_SOURCE = r"""
extern "C" __global__ void launchlab_count_runs(int* runs) { atomicAdd(runs, 1); }
"""
HANDLER_SOURCE = r"""
extern "C" __global__ void handle_kind(int kind, const int* current, int* done_by, int* hits) {
    int item = *current;
    done_by[item] = kind;
    atomicAdd(&hits[item], 1);
}
"""
BISECTION_PRELUDE = r"""
__device__ float f(float x) { return x * x * x - 2.0f * x - 5.0f; }
// One bisection step: keep the half of [lo, hi] in which f changes sign.
__device__ void bisect_step(float* lo, float* hi) {
    float mid = 0.5f * (*lo + *hi);
    if (f(*lo) * f(mid) <= 0.0f) *hi = mid; else *lo = mid;
}
extern "C" __global__ void bisect_host_driven(float* lo, float* hi, int* steps) {
    bisect_step(lo, hi);
    *steps += 1;
}
"""
HALVING_SOURCE = r"""
#include <cuda_device_runtime_api.h>
extern "C" __global__ void halve_all(float* x, int n, float threshold, int* count, int max_count,
                                     cudaGraphConditionalHandle handle) {
    __shared__ int above;
    if (threadIdx.x == 0) above = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        x[i] *= 0.5f;
        if (fabsf(x[i]) > threshold) above = 1;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int k = ++*count;
        cudaGraphSetConditional(handle, above && k < max_count);
    }
}
"""
MAX_COUNT = 64
CHILD_TIMEOUT_S = 60  # a right answer compiles and runs in seconds; a scheduler that never ends is stopped
CHILD_START_S = 40  # what a child may spend starting and compiling, before its GPU waits
CHILD_EXIT_S = 5  # after its RESULT line, how long a child may take to exit
GPU_TIMEOUT_S = 20  # one GPU wait; a right answer needs milliseconds
GUARD = 8  # cells after each queue (valid kinds) and after each result array (untouched) in exercise 2


def _capture(stream, record_work: Callable, device_launch: bool):
    """Capture what record_work(cupy stream) launches on a cuda.core builder over `stream`."""
    import cupy as cp
    from cuda.core.graph import GraphCompleteOptions

    builder = stream.create_graph_builder().begin_building()
    record_work(cp.cuda.Stream.from_external(builder))
    builder.end_building()
    return builder.complete(GraphCompleteOptions(device_launch=True, upload_stream=stream) if device_launch else None)


def _new_stream():
    """A fresh cuda.core stream on the current device."""
    from cuda.core import Device

    device = Device()
    device.set_current()
    return device.create_stream()


# ---- exercise 1: a graph a kernel can launch ----------------------------------------------------------------

@exercise(1,
          "capture with stream.create_graph_builder(), launch record_work's kernels on "
          "cp.cuda.Stream.from_external(builder), then builder.complete(GraphCompleteOptions(device_launch=True, "
          "upload_stream=stream)); do not launch it yourself")
def check_device_launchable(make_device_launchable: Callable) -> str:
    """Your graph is flagged for device launch, uploaded, not yet run; the checker's kernel launches it once."""
    import cupy as cp
    import numpy as np

    require_cuda("device graph launch")
    devicegraphs.require("device graph launch")
    stream = _new_stream()
    kernels = devicegraphs.compile_with_device_runtime(LAUNCHER_SOURCE)
    hits, status = cp.zeros(1, dtype=cp.int32), cp.full(1, -1, dtype=cp.int32)
    cp.cuda.Device().synchronize()
    graph = make_device_launchable(lambda s: kernels.get_function("count")((1,), (1,), (hits,), stream=s), stream)
    if not (hasattr(graph, "handle") and hasattr(graph, "upload")):
        raise CheckFailed(f"return the executable cuda.core Graph that complete() gives, not {type(graph).__name__}",
                          hint="return builder.complete(GraphCompleteOptions(device_launch=True, upload_stream=stream)), "
                               "the executable graph, not the builder or its handle")
    devicegraphs.wait(stream, GPU_TIMEOUT_S)
    cp.cuda.Device().synchronize()
    if int(hits[0]):
        raise CheckFailed(f"the work already ran {int(hits[0])} time{'s' if int(hits[0]) > 1 else ''} before any "
                          "kernel launched it",
                          hint="record the work on cp.cuda.Stream.from_external(builder) so it is captured, not run, "
                               "and do not launch the graph yourself: the checker's kernel does")
    # checked before launching: a kernel handed a graph without the flag corrupts the CUDA context
    if not devicegraphs.device_launchable(graph):
        raise CheckFailed("the graph was not instantiated for device launch",
                          hint="pass GraphCompleteOptions(device_launch=True, upload_stream=stream) to complete()")
    launcher = _capture(stream, lambda s: kernels.get_function("launch_child")(
        (1,), (1,), (np.uint64(int(graph.handle)), status), stream=s), device_launch=False)
    launcher.launch(stream)
    devicegraphs.wait(stream, GPU_TIMEOUT_S, "the checker's launcher")
    code = int(status[0])
    if code != 0:
        raise CheckFailed(f"the GPU refused to launch your graph ({devicegraphs.cuda_error_name(code)}): was it "
                          "uploaded?", hint="a graph launched from the device must be uploaded first: pass "
                                            "upload_stream=stream in GraphCompleteOptions (or call graph.upload(stream))")
    if int(hits[0]) != 1:
        raise CheckFailed(f"launched from the GPU, your graph ran the work {int(hits[0])} times; expected once",
                          hint="call record_work once, on the capture's stream: each call records the work again")
    return "flagged for device launch, uploaded, and run exactly once by the checker's kernel (one host launch)"


# ---- exercise 2: the scheduler's dispatch by kind ------------------------------------------------------------

def _scheduler_queues(seed: int) -> list[tuple[int, int, int]]:
    """(seed, items, kinds) of the queues one check runs: one item, a short odd queue, a long odd one."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1 << 30)), 1, int(rng.integers(2, 4))),
            (int(rng.integers(1 << 30)), int(rng.integers(3, 12)) * 2 + 1, int(rng.integers(2, 5))),
            (int(rng.integers(1 << 30)), int(rng.integers(100, 200)) * 2 + 1, int(rng.integers(3, 7)))]


def _scheduler_trial(source: str, queues: list, timeout_s: float = 20.0) -> dict:
    """Run `source`'s schedule kernel over the queues; what each item got (in a child process).

    Each queue is followed by GUARD cells holding valid kinds, and the result arrays by GUARD cells that must
    stay untouched, so a scheduler that reads past the end of its queue handles an item that does not exist.
    The checker's graph runs its own counting kernel before `schedule`, so every (tail) launch is counted.
    """
    stream = _new_stream()
    try:
        schedule = devicegraphs.compile_with_device_runtime(source).get_function("schedule")
        schedule.kernel  # noqa: B018 - loads the module, so a missing kernel fails here
    except Exception as exc:
        return {"error": f"your source did not compile, or has no `schedule` kernel: {str(exc).splitlines()[0][:300]}"}
    done = []
    for seed, items, kinds in queues:
        try:
            done.append(_run_queue(stream, schedule, seed, items, kinds, timeout_s))
        except TimeoutError:
            return {"error": f"your scheduler did not finish a queue of {items} items within {timeout_s:g} s and was "
                             "stopped: does it advance *next, and stop relaunching once i + 1 reaches n_items?"}
        except RuntimeError as exc:
            return {"error": str(exc).splitlines()[0]}
        if _scheduler_problem(done[-1]):
            break  # the first queue that went wrong says enough
    return {"queues": done}


def _run_queue(stream, schedule, seed: int, items: int, kinds: int, timeout_s: float) -> dict:
    """One queue through the scheduler, launched once from the host: what each item and guard cell got."""
    import cupy as cp
    import numpy as np

    handle_kind = cp.RawKernel(HANDLER_SOURCE, "handle_kind")
    count_runs = cp.RawKernel(COUNTER_SOURCE, "launchlab_count_runs")
    rng = np.random.default_rng(seed)
    queue = cp.asarray(rng.integers(0, kinds, items + GUARD, dtype=np.int32))
    next_item, current, runs = (cp.zeros(1, dtype=cp.int32) for _ in range(3))
    done_by, hits = cp.full(items + GUARD, -1, dtype=cp.int32), cp.zeros(items + GUARD, dtype=cp.int32)
    cp.cuda.Device().synchronize()
    handlers = [_capture(stream, lambda s, k=k: handle_kind((1,), (1,), (np.int32(k), current, done_by, hits),
                                                          stream=s), device_launch=True) for k in range(kinds)]
    table = cp.asarray(np.array([int(h.handle) for h in handlers], dtype=np.uint64))

    def record(s):
        count_runs((1,), (1,), (runs,), stream=s)
        schedule((1,), (1,), (queue, np.int32(items), next_item, current, table), stream=s)

    scheduler = _capture(stream, record, device_launch=True)
    scheduler.launch(stream)
    seconds = devicegraphs.wait(stream, timeout_s, "your scheduler")
    q, by, n = queue.get(), done_by.get(), hits.get()
    wrong = [int(i) for i in np.flatnonzero((n[:items] > 0) & (by[:items] != q[:items]))[:3]]
    never = n[:items] == 0
    return {"items": items, "kinds": kinds, "runs": int(runs[0]), "seconds": seconds,
            "past_end": int((n[items:] != 0).sum() + (by[items:] != -1).sum()),
            "wrong": wrong, "wrong_kinds": [(int(q[i]), int(by[i])) for i in wrong],
            "never": int(never.sum()), "first_never": int(np.argmax(never)) if never.any() else -1,
            "repeated": int((n[:items] > 1).sum())}


def _scheduler_problem(r: dict) -> CheckFailed | None:
    """What went wrong with one queue, from what the child reported; None if it was handled right."""
    items = r["items"]
    of = f"on a queue of {items} item{'s' if items > 1 else ''} of {r['kinds']} kinds"
    if r["past_end"]:
        return CheckFailed(f"{of}, your scheduler handled item {items}, which is past the end of the queue (the cells "
                           "after it must stay untouched)",
                           hint="return as soon as i >= n_items, and relaunch only while i + 1 < n_items: the last "
                                "item is n_items - 1")
    if r["never"]:
        return CheckFailed(f"{of}, {r['never']} items were never handled (the first: item {r['first_never']})",
                           hint="after handling item i, tail-launch the scheduler itself while items remain: "
                                "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch)")
    if r["wrong"]:
        pairs = ", ".join(f"item {i} of kind {k} went to graph {g}" for i, (k, g) in zip(r["wrong"], r["wrong_kinds"], strict=True))
        return CheckFailed(f"{of}, items were handled by the wrong graph: {pairs}",
                           hint="launch handlers[kinds[i]], the graph of item i's kind")
    if r["repeated"]:
        return CheckFailed(f"{of}, {r['repeated']} items were handled more than once",
                           hint="set *current = i and advance *next before launching the handler and relaunching")
    if not items <= r["runs"] <= items + 1:
        return CheckFailed(f"{of}, your scheduler's graph was launched {r['runs']} times for {items} items; each run "
                           "handles one item",
                           hint="one item per run: no loop inside the kernel; the next item is the next run's, "
                                "reached by a tail launch of cudaGetCurrentGraphExec()")
    return None


def _in_child(call: str, timeout_s: float | None = None) -> dict:
    """Run `call` (an expression on this module, returning a dict) in a child process; its dict back."""
    return checker_call_in_child("ch06", call, CHILD_TIMEOUT_S if timeout_s is None else timeout_s, CHILD_EXIT_S,
                                 "a loop on the GPU that never reaches its stop condition?")


def _device_launch_source(make_source: Callable[[], str]) -> str:
    """Your CUDA source, once this machine is known to launch graphs from the device."""
    require_cuda("device graph launch")
    devicegraphs.require("device graph launch")
    source = make_source()
    if not isinstance(source, str):
        raise CheckFailed(f"return the CUDA source as a string, not {type(source).__name__}")
    return source


def _child_deadline(cases: int) -> float:
    """Seconds a child running `cases` GPU waits may take in all: start-up and compilation, then each wait."""
    return CHILD_START_S + cases * GPU_TIMEOUT_S


@exercise(2,
          "i = *next; if (i >= n_items) return; *current = i; *next = i + 1; __threadfence(); "
          "cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget); and, while items remain, "
          "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch)")
def check_scheduler(scheduler_source: Callable[[], str]) -> str:
    """Every item of the queues the checker draws (one item, a short odd queue, a long odd one, each followed by
    cells it must not touch) is handled once, by its kind's graph, one scheduler run per item, after one host
    launch."""
    source = _device_launch_source(scheduler_source)
    queues = _scheduler_queues(checking.rng().randrange(1 << 30))
    r = _in_child(f"_scheduler_trial({source!r}, {queues!r}, {GPU_TIMEOUT_S!r})", _child_deadline(len(queues)))
    every_case_right(r["queues"], len(queues), _scheduler_problem, "queues")
    sizes = ", ".join(f"{q['items']} items of {q['kinds']} kinds" for q in r["queues"])
    slowest = max(q["seconds"] for q in r["queues"])
    return (f"queues of {sizes}: every item handled once, by its kind's graph, one run per item, nothing past the "
            f"end touched; one host launch each (longest {slowest * 1e3:.1f} ms)")


# ---- exercise 3: a host-driven loop turned into a tail-launch loop -----------------------------------------

def _bisection_cases(seed: int) -> list[dict]:
    """The solves one check runs: the lab's interval, a random one at a random tolerance, one at the edge of its
    tolerance (quarter-unit ends, tol their width / 2**k: after k steps hi - lo equals tol exactly in float32, so
    it stops there, and a test of >= tol takes one step more), and one whose tolerance is below float32's spacing
    near the root, so only the fuse (max_steps) can stop it."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lo, hi = float(rng.choice([1.0, 1.25, 1.5, 1.75, 2.0])), float(rng.choice(np.arange(2.25, 4.01, 0.25)))
    return [{"interval": (1.0, 3.0), "tol": 1e-5, "max_steps": 64},
            {"interval": (round(float(rng.uniform(-12, 1.5)), 3), round(float(rng.uniform(2.5, 15)), 3)),
             "tol": float(np.float32(10 ** rng.uniform(-5, -2.5))), "max_steps": 64},
            {"interval": (lo, hi), "tol": (hi - lo) / 2 ** int(rng.integers(8, 17)), "max_steps": 64},
            {"interval": (round(float(rng.uniform(-3, 1.5)), 3), round(float(rng.uniform(2.5, 6)), 3)),
             "tol": 1e-9, "max_steps": int(rng.integers(26, 40))}]


def _bisection_trial(source: str, cases: list, timeout_s: float = 20.0) -> dict:
    """The host-driven loop and your self-relaunching kernel on the same solves (in a child process). The
    checker's graph runs its own counting kernel before yours, so every (tail) launch of it is counted."""
    import cupy as cp
    import numpy as np

    stream = _new_stream()
    try:
        module = devicegraphs.compile_with_device_runtime(BISECTION_PRELUDE + source)
        yours, host_step = module.get_function("bisect_on_gpu"), module.get_function("bisect_host_driven")
        yours.kernel  # noqa: B018 - loads the module, so a missing kernel fails here
    except Exception as exc:
        return {"error": f"your source did not compile, or has no `bisect_on_gpu` kernel: {str(exc).splitlines()[0][:300]}"}
    count_runs = cp.RawKernel(COUNTER_SOURCE, "launchlab_count_runs")
    lo, hi, steps, runs = (cp.zeros(1, dtype=cp.float32), cp.zeros(1, dtype=cp.float32), cp.zeros(1, dtype=cp.int32),
                           cp.zeros(1, dtype=cp.int32))
    done = []
    for case in cases:
        (a, b), tol, max_steps = case["interval"], np.float32(case["tol"]), int(case["max_steps"])
        lo[0], hi[0], steps[0] = a, b, 0
        while True:  # the reference: the host decides after every step
            host_step((1,), (1,), (lo, hi, steps))
            width = np.float32(hi.get()[0]) - np.float32(lo.get()[0])
            if not (width > tol and int(steps[0]) < max_steps):
                break
        expected = (float(lo[0]), float(hi[0]), int(steps[0]))

        def record(s, tol=tol, max_steps=max_steps):
            count_runs((1,), (1,), (runs,), stream=s)
            yours((1,), (1,), (lo, hi, tol, steps, np.int32(max_steps)), stream=s)

        graph = _capture(stream, record, device_launch=True)
        lo[0], hi[0], steps[0], runs[0] = a, b, 0, 0
        cp.cuda.Device().synchronize()
        graph.launch(stream)  # the only host launch
        try:
            devicegraphs.wait(stream, timeout_s, "your loop")
        except TimeoutError:
            fuse = " (the interval cannot shrink below tol here: only the fuse, steps < max_steps, stops it)" \
                if case is cases[-1] else ""
            return {"error": f"on [{a:g}, {b:g}] with tol {float(tol):.3g} and max_steps {max_steps}, your loop did not "
                             f"stop within {timeout_s:g} s and was stopped{fuse}",
                    "hint": "relaunch only while hi - lo > tol AND steps < max_steps"}
        except RuntimeError as exc:
            return {"error": str(exc).splitlines()[0]}
        done.append({**case, "expected": expected, "yours": (float(lo[0]), float(hi[0]), int(steps[0])),
                     "runs": int(runs[0])})
        if _bisection_problem(done[-1]):
            break  # the first solve that went wrong says enough
    return {"cases": done}


def _bisection_problem(case: dict) -> CheckFailed | None:
    """What went wrong with one solve, from what the child reported; None if it matched the host-driven loop."""
    (lo, hi, steps), (y_lo, y_hi, y_steps), runs = case["expected"], case["yours"], case["runs"]
    a, b = case["interval"]
    where = f"on [{a:g}, {b:g}] with tol {case['tol']:.3g} and max_steps {case['max_steps']}"
    if runs == 1 and y_steps <= 1:
        return CheckFailed(f"{where} your kernel ran once (the host-driven loop takes {steps} steps)",
                           hint="tail-launch the kernel's own graph while the interval is too wide: "
                                "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch)")
    if runs < y_steps:
        return CheckFailed(f"{where} your kernel took {y_steps} steps in {runs} launch{'es' if runs > 1 else ''}: "
                           "each launch must take one step",
                           hint="no loop inside the kernel: take one bisect_step per launch, then tail-launch the "
                                "next launch with cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch)")
    if y_steps != steps:
        return CheckFailed(f"{where} your loop took {y_steps} steps, the host-driven loop {steps}",
                           hint="go on exactly while hi - lo > tol (the tol you are given) and steps < max_steps, "
                                "tested after the step, as the host loop does")
    if (y_lo, y_hi) != (lo, hi):
        return CheckFailed(f"{where} your interval [{y_lo}, {y_hi}] differs from the host loop's [{lo}, {hi}]",
                           hint="take each step with bisect_step(lo, hi), as the host-driven kernel does")
    if runs > steps + 1:
        return CheckFailed(f"{where} your kernel was launched {runs} times for {steps} steps",
                           hint="each launch takes one step; relaunch only while the loop must go on")
    return None


@exercise(3,
          "bisect_step(lo, hi); *steps += 1; if (*hi - *lo > tol && *steps < max_steps) "
          "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);")
def check_tail_loop(bisection_source: Callable[[], str]) -> str:
    """One host launch runs the whole bisection, one step per launch (counted by the checker's own kernel in your
    graph): the same steps and the same interval as the host-driven loop, on solves the checker draws."""
    source = _device_launch_source(bisection_source)
    cases = _bisection_cases(checking.rng().randrange(1 << 30))
    r = _in_child(f"_bisection_trial({source!r}, {cases!r}, {GPU_TIMEOUT_S!r})", _child_deadline(len(cases)))
    every_case_right(r["cases"], len(cases), _bisection_problem, "solves")
    counts = ", ".join(f"{c['expected'][2]}" for c in r["cases"])
    return (f"one host launch per solve, one step per launch; {counts} steps on {len(cases)} solves (the last "
            "stopped by the fuse), identical to the host-driven loop")


# ---- exercise 4: a WHILE node that stops at the right iteration ---------------------------------------------

def halving_kernel():
    """halve_all compiled by cuda.core (NVRTC needs the CUDA headers for cudaGraphSetConditional)."""
    from cuda.core import Device, Program, ProgramOptions

    device = Device()
    device.set_current()
    program = Program(HALVING_SOURCE, code_type="c++",
                      options=ProgramOptions(arch=f"sm_{device.arch}", include_path=[devicegraphs.CUDA_INCLUDE]))
    return program.compile("cubin").get_kernel("halve_all")


def halvings(x, threshold: float) -> tuple[int, object]:
    """The reference: how many halvings until no |x| exceeds threshold (at least one, at most MAX_COUNT)."""
    import numpy as np

    x, k = np.array(x, dtype=np.float32), 0
    while True:
        x *= np.float32(0.5)
        k += 1
        if not (np.abs(x).max() > np.float32(threshold) and k < MAX_COUNT):
            return k, x


def halving_inputs(rng, threshold: float, size: int) -> list:
    """Inputs whose right counts are 1 (a body run twice fails it), an odd count, an even one, and one the cap
    (MAX_COUNT) stops. The largest |x| is threshold * 2**(k - 1) * f with f just above 1 or just below 2, so the
    count is k and a threshold more than 1% off changes it."""
    import numpy as np

    targets = [(1, 1.99), (int(rng.integers(2, 8)) * 2 + 1, 1.01), (int(rng.integers(8, 20)) * 2, 1.99),
               (MAX_COUNT + int(rng.integers(4, 16)), 1.5)]
    inputs = []
    for k, f in targets:
        data = rng.standard_normal(size)
        data *= threshold * 2.0 ** (k - 1) * f / np.abs(data).max()
        inputs.append(data.astype(np.float32))
    return inputs


def draw_threshold(rng) -> float:
    """A threshold between 0.1 and 10, at least 25% away from 1 (so 1.0 typed in is always wrong), as float32."""
    import numpy as np

    return float(np.float32(10 ** (rng.choice([-1.0, 1.0]) * rng.uniform(0.1, 1.0))))


def _while_structure(builder) -> None:
    """Fail unless the graph is one WHILE node whose body is the one kernel node (read through the driver)."""
    kinds = graphs.topology(builder).kinds
    if kinds.count("CONDITIONAL") != 1:
        raise CheckFailed(f"the graph has {kinds.count('CONDITIONAL')} conditional nodes; expected one WHILE node",
                          hint="builder.while_loop(condition) adds the WHILE node; launch the kernel once on the "
                               "builder it returns")
    if "KERNEL" in kinds:
        raise CheckFailed("the kernel is outside the loop: launch it on the builder that while_loop() returned, "
                          "between its begin_building() and end_building()")
    found = devicegraphs.conditionals(builder)
    if not found:  # a driver whose dump hides conditional nodes: the launches below judge the body
        return
    (node,) = found
    if node.kind != "WHILE":
        raise CheckFailed(f"your conditional node is an {node.kind} node: it runs its body at most once",
                          hint="use builder.while_loop(condition), which repeats its body while the condition is set")
    if node.bodies[0] != (("KERNEL", "halve_all"),):
        raise CheckFailed(f"the WHILE body holds {node.body_summary()}; expected exactly one kernel node, halve_all",
                          hint="launch the kernel once in the body: the WHILE node repeats the body, so a body that "
                               "runs it twice overshoots by one halving whenever the count is odd")


@exercise(4,
          "condition = builder.create_condition(default_value=1); body = builder.while_loop(condition); "
          "body.begin_building(); launch(body, LaunchConfig(grid=1, block=256), kernel, ..., "
          "np.uint64(int(condition.handle))); body.end_building(); builder.end_building()")
def check_while_loop(build_halving_loop: Callable, threshold: float | None = None) -> str:
    """The graph is one WHILE node whose body is the kernel (read back through the driver); each launch stops after
    the reference number of halvings, on inputs that need 1, an odd number, an even number and more than the cap."""
    import cupy as cp
    import numpy as np

    require_cuda("conditional nodes")
    devicegraphs.require("conditional nodes")
    rng = checking.numpy_generator()
    threshold = draw_threshold(rng) if threshold is None else float(np.float32(threshold))
    stream = _new_stream()
    kernel = halving_kernel()
    x, count = cp.zeros(512, dtype=cp.float32), cp.zeros(1, dtype=cp.int32)
    cp.cuda.Device().synchronize()
    builder = build_halving_loop(stream, kernel, x, count, threshold)
    if not (hasattr(type(builder), "graph_definition") and hasattr(builder, "complete")):
        raise CheckFailed(f"return the GraphBuilder after end_building(), not {type(builder).__name__}",
                          hint="return the builder itself; the checker completes and launches it")
    if getattr(builder, "is_building", False):
        raise CheckFailed("the builder is still building: call end_building() on the loop body, then on the builder")
    _while_structure(builder)
    graph = builder.complete()
    found = []
    for data in halving_inputs(rng, threshold, x.size):
        expected, result = halvings(data, threshold)
        x.set(data)
        count.fill(0)
        cp.cuda.Device().synchronize()
        graph.launch(stream)
        try:
            devicegraphs.wait(stream, GPU_TIMEOUT_S, "your WHILE loop")
        except TimeoutError:
            raise CheckFailed(f"your loop did not stop within {GPU_TIMEOUT_S} s: is the kernel in its body, given the "
                              "condition's handle? The GPU is still running it: restart the Jupyter kernel") from None
        got = int(count[0])
        if got == 0:
            raise CheckFailed("the loop body never ran",
                              hint="create the condition with default_value=1: the WHILE node tests it before the "
                                   "first run, and the default is set again at every launch")
        if got != expected:
            raise CheckFailed(f"values up to {np.abs(data).max():.3g} with threshold {threshold:.3g}: your loop ran "
                              f"{got} times, the reference {expected} (halve until no |x| > threshold, at most "
                              f"{MAX_COUNT} times)")
        if not np.array_equal(x.get(), result):
            raise CheckFailed("the loop ran the right number of times but x differs from the reference")
        found.append(got)
    return (f"one WHILE node around the one kernel; {', '.join(map(str, found))} iterations for four inputs "
            f"(threshold {threshold:.3g}), each the reference count")
