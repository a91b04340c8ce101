"""Checkers for lab 00, "fix the broken benchmark".

Each one hands your timer a function that runs a spin kernel, then compares what your timer says with how
long the kernel took by the GPU's own nanosecond timer, measured in the same call. 10% is allowed.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

from ..checking import exercise, number, within
from ..kernels import SPIN_SOURCE, spinner

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_event_stream", "check_library_field", "check_median", "check_wait_for_gpu", "check_warm_up"]

TOLERANCE = 0.10
# Long enough that the launch's trip to an idle GPU (tens, at times a few hundred, microseconds) stays a small
# fraction of it, so a correct timer passes with room to spare.
KERNEL_US = 5000
_fresh = itertools.count()


def _returned_ms(value: object, what: str) -> float:
    """Your function's return value as a float of milliseconds, or a clear failure."""
    return number(value, f"what {what} returned", "milliseconds")


@exercise("Exercise 1: wait for the GPU",
          "a launch returns as soon as the kernel is queued: synchronise the device before you read the clock.")
def check_wait_for_gpu(time_once_ms: Callable[[Callable[[], object]], float]) -> str:
    spin = spinner()
    ratios = []
    for _ in range(3):
        mine = _returned_ms(time_once_ms(lambda: spin.launch(KERNEL_US)), "time_once_ms")
        ratios.append(mine / (spin.truth_us() / 1000))
    return within(statistics.median(ratios), 1.0, TOLERANCE, "measured / true duration of a 5 ms kernel")


@exercise("Exercise 2: warm up first",
          "the first call of a fresh kernel compiles and loads it; run the function once, synchronised, "
          "before you start timing.")
def check_warm_up(steady_time_ms: Callable[[Callable[[], object]], float]) -> str:
    import cupy as cp

    spin = spinner()
    # A kernel no process has compiled yet: its first call pays NVRTC compilation and module load.
    source = SPIN_SOURCE + f"\n// fresh kernel {time.time_ns()}-{next(_fresh)}\n"
    kernel = cp.RawKernel(source, "spin_cycles")
    cycles = cp.int64(int(KERNEL_US * 1000 * spin.cycles_per_ns))

    def first_call_compiles():
        kernel((1,), (1,), (cycles, spin.elapsed_ns))

    mine = _returned_ms(steady_time_ms(first_call_compiles), "steady_time_ms")
    return within(mine, spin.truth_us() / 1000, TOLERANCE, "steady-state time of a 5 ms kernel, in ms")


@exercise("Exercise 3: record events on the stream that does the work",
          "an event measures the stream it is recorded on; record both events on the stream you were given.")
def check_event_stream(event_time_ms: Callable[[Callable[[], object], object], float]) -> str:
    import cupy as cp

    spin = spinner()
    stream = cp.cuda.Stream(non_blocking=True)  # a stream that does not wait for the default stream
    mine = _returned_ms(event_time_ms(lambda: spin.launch(KERNEL_US, stream=stream), stream), "event_time_ms")
    stream.synchronize()
    return within(mine, spin.truth_us() / 1000, TOLERANCE, "event time of a 5 ms kernel on a side stream, in ms")


@exercise("Exercise 4: report the median",
          "one slow sample (the OS, the garbage collector, another process) drags the mean; the median "
          "of many samples ignores a few outliers.")
def check_median(robust_time_ms: Callable[[Callable[[], object]], float]) -> str:
    spin = spinner()
    calls = itertools.count()

    def sometimes_delayed():
        if next(calls) % 5 == 4:
            time.sleep(0.02)  # a real 20 ms stall on the host, as a busy machine causes now and then
        spin.launch(KERNEL_US)

    mine = _returned_ms(robust_time_ms(sometimes_delayed), "robust_time_ms")
    return within(mine, spin.truth_us() / 1000, TOLERANCE, "typical time of a 5 ms kernel with host stalls, in ms")


@exercise("Exercise 5: read the right field of a library timer",
          "cupyx.profiler.benchmark reports cpu_times (the host's time in the call, without waiting) and "
          "gpu_times (CUDA events on the stream); a GPU kernel's duration is in gpu_times.")
def check_library_field(library_gpu_time_ms: Callable[[Callable[[], object]], float]) -> str:
    spin = spinner()
    mine = _returned_ms(library_gpu_time_ms(lambda: spin.launch(KERNEL_US)), "library_gpu_time_ms")
    return within(mine, spin.truth_us() / 1000, TOLERANCE, "library-timed 5 ms kernel, in ms")
