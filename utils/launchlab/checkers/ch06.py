"""Checkers for lab 06, "Device-side graph launch and conditional nodes".

Exercise 1 launches your graph from the checker's own kernel; exercises 2 and 3 compile your CUDA source and
run it in a child process with a timeout (a loop on the GPU that never stops cannot be interrupted, and a bad
device launch can corrupt the CUDA context); exercise 4 reads your WHILE node back before launching it.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import child, devicegraphs, graphs
from ..checking import CheckFailed, exercise, require_cuda

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
CHILD_EXIT_S = 5  # after its RESULT line, how long a child may take to exit
GPU_TIMEOUT_S = 20


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

@exercise("Exercise 1: make a graph launchable from the device",
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
        raise CheckFailed(f"return the executable cuda.core Graph that complete() gives, not {type(graph).__name__}")
    devicegraphs.wait(stream, GPU_TIMEOUT_S)
    cp.cuda.Device().synchronize()
    if int(hits[0]):
        raise CheckFailed("the work already ran before any kernel launched it: build the graph, do not launch it")
    # checked before launching: a kernel handed a graph without the flag corrupts the CUDA context
    if not devicegraphs.device_launchable(graph):
        raise CheckFailed("the graph was not instantiated for device launch: pass "
                          "GraphCompleteOptions(device_launch=True, ...) to complete()")
    launcher = _capture(stream, lambda s: kernels.get_function("launch_child")(
        (1,), (1,), (np.uint64(int(graph.handle)), status), stream=s), device_launch=False)
    launcher.launch(stream)
    devicegraphs.wait(stream, GPU_TIMEOUT_S, "the checker's launcher")
    code = int(status[0])
    if code != 0:
        raise CheckFailed(f"the GPU refused to launch your graph ({devicegraphs.cuda_error_name(code)}): "
                          "was it uploaded? pass upload_stream=stream in GraphCompleteOptions")
    if int(hits[0]) != 1:
        raise CheckFailed(f"launched from the GPU, your graph ran the work {int(hits[0])} times; expected once")
    return "flagged for device launch, uploaded, and run exactly once by the checker's kernel (one host launch)"


# ---- exercise 2: the scheduler's dispatch by kind ------------------------------------------------------------

def _scheduler_trial(source: str, seed: int, items: int, kinds: int) -> dict:
    """Run `source`'s schedule kernel over a random queue; what each item got (in a child process)."""
    import cupy as cp
    import numpy as np

    stream = _new_stream()
    try:
        schedule = devicegraphs.compile_with_device_runtime(source).get_function("schedule")
        schedule.kernel  # noqa: B018 - loads the module, so a missing kernel fails here
    except Exception as exc:
        return {"error": f"your source did not compile, or has no `schedule` kernel: {str(exc).splitlines()[0][:300]}"}
    handle_kind = cp.RawKernel(HANDLER_SOURCE, "handle_kind")
    queue = cp.asarray(np.random.default_rng(seed).integers(0, kinds, items, dtype=np.int32))
    next_item, current = cp.zeros(1, dtype=cp.int32), cp.zeros(1, dtype=cp.int32)
    done_by, hits = cp.full(items, -1, dtype=cp.int32), cp.zeros(items, dtype=cp.int32)
    cp.cuda.Device().synchronize()
    handlers = [_capture(stream, lambda s, k=k: handle_kind((1,), (1,), (np.int32(k), current, done_by, hits),
                                                          stream=s), device_launch=True) for k in range(kinds)]
    table = cp.asarray(np.array([int(h.handle) for h in handlers], dtype=np.uint64))
    scheduler = _capture(stream, lambda s: schedule((1,), (1,), (queue, np.int32(items), next_item, current, table),
                                                    stream=s), device_launch=True)
    scheduler.launch(stream)
    try:
        seconds = devicegraphs.wait(stream, GPU_TIMEOUT_S, "your scheduler")
    except (TimeoutError, RuntimeError) as exc:
        return {"error": str(exc).splitlines()[0]}
    q, by, n = queue.get(), done_by.get(), hits.get()
    wrong = [int(i) for i in np.flatnonzero((n > 0) & (by != q))[:3]]
    return {"items": items, "kinds": kinds, "wrong": wrong, "wrong_kinds": [(int(q[i]), int(by[i])) for i in wrong],
            "never": int((n == 0).sum()), "first_never": int(np.argmax(n == 0)) if (n == 0).any() else -1,
            "repeated": int((n > 1).sum()), "seconds": seconds}


def _in_child(call: str) -> dict:
    """Run `call` (an expression on this module, returning a dict) in a child process; its dict back."""
    script = (f"from launchlab.checkers import ch06\nfrom launchlab.child import result\n"
              f"result(**ch06.{call})")
    # A scheduler that never ends keeps its process alive after it reported: stop it once its RESULT is in.
    run = child.run_python(script, timeout_s=CHILD_TIMEOUT_S, exit_after_result_s=CHILD_EXIT_S)
    found = run.results()
    if found:
        if "error" in found[-1]:
            raise CheckFailed(found[-1]["error"])
        return found[-1]
    if run.timed_out:
        raise CheckFailed(f"your code did not finish within {CHILD_TIMEOUT_S} s and was stopped: a loop on the GPU "
                          "that never reaches its stop condition?")
    raise CheckFailed(f"the child process running your code failed: {run.last_lines(2)}")


@exercise("Exercise 2: dispatch each queue item to its kind's graph",
          "i = *next; if (i >= n_items) return; *current = i; *next = i + 1; __threadfence(); "
          "cudaGraphLaunch(handlers[kinds[i]], cudaStreamGraphFireAndForget); and, while items remain, "
          "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch)")
def check_scheduler(scheduler_source: Callable[[], str], seed: int = 2606, items: int = 300, kinds: int = 4) -> str:
    """Every item of a queue the checker draws is handled once, by its kind's graph, after one host launch."""
    require_cuda("device graph launch")
    devicegraphs.require("device graph launch")
    source = scheduler_source()
    if not isinstance(source, str):
        raise CheckFailed(f"return the CUDA source as a string, not {type(source).__name__}")
    r = _in_child(f"_scheduler_trial({source!r}, {seed}, {items}, {kinds})")
    if r["never"]:
        raise CheckFailed(f"{r['never']} of {items} items were never handled (the first: item {r['first_never']}): "
                          "does the scheduler tail-launch itself until the queue is empty?")
    if r["wrong"]:
        pairs = ", ".join(f"item {i} of kind {k} went to graph {g}" for i, (k, g) in zip(r["wrong"], r["wrong_kinds"], strict=True))
        raise CheckFailed(f"items handled by the wrong graph: {pairs}: launch handlers[kinds[i]]")
    if r["repeated"]:
        raise CheckFailed(f"{r['repeated']} items were handled more than once: advance *next before relaunching")
    return (f"all {items} items of a {kinds}-kind queue handled once, each by its kind's graph, after one host launch "
            f"({r['seconds'] * 1e3:.1f} ms)")


# ---- exercise 3: a host-driven loop turned into a tail-launch loop -----------------------------------------

def _bisection_trial(source: str, intervals: list, tol: float, max_steps: int) -> dict:
    """The host-driven loop and your self-relaunching kernel on the same intervals (in a child process)."""
    import cupy as cp
    import numpy as np

    stream = _new_stream()
    try:
        module = devicegraphs.compile_with_device_runtime(BISECTION_PRELUDE + source)
        yours, host_step = module.get_function("bisect_on_gpu"), module.get_function("bisect_host_driven")
        yours.kernel  # noqa: B018 - loads the module, so a missing kernel fails here
    except Exception as exc:
        return {"error": f"your source did not compile, or has no `bisect_on_gpu` kernel: {str(exc).splitlines()[0][:300]}"}
    lo, hi, steps = cp.zeros(1, dtype=cp.float32), cp.zeros(1, dtype=cp.float32), cp.zeros(1, dtype=cp.int32)
    graph = _capture(stream, lambda s: yours((1,), (1,), (lo, hi, np.float32(tol), steps, np.int32(max_steps)),
                                             stream=s), device_launch=True)
    cases = []
    for a, b in intervals:
        lo[0], hi[0], steps[0] = a, b, 0
        while True:  # the reference: the host decides after every step
            host_step((1,), (1,), (lo, hi, steps))
            width = np.float32(hi.get()[0]) - np.float32(lo.get()[0])
            if not (width > np.float32(tol) and int(steps[0]) < max_steps):
                break
        expected = (float(lo[0]), float(hi[0]), int(steps[0]))
        lo[0], hi[0], steps[0] = a, b, 0
        cp.cuda.Device().synchronize()
        graph.launch(stream)  # the only host launch
        try:
            devicegraphs.wait(stream, GPU_TIMEOUT_S, "your loop")
        except (TimeoutError, RuntimeError) as exc:
            return {"error": str(exc).splitlines()[0]}
        cases.append({"interval": [a, b], "expected": expected, "yours": (float(lo[0]), float(hi[0]), int(steps[0]))})
    return {"cases": cases}


@exercise("Exercise 3: turn the host-driven loop into a tail-launch loop",
          "bisect_step(lo, hi); *steps += 1; if (*hi - *lo > tol && *steps < max_steps) "
          "cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);")
def check_tail_loop(bisection_source: Callable[[], str], tol: float = 1e-5, max_steps: int = 64) -> str:
    """One host launch runs the whole bisection: the same steps and the same interval as the host-driven loop."""
    require_cuda("device graph launch")
    devicegraphs.require("device graph launch")
    source = bisection_source()
    if not isinstance(source, str):
        raise CheckFailed(f"return the CUDA source as a string, not {type(source).__name__}")
    intervals = [(1.0, 3.0), (2.0, 2.25), (-10.0, 10.0)]
    r = _in_child(f"_bisection_trial({source!r}, {intervals!r}, {tol!r}, {max_steps})")
    for case in r["cases"]:
        (lo, hi, steps), (y_lo, y_hi, y_steps) = case["expected"], case["yours"]
        where = f"on [{case['interval'][0]:g}, {case['interval'][1]:g}]"
        if y_steps == 1:
            raise CheckFailed(f"{where} your kernel ran once: it must tail-launch itself "
                              "(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch) while the interval is too wide")
        if y_steps != steps:
            raise CheckFailed(f"{where} your loop took {y_steps} steps, the host-driven loop {steps}: stop exactly "
                              f"when hi - lo <= tol or steps reaches max_steps")
        if (y_lo, y_hi) != (lo, hi):
            raise CheckFailed(f"{where} your interval [{y_lo}, {y_hi}] differs from the host loop's [{lo}, {hi}]")
    counts = ", ".join(str(c["expected"][2]) for c in r["cases"])
    return f"one host launch per solve; {counts} steps on three intervals, identical to the host-driven loop"


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


@exercise("Exercise 4: a WHILE node that stops at the right iteration",
          "condition = builder.create_condition(default_value=1); body = builder.while_loop(condition); "
          "body.begin_building(); launch(body, LaunchConfig(grid=1, block=256), kernel, ..., "
          "np.uint64(int(condition.handle))); body.end_building(); builder.end_building()")
def check_while_loop(build_halving_loop: Callable, threshold: float = 1.0) -> str:
    """The graph holds a WHILE node around the kernel; each launch stops after the reference number of halvings."""
    import cupy as cp
    import numpy as np

    require_cuda("conditional nodes")
    devicegraphs.require("conditional nodes")
    stream = _new_stream()
    kernel = halving_kernel()
    x, count = cp.zeros(512, dtype=cp.float32), cp.zeros(1, dtype=cp.int32)
    cp.cuda.Device().synchronize()
    builder = build_halving_loop(stream, kernel, x, count, threshold)
    if not hasattr(builder, "graph_definition"):
        raise CheckFailed(f"return the GraphBuilder after end_building(), not {type(builder).__name__}")
    # read through the driver: the top level must be one conditional node, with the kernel inside it
    kinds = graphs.topology(builder).kinds
    if kinds.count("CONDITIONAL") != 1:
        raise CheckFailed(f"the graph has {kinds.count('CONDITIONAL')} conditional nodes; expected one WHILE node "
                          "(builder.while_loop(condition))")
    if "KERNEL" in kinds:
        raise CheckFailed("the kernel is outside the loop: launch it on the builder that while_loop() returned, "
                          "between its begin_building() and end_building()")
    graph = builder.complete()
    rng = np.random.default_rng(606)
    found = []
    for scale in (3.0, 1e3, 1e9):  # a few, about ten and about thirty halvings: no fixed count matches all three
        data = (rng.standard_normal(x.size) * scale).astype(np.float32)
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
            raise CheckFailed("the loop body never ran: create the condition with default_value=1 so the loop is entered")
        if got != expected:
            raise CheckFailed(f"values up to {np.abs(data).max():.3g}: your loop ran {got} times, the reference "
                              f"{expected} (halve until no |x| > {threshold})")
        if not np.array_equal(x.get(), result):
            raise CheckFailed("the loop ran the right number of times but x differs from the reference")
        found.append(got)
    return f"one WHILE node; {', '.join(map(str, found))} iterations for three inputs, each the reference count"
