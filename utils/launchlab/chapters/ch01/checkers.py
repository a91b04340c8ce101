"""Checkers for lab 01, "launch cost with CuPy RawKernels".

Exercises 1 and 2 hand your function kernels that spin for a time the checker plants (drawn afresh each call),
so the answer is known by construction; exercise 1 also compares your empty-kernel figures with the checker's
own, measured in the same call. Exercises 3 and 4 check what your code builds: the kernel it launches, the
output it writes.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable

from ... import checking, timing
from ...checking import TIME_SLIPS_US, CheckFailed, FigureOff, exercise, number, slip_hint, within

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = ["check_crossover", "check_first_launch", "check_fused_conv", "check_launch_figures"]

EMPTY_SOURCE = 'extern "C" __global__ void empty() { }'
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
ROUNDS = 3  # rounds of your figures against the reference before a figure off in every one fails
FIGURES = ["enqueue_us", "throughput_us", "sync_latency_us"]
# Exercise 1's second scenario: kernels that spin for a time the checker plants, far above a launch's cost, so
# throughput must equal that time (a missing final synchronisation measures the enqueue cost instead), the
# enqueue cost must stay far below it and the latency above it. Two of them a call, drawn afresh.
SPIN_LAUNCHES_US = ((35.0, 45.0), (70.0, 90.0))
SPIN_TOLERANCE = 0.15


def _figures(yours: object, keys: list[str], scenario: str) -> dict[str, float]:
    """Your dict's three figures as floats, or a failure that says what is wrong with it."""
    if not isinstance(yours, dict):
        raise CheckFailed(f"measure_launch_figures returned {type(yours).__name__} for {scenario}; return a dict")
    missing = set(keys) - set(yours)
    if missing:
        raise CheckFailed(f"your dict lacks {sorted(missing)}; it needs {sorted(keys)}")
    return {key: number(yours[key], f"{key} ({scenario})", "microseconds") for key in keys}


def _spin_scenario(measure_launch_figures: Callable, keys: list[str], low: float, high: float) -> str:
    """Your figures for a launcher whose kernel spins a planted time: throughput = that time, enqueue far below
    it, latency at least it."""
    import cupy as cp

    from ...kernels import spinner

    spin = spinner()
    planted_us = checking.rng().uniform(low, high)
    cycles = int(planted_us * 1000 * spin.cycles_per_ns)
    spin.elapsed_ns.data.memset(0, spin.elapsed_ns.nbytes)  # a function that never launches leaves it at zero
    cp.cuda.Device().synchronize()
    yours = _figures(measure_launch_figures(lambda: spin.launch_cycles(cycles)), keys,
                     f"a kernel that spins about {planted_us:.0f} us")
    kernel_us = spin.truth_us()
    if kernel_us <= 0:
        raise CheckFailed(f"measure_launch_figures returned figures for a kernel of about {planted_us:.0f} us "
                          "without launching it", "call launch() to measure: the figures must be measured, not "
                          "typed in")
    scenario = f"a kernel that spins {kernel_us:.1f} us"
    throughput, enqueue, latency = yours["throughput_us"], yours["enqueue_us"], yours["sync_latency_us"]
    ratio = throughput / kernel_us
    if not abs(ratio - 1) <= SPIN_TOLERANCE:
        if ratio < 0.5 and not slip_hint(ratio, TIME_SLIPS_US):
            hint = ("throughput came out below the kernel's own duration: the clock stopped before the GPU finished "
                    "the launches; synchronise once after the last launch, inside the timed region")
        else:
            hint = slip_hint(ratio, TIME_SLIPS_US)
        raise CheckFailed(f"{scenario}: your throughput_us {throughput:.3g}, expected the kernel's duration "
                          f"({ratio - 1:+.0%}, {SPIN_TOLERANCE:.0%} allowed)", hint)
    if not enqueue < 0.7 * kernel_us:
        raise CheckFailed(f"{scenario}: your enqueue_us {enqueue:.3g} is not far below the kernel's duration",
                          "enqueue cost is the host's time to queue a launch: time the launches without any "
                          "synchronisation, so the GPU's work is left out")
    if not latency >= 0.95 * kernel_us:
        raise CheckFailed(f"{scenario}: your sync_latency_us {latency:.3g} is below the kernel's own duration",
                          "latency is one launch then a synchronisation: the clock must stop after the kernel "
                          "finished")
    return (f"{scenario}: throughput {throughput:.1f} us, enqueue {enqueue:.2f} us (far below), "
            f"latency {latency:.1f} us (above)")


@exercise(1,
          "enqueue cost is N launches with no synchronisation / N; throughput adds one final synchronisation; "
          "latency is one launch then a synchronisation. launchlab.timing has one function for each.")
def check_launch_figures(measure_launch_figures: Callable[[Callable[[], object]], dict]) -> str:
    import cupy as cp

    kernel = cp.RawKernel(EMPTY_SOURCE, "empty")

    def launch():
        kernel((1,), (1,), ())

    launch()

    def reference_figures() -> dict[str, float]:
        figures = (timing.enqueue_us(launch).median_us, timing.launch_throughput_us(launch).median_us,
                   timing.sync_latency_us(launch, repeats=300).median_us)
        return dict(zip(FIGURES, figures, strict=True))

    def one_round() -> list[str]:
        """Your figures against the reference measured before and after them: the host's speed drifts by tens of
        percent over seconds, so yours is compared with whichever of the two is closer."""
        before = reference_figures()
        yours = _figures(measure_launch_figures(launch), list(before), "the empty kernel")
        after = reference_figures()
        closer = {key: min((before[key], after[key]), key=lambda ref, key=key: abs(yours[key] - ref) / ref)
                  for key in before}
        # A unit slip scales all three figures alike; the host's noise leaves each ratio within ~1.6x of the factor.
        slip = next((hint for factor, hint in TIME_SLIPS_US.items()
                     if all(factor / 1.6 <= yours[key] / closer[key] <= factor * 1.6 for key in before)), None)
        lines = []
        for key in before:
            try:
                lines.append(within(yours[key], closer[key], FIGURE_TOLERANCE, f"{key} (empty kernel)"))
            except CheckFailed as exc:
                raise FigureOff(str(exc), slip) from None
        return lines

    # A host hiccup can slow one round's figures by 1.7x; a wrong method is off in every round, so a figure off
    # in one round is measured again, up to ROUNDS rounds, and fails only if it is off in all of them.
    lines = checking.measured_again(one_round, ROUNDS)
    for low, high in SPIN_LAUNCHES_US:
        lines.append(_spin_scenario(measure_launch_figures, FIGURES, low, high))
    return "; ".join(lines)


# ---- exercise 2: the crossover, planted ------------------------------------------------------------------

# The launchers the checker hands your find_crossover spin for a time it planted: flat at PLANTED_FLOOR_US up to
# a third of the crossover, then growing linearly with n (1.5x the floor one step below the crossover, 3x at
# it), capped at PLANTED_CAP x the floor so the largest sizes stay quick. One smaller size is slow too (3x the
# floor, as a size near the L2 cache's capacity can be): a single sample above twice the floor is not the
# crossover. Two of the three smallest sizes of the lab's sweep are off the floor, one slow and one fast (the
# smallest always, with the second in one sweep and the third in the other), so only their median is the floor:
# the first size, the fastest, the slowest, the mean or the unsorted middle of them is not. The crossover is
# drawn afresh, twice a call: one at an even and one at an odd power of two.
PLANTED_FLOOR_US = 40.0  # well above a launch's cost, so launch throughput measures the planted time
PLANTED_CAP = 40
PLANTED_CROSSOVERS = tuple(2**k for k in range(15, 24))  # 32,768 to 8,388,608 elements
SMALLEST = (16, 32, 64)  # the lab's sweep starts at 16: its floor is the median of these three sizes
FLOOR_SLOW, FLOOR_FAST = 3.0, 0.6  # the two of them off the floor, as multiples of it
LAB_SIZES = tuple(2**k for k in range(4, 27))  # the sweep the lab asks for, which the hints replay


def planted_us(n: int, crossover: int, slow_size: int, floor_us: float = PLANTED_FLOOR_US,
               off_floor: dict | None = None) -> float:
    """The planted time per launch at size n: floor_us * clip(3 n / crossover, 1, PLANTED_CAP), 3 * floor_us at
    slow_size, and floor_us * off_floor[n] at the small sizes off the floor."""
    if off_floor and n in off_floor:
        return floor_us * off_floor[n]
    return floor_us * (3.0 if n == slow_size else min(max(1.0, 3.0 * n / crossover), PLANTED_CAP))


def off_floor_sizes(rng, other: int) -> dict[int, float]:
    """The smallest size and SMALLEST[other] off the floor, one of them slow and the other fast (drawn which)."""
    slow_first = rng.random() < 0.5
    return {SMALLEST[0]: FLOOR_SLOW if slow_first else FLOOR_FAST,
            SMALLEST[other]: FLOOR_FAST if slow_first else FLOOR_SLOW}


def planted_runs(crossover: int, slow_size: int, floor_us: float = PLANTED_FLOOR_US, off_floor: dict | None = None):
    """A make_run whose launchers spin for planted_us(n, ...) each launch."""
    from ...kernels import spinner

    spin = spinner()

    def make_run(n: int) -> Callable[[], None]:
        cycles = int(planted_us(n, crossover, slow_size, floor_us, off_floor) * 1000 * spin.cycles_per_ns)
        return lambda: spin.launch_cycles(cycles)

    return make_run


def crossover_by(per_launch: list, floor: Callable = lambda smallest: sorted(smallest)[1], factor: float = 2.0,
                 sizes: tuple = LAB_SIZES) -> int:
    """The first size from which every larger one takes more than factor x the floor, the floor being
    floor(the three smallest sizes' times): the defaults give the right answer, the others the slips."""
    limit = factor * floor(per_launch[:3])
    return next((n for i, n in enumerate(sizes) if all(us > limit for us in per_launch[i:])), sizes[-1])


FLOOR_SLIPS = {"the first size": lambda s: s[0], "the fastest": min, "the slowest": max,
               "the mean": lambda s: sum(s) / len(s), "the unsorted middle": lambda s: s[1], "the third": lambda s: s[2]}
FLOOR_HINT = ("take the floor as the median of the three smallest sizes' times: here one of them is slow and one "
              "fast, so the first, the fastest, the slowest, the mean or the unsorted middle of them is not the floor")


def _size(value: object) -> int:
    """Your crossover as an int, or a failure saying what is wrong with it."""
    if value is None:
        raise CheckFailed("find_crossover returned None: did it forget to `return` the size?")
    is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not is_int and not (isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer()):
        raise CheckFailed(f"find_crossover returned {value!r} ({type(value).__name__}); return a size in elements, "
                          "one of the sizes you swept")
    if value < 1:
        raise CheckFailed(f"find_crossover returned {value!r}; a size is a positive number of elements")
    return int(value)


@exercise(2,
          "sweep sizes over several orders of magnitude, time each by launch throughput, take the floor as the "
          "median of the three smallest sizes' times, and return the first size from which every larger size "
          "stays above twice that floor.")
def check_crossover(find_crossover: Callable[[Callable[[int], Callable[[], None]]], int]) -> str:
    """Your sweep finds the crossover the checker planted in launchers of known GPU time, twice."""
    rng = checking.rng()
    exponent = {x: x.bit_length() - 1 for x in PLANTED_CROSSOVERS}
    crossovers = [rng.choice([x for x in PLANTED_CROSSOVERS if exponent[x] % 2 == parity]) for parity in (0, 1)]
    rng.shuffle(crossovers)
    lines = []
    for other, crossover in zip((1, 2), crossovers, strict=True):
        # above 256, so no three sizes in a row hold two slow ones, wherever a sweep starts
        slow = rng.choice([2**k for k in range(9, crossover.bit_length() - 3)])
        off_floor = off_floor_sizes(rng, other)
        yours = _size(find_crossover(planted_runs(crossover, slow, off_floor=off_floor)))
        apart = ", ".join(f"{n} ({f:g}x)" for n, f in off_floor.items())
        where = (f"the checker planted {PLANTED_FLOOR_US:.0f} us per launch up to {crossover // 4:,} elements "
                 f"(but at {apart} of the smallest sizes, and at {slow:,}, one slow size), "
                 f"{1.5 * PLANTED_FLOOR_US:.0f} us at {crossover // 2:,}, {3 * PLANTED_FLOOR_US:.0f} us at "
                 f"{crossover:,}, growing with n past it")
        if yours != crossover:
            lab_sweep = [planted_us(n, crossover, slow, off_floor=off_floor) for n in LAB_SIZES]
            floor_slip = any(crossover_by(lab_sweep, floor) == yours for floor in FLOOR_SLIPS.values())
            hints = {
                crossover // 2: "one step too early: the size below the crossover is still under twice the floor",
                2 * crossover: "one step too far: return the first size above twice the floor, not the one after",
                4 * crossover: "4x the crossover: bytes rather than elements? Return the size in float32 elements",
                12 * crossover: "12x the crossover: bytes moved rather than elements? Return the size in elements",
                slow: "that is the one slow size below the crossover: every larger size must stay above twice "
                      "the floor too, not just this one",
                **{n: "that is a slow size among the smallest: every larger size must stay above twice the floor "
                      "too, not just this one" for n, f in off_floor.items() if f > 1},
            }
            hint = hints.get(yours)
            if floor_slip:
                hint = FLOOR_HINT + (f" (or {hint[0].lower()}{hint[1:]})" if hint else "")
            raise CheckFailed(f"yours {yours:,}, expected {crossover:,}: {where}", hint)
        lines.append(f"found {crossover:,}: {where}")
    return "; ".join(lines)


@exercise(3,
          "compile (and load) the kernel inside prepare, before the launch that matters: RawKernel.compile(), "
          "a warm-up call, or a cubin compiled ahead and loaded with RawModule.")
def check_first_launch(prepare: Callable[[str, str], Callable[[tuple], None]]) -> str:
    import cupy as cp

    # A kernel no process has compiled yet, so only your preparation can keep NVRTC off the first launch; the
    # value it writes is drawn afresh too, so only the kernel it was handed can write it.
    mark = checking.rng().randrange(1_000, 1_000_000)
    source = (f'extern "C" __global__ void mark(int* flag, int value) {{ flag[0] = value + {mark}; }}\n'
              f"// {time.time_ns()}\n")
    flag = cp.zeros(1, dtype=cp.int32)
    value = checking.rng().randrange(1, 1_000)
    launcher = prepare(source, "mark")
    if not callable(launcher):
        raise CheckFailed(f"prepare returned {launcher!r}; return a function that launches the kernel",
                          "prepare(source, name) returns a function launcher(args) that launches the kernel")
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    launcher((flag, cp.int32(value)))
    cp.cuda.Device().synchronize()
    first_ms = (time.perf_counter() - start) * 1e3
    written = int(flag.get()[0])
    if written != value + mark:
        raise CheckFailed(f"the kernel did not run: flag[0] is {written} after your launcher was called, not "
                          f"{value + mark:,}",
                          "launcher(args) must launch the kernel prepare was handed (source and name), with args "
                          "as its arguments: kernel((1,), (1,), args)")
    line = f"first launch after prepare: {first_ms:.3f} ms (under 1 ms required)"
    if first_ms >= 1.0:
        raise CheckFailed(line, "the first launch still compiled or loaded the kernel: compile it inside prepare "
                                "(RawKernel.compile(), or RawModule(...).get_function) and launch that same object")
    return line


# ---- exercise 4: the fused conv ----------------------------------------------------------------------------

FUSED_SIGNATURE = "conv_chain_fused(const float* x, float* y, int n)"
SLACK = 1024  # elements past n in the buffers the checker hands your kernel: writes there are caught


def _binomial_passes(x, passes: int):
    """x filtered by `passes` binomial 5-taps with a periodic boundary, in float64 (what a wrong pass count gives)."""
    import numpy as np

    y = x.astype(np.float64)
    for _ in range(passes):
        y = sum(w * np.roll(y, -k) for k, w in zip(range(-2, 3), (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16),
                                                        strict=True))
    return y


def _diagnose(x, out, chain, n: int) -> str | None:
    """The mistake a wrong fused output betrays, when it betrays one (host arrays)."""
    import numpy as np

    err = np.abs(out.astype(np.float64) - chain)
    edge = 8
    if np.nanmax(err[edge:n - edge]) <= 1e-5 and not np.nanmax(err) <= 1e-5:
        return ("right in the middle, wrong within 8 elements of the ends: the boundary must be periodic, "
                "x[(i + k + n) % n]")
    for passes in (1, 2, 3, 5):
        if np.allclose(out, _binomial_passes(x, passes), rtol=1e-4, atol=1e-5):
            return (f"your output is {passes} binomial filter{'s' if passes > 1 else ''}, not 4: four 5-taps "
                    "make one 17-tap, C(16, k) / 65536")
    ratio = float(np.sum(out, dtype=np.float64) / np.sum(chain, dtype=np.float64))
    if math.isfinite(ratio) and abs(ratio - 1) > 0.01:
        return (f"your output sums to {ratio:.4g}x the chain's: the weights must sum to 1 "
                "(C(16, k) / 65536; in float, not integer division)")
    return None


@exercise(4,
          "four binomial 5-tap filters in a row equal one 17-tap filter with weights C(16, k) / 65536; "
          "apply it in one kernel with the same periodic boundary.")
def check_fused_conv(fused_conv_source: Callable[[], str]) -> str:
    """Your kernel, launched once, gives the four-kernel chain's output at three sizes (one not a multiple of
    the block), leaves its input alone, writes nothing past y[n - 1], and is faster than the chain at 4,096 elements
    (one launch against four) and at 1,048,576 (one pass over memory against four)."""
    import cupy as cp
    import numpy as np

    source = fused_conv_source()
    if not isinstance(source, str) or "conv_chain_fused" not in source:
        raise CheckFailed(f"fused_conv_source() must return CUDA source defining {FUSED_SIGNATURE}, "
                          f"not {type(source).__name__}")
    try:
        fused = cp.RawKernel(source, "conv_chain_fused")
        fused.compile()
    except Exception as exc:
        raise CheckFailed(f"your kernel does not compile: {str(exc).strip()[:600]}") from None
    conv5 = cp.RawKernel(CONV5_SOURCE, "conv5")
    rng = checking.numpy_generator()
    timings = {}
    odd = 2 * checking.rng().randrange(2_000, 6_000) + 1  # not a multiple of the block: threads past n exist
    for n in (4096, odd, 1 << 20):
        # Made and compared on the host, so the check compiles no kernels of its own. Your kernel gets views of
        # the first n elements of longer buffers: a read or write past n stays in memory the checker owns.
        x_host = rng.random(n + SLACK, dtype=np.float32)
        x_buf = cp.asarray(x_host)
        x = x_buf[:n]
        a, b = x.copy(), cp.empty_like(x)
        out_buf = cp.asarray(np.full(n + SLACK, np.nan, dtype=np.float32))
        out = out_buf[:n]
        grid, n32 = ((n + 255) // 256,), cp.int32(n)

        def chain(a=a, b=b, grid=grid, n32=n32):
            for src, dst in ((a, b), (b, a), (a, b), (b, a)):
                conv5(grid, (256,), (src, dst, n32))

        chain()
        fused(grid, (256,), (x, out, n32))
        x_after, out_host, expected = x_buf.get(), out_buf.get(), a.get()
        yours = out_host[:n]
        if not np.array_equal(x_after, x_host):
            untouched = bool(np.isnan(yours).all())
            raise CheckFailed(f"at n={n:,} your kernel changed its input x{' and wrote nothing into y' * untouched}",
                              "your kernel wrote its result into x: write it into y, the second argument"
                              if untouched else
                              "x is const: the fused kernel reads x and writes only y (no passes in place)")
        if not np.isnan(out_host[n:]).all():
            raise CheckFailed(f"at n={n:,} your kernel wrote past y[n - 1]",
                              "threads past the end exist when n is not a multiple of the block: "
                              "return early when i >= n")
        if np.isnan(yours).all():
            raise CheckFailed(f"at n={n:,} your kernel wrote nothing into y",
                              "write the result to y[i], the second argument")
        if not np.allclose(expected, yours, rtol=1e-5, atol=1e-6):
            worst = float(np.nan_to_num(np.abs(expected - yours), nan=np.inf).max())
            raise CheckFailed(f"at n={n:,} your output differs from the four-kernel chain (max error {worst:.3g})",
                              _diagnose(x_host[:n], yours, expected, n))
        if n != odd:  # 4,096: launches dominate; 1,048,576: the work does (a kernel redoing work shows there)
            timings[n] = (timing.launch_throughput_us(chain, launches=20, rounds=10).median_us,
                          timing.launch_throughput_us(lambda x=x, out=out, grid=grid, n32=n32:
                                                      fused(grid, (256,), (x, out, n32)),
                                                      launches=20, rounds=10).median_us)
            if timings[n][1] >= timings[n][0]:  # at once: a kernel slow at 4,096 could take minutes at 1,048,576
                raise CheckFailed(
                    f"same output as the chain at {n:,} elements, but your kernel took {timings[n][1]:.2f} us "
                    f"against the chain's {timings[n][0]:.2f} us there (the fused kernel must be faster at 4,096 "
                    "and at 1,048,576 elements)",
                    "one launch should beat four at 4,096 elements, and one pass over memory should beat four at "
                    "1,048,576: does your kernel loop over the whole array, or compute each output's 17 taps by "
                    "redoing the four passes (5 x 5 x 5 x 5 reads) instead of once?")
    return (f"same output as the chain at 4,096, {odd:,} and 1,048,576 elements, input untouched, nothing "
            f"written past y[n - 1]; fused against the chain: "
            + ", ".join(f"{mine:.2f} us against {chain:.2f} us at {n:,}" for n, (chain, mine) in timings.items()))
