"""Checkers for lab 01, "launch cost with CuPy RawKernels".

Each checker measures its own reference in the same call, on the same GPU, and compares yours with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .. import timing
from ..checking import CheckFailed, exercise, number, within, within_factor

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_crossover", "check_first_launch", "check_fused_conv", "check_launch_figures"]

EMPTY_SOURCE = 'extern "C" __global__ void empty() { }'
AXPY_SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
CONV5_SOURCE = r"""
extern "C" __global__ void conv5(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float w[5] = {0.0625f, 0.25f, 0.375f, 0.25f, 0.0625f};
    float acc = 0.0f;
    for (int k = -2; k <= 2; ++k) acc += w[k + 2] * x[(i + k + n) % n];
    y[i] = acc;
}
"""
FIGURE_TOLERANCE = 0.35  # two back-to-back measurements of one launch figure differ by up to ~20%
# Steps of 2. Near the crossover, sizes that fit in the L2 cache run faster and vary from run to run, so two
# sweeps a few seconds apart can disagree by two steps: a factor of 4 either way is allowed.
SWEEP_SIZES = [2**k for k in range(4, 27)]


@exercise("Exercise 1: measure the three launch figures",
          "enqueue cost is N launches with no synchronisation / N; throughput adds one final synchronisation; "
          "latency is one launch then a synchronisation. launchlab.timing has one function for each.")
def check_launch_figures(measure_launch_figures: Callable[[Callable[[], object]], dict]) -> str:
    import cupy as cp

    kernel = cp.RawKernel(EMPTY_SOURCE, "empty")

    def launch():
        kernel((1,), (1,), ())

    launch()

    def reference_figures() -> dict[str, float]:
        return {
            "enqueue_us": timing.enqueue_us(launch).median_us,
            "throughput_us": timing.launch_throughput_us(launch).median_us,
            "sync_latency_us": timing.sync_latency_us(launch, repeats=300).median_us,
        }

    # Measured before and after yours: the host's speed drifts by tens of percent over seconds, so yours is
    # compared with whichever of the two is closer.
    before = reference_figures()
    yours = measure_launch_figures(launch)
    after = reference_figures()
    if not isinstance(yours, dict):
        raise CheckFailed(f"measure_launch_figures returned {type(yours).__name__}; return a dict")
    missing = set(before) - set(yours)
    if missing:
        raise CheckFailed(f"your dict lacks {sorted(missing)}; it needs {sorted(before)}")
    lines = []
    for key in before:
        value = number(yours[key], key)
        closer = min((before[key], after[key]), key=lambda ref: abs(value - ref) / ref)
        lines.append(within(value, closer, FIGURE_TOLERANCE, key))
    return "; ".join(lines)


def axpy_runner(n: int) -> Callable[[], None]:
    """A zero-argument launcher of axpy over n float32 elements (its buffers live as long as it does)."""
    import cupy as cp

    kernel = cp.RawKernel(AXPY_SOURCE, "axpy")
    x = cp.random.random(n, dtype=cp.float32)
    y = cp.random.random(n, dtype=cp.float32)
    blocks = (n + 255) // 256

    def run():
        kernel((blocks,), (256,), (cp.float32(1.0001), x, y, cp.int64(n)))

    return run


def _reference_crossover(make_run: Callable[[int], Callable[[], None]]) -> int:
    """The first swept size from which every larger size takes over twice the small-size floor per launch."""
    import numpy as np

    per_launch = []
    for n in SWEEP_SIZES:
        run = make_run(n)
        per_launch.append(timing.launch_throughput_us(run, launches=max(4, min(100, int(2e7 / n))),
                                                      rounds=5).median_us)
    floor = float(np.median(per_launch[:3]))
    above = [us > 2 * floor for us in per_launch]
    return next(n for i, n in enumerate(SWEEP_SIZES) if all(above[i:]))


@exercise("Exercise 2: find the crossover size",
          "sweep sizes over several orders of magnitude, time each by launch throughput, take the flat floor "
          "of the smallest sizes, and return the first size from which every larger size stays above twice "
          "that floor.")
def check_crossover(find_crossover: Callable[[Callable[[int], Callable[[], None]]], int]) -> str:
    yours = number(find_crossover(axpy_runner), "your crossover")
    expected = _reference_crossover(axpy_runner)
    return within_factor(yours, expected, 4, "crossover (elements)")


@exercise("Exercise 3: take the compiler off the first launch",
          "compile (and load) the kernel inside prepare, before the launch that matters: RawKernel.compile(), "
          "a warm-up call, or a cubin compiled ahead and loaded with RawModule.")
def check_first_launch(prepare: Callable[[str, str], Callable[[tuple], None]]) -> str:
    import cupy as cp

    # A kernel no process has compiled yet, so only your preparation can keep NVRTC off the first launch.
    source = f'extern "C" __global__ void mark(int* flag) {{ flag[0] = 42; }}\n// {time.time_ns()}\n'
    flag = cp.zeros(1, dtype=cp.int32)
    launcher = prepare(source, "mark")
    if not callable(launcher):
        raise CheckFailed(f"prepare returned {launcher!r}; return a function that launches the kernel")
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    launcher((flag,))
    cp.cuda.Device().synchronize()
    first_ms = (time.perf_counter() - start) * 1e3
    if int(flag.get()[0]) != 42:
        raise CheckFailed("the kernel did not run: flag[0] is not 42 after your launcher was called")
    line = f"first launch after prepare: {first_ms:.3f} ms (under 1 ms required)"
    if first_ms >= 1.0:
        raise CheckFailed(line)
    return line


@exercise("Exercise 4: fuse the conv1d chain",
          "four binomial 5-tap filters in a row equal one 17-tap filter with weights C(16, k) / 65536; "
          "apply it in one kernel with the same periodic boundary.")
def check_fused_conv(fused_conv_source: Callable[[], str]) -> str:
    import cupy as cp

    source = fused_conv_source()
    if not isinstance(source, str) or "conv_chain_fused" not in source:
        raise CheckFailed("fused_conv_source() must return CUDA source defining conv_chain_fused(x, y, n)")
    try:
        fused = cp.RawKernel(source, "conv_chain_fused")
        fused.compile()
    except Exception as exc:
        raise CheckFailed(f"your kernel does not compile: {str(exc).strip()[:600]}") from None
    conv5 = cp.RawKernel(CONV5_SOURCE, "conv5")
    timings = {}
    for n in (4096, 1 << 20):
        x = cp.random.random(n, dtype=cp.float32)
        a, b, out = x.copy(), cp.empty_like(x), cp.full_like(x, cp.nan)
        grid, n32 = ((n + 255) // 256,), cp.int32(n)

        def chain(a=a, b=b, grid=grid, n32=n32):
            for src, dst in ((a, b), (b, a), (a, b), (b, a)):
                conv5(grid, (256,), (src, dst, n32))

        chain()
        fused(grid, (256,), (x, out, n32))
        cp.cuda.Device().synchronize()
        if not bool(cp.allclose(a, out, rtol=1e-5, atol=1e-6)):
            worst = float(cp.abs(a - out).max())
            raise CheckFailed(f"at n={n:,} your output differs from the four-kernel chain (max error {worst:.3g})")
        if n == 4096:
            timings["chain"] = timing.launch_throughput_us(chain, launches=20, rounds=10).median_us
            timings["fused"] = timing.launch_throughput_us(
                lambda x=x, out=out, grid=grid, n32=n32: fused(grid, (256,), (x, out, n32)), launches=20, rounds=10
            ).median_us
    line = (f"same output as the chain at 4,096 and 1,048,576 elements; at 4,096: fused {timings['fused']:.2f} us "
            f"against the chain's {timings['chain']:.2f} us")
    if timings["fused"] >= timings["chain"]:
        raise CheckFailed(line + " (the fused kernel must be faster)")
    return line
