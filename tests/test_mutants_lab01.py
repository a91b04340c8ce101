"""Lab 01's mutation suite: plausible answers a learner writes, each judged by its checker (every exercise needs a GPU).

Exercises 1 and 2 hand the answer kernels that spin for a time the checker planted (drawn afresh each call); the
answers here time with fewer repetitions than the solution, so the suite stays quick.
"""

import math
import random
import time

import numpy as np
import pytest

from launchlab import checking
from launchlab.chapters.ch01 import checkers as ch01
from mutants import Answer, judge, suite


def _cp():
    import cupy as cp

    return cp


def _sync():
    _cp().cuda.Device().synchronize()


pytestmark = pytest.mark.usefixtures("lenient_checkers")


# ---- exercise 1: the three launch figures ---------------------------------------------------------------------

def _enqueue(launch):
    from launchlab import timing

    return timing.enqueue_us(launch, rounds=20).median_us


def _throughput(launch):
    from launchlab import timing

    return timing.launch_throughput_us(launch, rounds=20).median_us


def _latency(launch):
    from launchlab import timing

    return timing.sync_latency_us(launch, repeats=200).median_us


def figures(launch):
    """The solution's method, with fewer repetitions."""
    return {"enqueue_us": _enqueue(launch), "throughput_us": _throughput(launch), "sync_latency_us": _latency(launch)}


def figures_by_hand(launch, n=100, rounds=20, repeats=200):
    """Right, written differently: perf_counter and CuPy's device synchronisation, no harness."""
    sync = _cp().cuda.Device().synchronize
    launch()
    sync()
    enqueue, throughput, latency = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / n * 1e6)
        throughput.append((t2 - t0) / n * 1e6)
    for _ in range(repeats):
        t0 = time.perf_counter()
        launch()
        sync()
        latency.append((time.perf_counter() - t0) * 1e6)
    return {"enqueue_us": float(np.median(enqueue)), "throughput_us": float(np.median(throughput)),
            "sync_latency_us": float(np.median(latency))}


def throughput_without_final_sync(launch, n=100, rounds=20):
    samples = []
    _sync()
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        samples.append((time.perf_counter() - t0) / n * 1e6)  # the GPU may still be busy
        _sync()
    return {**figures(launch), "throughput_us": float(np.median(samples))}


def latency_without_sync(launch, repeats=200):
    samples = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        launch()
        samples.append((time.perf_counter() - t0) * 1e6)
    return {**figures(launch), "sync_latency_us": float(np.median(samples))}


def latency_over_many_launches(launch):
    result = figures(launch)
    return {**result, "sync_latency_us": result["throughput_us"]}  # one sync after many launches: throughput


def enqueue_with_sync(launch):
    result = figures(launch)
    return {**result, "enqueue_us": result["throughput_us"]}


def enqueue_for_everything(launch):
    enqueue = _enqueue(launch)
    return {"enqueue_us": enqueue, "throughput_us": enqueue, "sync_latency_us": enqueue}


def _scaled(factor):
    return lambda launch: {key: value * factor for key, value in figures(launch).items()}


REFERENCE_H100 = {"enqueue_us": 5.499, "throughput_us": 6.221, "sync_latency_us": 11.72}  # the report's figures

FIGURE_ANSWERS = [
    Answer("launchlab.timing, one function a figure (the solution)", "right", figures),
    Answer("by hand with perf_counter and a device sync", "right", figures_by_hand),
    Answer("throughput without the final synchronisation", "classic", throughput_without_final_sync),
    Answer("latency without the synchronisation", "method", latency_without_sync),
    Answer("latency as many launches and one sync", "method", latency_over_many_launches),
    Answer("enqueue cost with a synchronisation", "method", enqueue_with_sync),
    Answer("the enqueue cost for all three", "structure", enqueue_for_everything),
    Answer("seconds", "unit", _scaled(1e-6)),
    Answer("nanoseconds", "unit", _scaled(1e3)),
    Answer("the reference run's figures typed in", "hard-coded", lambda launch: dict(REFERENCE_H100)),
    Answer("throughput NaN", "bad value", lambda launch: {**figures(launch), "throughput_us": float("nan")}),
    Answer("keys without _us", "structure",
           lambda launch: {key.removesuffix("_us"): value for key, value in figures(launch).items()}),
    Answer("a tuple, not a dict", "bad value", lambda launch: tuple(figures(launch).values())),
]
SUITE_FIGURES = suite("01", 1, ch01.check_launch_figures, FIGURE_ANSWERS)


@pytest.mark.exercise("01", 1)
@pytest.mark.gpu
def test_lab01_exercise1_launch_figures():
    wrong = judge(SUITE_FIGURES.lab, SUITE_FIGURES.number, SUITE_FIGURES.checker, SUITE_FIGURES.answers, trials=2)
    assert not wrong, "\n".join(wrong)
    assert "synchronise once after the last launch" in ch01.check_launch_figures(throughput_without_final_sync).hint
    assert "seconds where microseconds" in ch01.check_launch_figures(_scaled(1e-6)).hint


# ---- exercise 2: the crossover ---------------------------------------------------------------------------------

SIZES = [2**k for k in range(4, 27)]


def _launches(n):
    return max(2, min(10, int(2e7 / n)))


def _throughput_sweep(make_run, sizes):
    from launchlab import timing

    return [timing.launch_throughput_us(make_run(n), launches=_launches(n), rounds=3, warmup=1).median_us
            for n in sizes]


def _enqueue_sweep(make_run, sizes):
    from launchlab import timing

    return [timing.enqueue_us(make_run(n), launches=_launches(n), rounds=3, warmup=1).median_us for n in sizes]


def _by_hand_sweep(make_run, sizes):
    """Launch throughput by hand: the median of three rounds of back-to-back launches, one sync each."""
    cp = _cp()
    per_launch = []
    for n in sizes:
        run = make_run(n)
        run()
        cp.cuda.Device().synchronize()
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(_launches(n)):
                run()
            cp.cuda.Device().synchronize()
            samples.append((time.perf_counter() - t0) / _launches(n) * 1e6)
        per_launch.append(sorted(samples)[1])
    return per_launch


def _first_above(sizes, per_launch, factor=2.0, every_larger=True, floor_of=np.median):
    floor = float(floor_of(per_launch[:3]))
    above = [us > factor * floor for us in per_launch]
    if every_larger:
        return next(n for i, n in enumerate(sizes) if all(above[i:]))
    return next(n for n, a in zip(sizes, above, strict=True) if a)


def crossover_answers(sweep=_throughput_sweep, by_hand=_by_hand_sweep, unsynced=_enqueue_sweep):
    """The answers, over sweeps that time each size (on a GPU) or read the planted time (on a CPU)."""

    def crossover(make_run):
        """The solution's rule."""
        return _first_above(SIZES, sweep(make_run, SIZES))

    def walking_back(make_run):
        """Right, written differently: walk back from the largest size while it stays above twice the floor."""
        per_launch = by_hand(make_run, SIZES)
        floor = sorted(per_launch[:3])[1]
        i = len(SIZES)
        while i > 0 and per_launch[i - 1] > 2 * floor:
            i -= 1
        return SIZES[i]

    def last_flat_size(make_run):
        return SIZES[SIZES.index(crossover(make_run)) - 1]

    return [
        Answer("the solution's rule", "right", crossover),
        Answer("timed by hand, walking back from the largest size", "right", walking_back),
        Answer("the first size above twice the floor, later dips ignored", "classic",
               lambda make_run: _first_above(SIZES, sweep(make_run, SIZES), every_larger=False)),
        Answer("the last size under twice the floor", "classic", last_flat_size),
        Answer("timed without synchronisation", "method",
               lambda make_run: _first_above(SIZES, unsynced(make_run, SIZES))),
        Answer("steps of 4", "method", lambda make_run: _first_above(SIZES[::2], sweep(make_run, SIZES[::2]))),
        Answer("four times the floor", "method",
               lambda make_run: _first_above(SIZES, sweep(make_run, SIZES), factor=4.0)),
        Answer("the floor from the smallest size alone", "method",
               lambda make_run: _first_above(SIZES, sweep(make_run, SIZES), floor_of=lambda s: s[0])),
        Answer("the floor as the mean of the smallest sizes", "method",
               lambda make_run: _first_above(SIZES, sweep(make_run, SIZES), floor_of=np.mean)),
        Answer("the floor as the fastest of the smallest sizes", "method",
               lambda make_run: _first_above(SIZES, sweep(make_run, SIZES), floor_of=min)),
        Answer("in bytes", "unit", lambda make_run: 4 * crossover(make_run)),
        Answer("the reference run's 16,777,216 typed in", "hard-coded", lambda make_run: 16_777_216),
        Answer("the index of the size", "structure", lambda make_run: SIZES.index(crossover(make_run))),
        Answer("as numpy's float64", "right", lambda make_run: np.float64(crossover(make_run))),
        Answer("NaN", "bad value", lambda make_run: math.nan),
        Answer("forgot to return", "bad value", lambda make_run: None),
    ]


CROSSOVER_ANSWERS = crossover_answers()  # timed on a GPU; the CPU test builds its own over the planted times
SUITE_CROSSOVER = suite("01", 2, ch01.check_crossover, CROSSOVER_ANSWERS, part="timed on a GPU")


class _PlantedRun:
    """On a CPU: a launcher that does nothing but knows the time the checker planted for it."""

    def __init__(self, us):
        self.us = us

    def __call__(self):
        pass


def _planted_sweep(make_run, sizes):
    return [make_run(n).us for n in sizes]


def _flat_sweep(make_run, sizes):
    return [5.0 for _ in sizes]  # unsynchronised: every launch costs its enqueue


@pytest.mark.exercise("01", 2)
def test_lab01_exercise2_crossover_judged_on_the_planted_times(monkeypatch):
    """On a CPU: the checker's verdicts and hints, with answers that read the planted times instead of timing."""
    _on_planted_times(monkeypatch)
    answers = crossover_answers(_planted_sweep, _planted_sweep, _flat_sweep)
    wrong = judge("01", 2, ch01.check_crossover, answers, trials=5, part="planted times, CPU")
    assert not wrong, "\n".join(wrong)
    hints = {a.name: ch01.check_crossover(a.fn).hint for a in answers if not a.right}
    assert "bytes" in hints["in bytes"]
    assert "slow size" in hints["the first size above twice the floor, later dips ignored"]
    assert "too early" in hints["the last size under twice the floor"]
    for floor in ("the floor from the smallest size alone", "the floor as the mean of the smallest sizes",
                  "the floor as the fastest of the smallest sizes"):
        assert "median of the three smallest" in hints[floor], (floor, hints[floor])


def _on_planted_times(monkeypatch):
    """The checker's launchers replaced by ones that only know their planted time (on a CPU)."""
    def planted_runs(crossover, slow_size, off_floor=None):
        return lambda n: _PlantedRun(ch01.planted_us(n, crossover, slow_size, off_floor=off_floor))

    monkeypatch.setattr(ch01, "planted_runs", planted_runs)


# Every plausible floor over the three smallest sizes but their median, each caught on every one of 300 draws.
FLOOR_RULES = {"the first size": lambda s: s[0], "the second size (an unsorted middle)": lambda s: s[1],
               "the third size": lambda s: s[2], "the fastest": min, "the slowest": max, "the mean": np.mean}


@pytest.mark.exercise("01", 2)
@pytest.mark.parametrize("floor", list(FLOOR_RULES))
def test_lab01_exercise2_no_floor_but_the_median_passes_300_draws(monkeypatch, floor, lenient_checkers):
    _on_planted_times(monkeypatch)
    monkeypatch.setattr(checking, "_record", lambda declared, verdict: None)
    rule = FLOOR_RULES[floor]
    passed = [seed for seed in range(300)
              if ch01.check_crossover(lambda make_run: _first_above(SIZES, _planted_sweep(make_run, SIZES),
                                                                    floor_of=rule), seed=seed)]
    assert not passed, f"a floor from {floor} passed {len(passed)} of 300 draws"
    right = [seed for seed in range(300)
             if not ch01.check_crossover(lambda make_run: _first_above(SIZES, _planted_sweep(make_run, SIZES)),
                                         seed=seed)]
    assert not right, f"the median failed {len(right)} of 300 draws"


def test_lab01_a_sweep_from_anywhere_keeps_its_median_on_the_floor():
    """However a sweep starts, its three smallest sizes hold at most one slow size, so their median is the floor."""
    for seed in range(300):
        rng = random.Random(seed)
        for other in (1, 2):
            crossover = rng.choice(ch01.PLANTED_CROSSOVERS)
            slow = rng.choice([2**k for k in range(9, crossover.bit_length() - 3)])
            off = ch01.off_floor_sizes(rng, other)
            for start in range(0, 12):
                three = [ch01.planted_us(2**k, crossover, slow, off_floor=off) for k in range(start, start + 3)]
                assert sorted(three)[1] == ch01.PLANTED_FLOOR_US, (seed, other, start, three)


@pytest.mark.exercise("01", 2)
@pytest.mark.gpu
def test_lab01_exercise2_crossover():
    wrong = judge(SUITE_CROSSOVER.lab, SUITE_CROSSOVER.number, SUITE_CROSSOVER.checker, SUITE_CROSSOVER.answers,
                  trials=2, part=SUITE_CROSSOVER.part)
    assert not wrong, "\n".join(wrong)


@pytest.mark.gpu
def test_lab01_planted_runs_are_flat_then_rising():
    """The planted launchers take the floor below a third of the crossover, 1.5x it one step below, 3x at it."""
    make_run = ch01.planted_runs(2**18, slow_size=2**9)
    sizes = [2**4, 2**9, 2**16, 2**17, 2**18, 2**26]
    ratios = [us / _throughput_sweep(make_run, sizes[:1])[0] for us in _throughput_sweep(make_run, sizes)]
    assert ratios[1:5] == pytest.approx([3.0, 1.0, 1.5, 3.0], abs=0.2), ratios
    assert ratios[5] == pytest.approx(ch01.PLANTED_CAP, rel=0.1), ratios


# ---- exercise 3: the compiler off the first launch -------------------------------------------------------------

def prepare(source, name):
    """The solution's method."""
    kernel = _cp().RawKernel(source, name)
    kernel.compile()
    return lambda args: kernel((1,), (1,), args)


def prepare_raw_module(source, name):
    """Right, written differently: a RawModule, its function fetched (compiled and loaded) in prepare."""
    function = _cp().RawModule(code=source).get_function(name)

    def launcher(args):
        function((1,), (1,), args)

    return launcher


def lazy(source, name):
    kernel = _cp().RawKernel(source, name)  # compiled at the first launch: the mistake the exercise fixes
    return lambda args: kernel((1,), (1,), args)


def compiled_in_the_launcher(source, name):
    kernel = _cp().RawKernel(source, name)

    def launcher(args):
        kernel.compile()
        kernel((1,), (1,), args)

    return launcher


def warms_up_another_kernel(source, name):
    cp = _cp()
    cp.RawKernel('extern "C" __global__ void warm() { }', "warm")((1,), (1,), ())  # CUDA warmed, not this kernel
    cp.cuda.Device().synchronize()
    return lazy(source, name)


def compiled_with_other_options(source, name):
    cp = _cp()
    cp.RawKernel(source, name, options=("--use_fast_math",)).compile()  # another module than the one launched
    return lazy(source, name)


def never_launches(source, name):
    kernel = _cp().RawKernel(source, name)
    kernel.compile()
    return lambda args: kernel


def its_own_kernel(source, name):
    # A mark kernel typed in from an earlier version of the checker, not the source handed in.
    return prepare('extern "C" __global__ void mark(int* flag) { flag[0] = 42; }', name)


def returns_the_kernel(source, name):
    kernel = _cp().RawKernel(source, name)
    kernel.compile()
    return kernel


FIRST_LAUNCH_ANSWERS = [
    Answer("RawKernel.compile() in prepare (the solution)", "right", prepare),
    Answer("RawModule.get_function in prepare", "right", prepare_raw_module),
    Answer("nothing compiled in prepare", "classic", lazy),
    Answer("compiled inside the launcher", "method", compiled_in_the_launcher),
    Answer("another kernel launched to warm CUDA up", "method", warms_up_another_kernel),
    Answer("compiled with other options than launched", "method", compiled_with_other_options),
    Answer("a launcher that does not launch", "structure", never_launches),
    Answer("the RawKernel itself returned", "structure", returns_the_kernel),
    Answer("its own copy of a mark kernel", "hard-coded", its_own_kernel),
    Answer("returns None", "bad value", lambda source, name: None),
]
SUITE_FIRST_LAUNCH = suite("01", 3, ch01.check_first_launch, FIRST_LAUNCH_ANSWERS)


@pytest.mark.exercise("01", 3)
@pytest.mark.gpu
def test_lab01_exercise3_first_launch():
    wrong = judge(SUITE_FIRST_LAUNCH.lab, SUITE_FIRST_LAUNCH.number, SUITE_FIRST_LAUNCH.checker,
                  SUITE_FIRST_LAUNCH.answers)
    assert not wrong, "\n".join(wrong)
    assert "compile it inside prepare" in ch01.check_first_launch(lazy).hint
    assert "launch the kernel prepare was handed" in ch01.check_first_launch(never_launches).hint


# ---- exercise 4: fuse the conv1d chain -------------------------------------------------------------------------

HEAD = 'extern "C" __global__ void conv_chain_fused(const float* x, float* y, int n) {\n'
GUARD = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n"


def _taps_kernel(weights, scale, index="(i + k + n) % n", guard=GUARD, out="y[i]"):
    """A one-pass kernel of len(weights) taps centred on i."""
    half = len(weights) // 2
    return (HEAD + guard
            + f"    const float c[{len(weights)}] = {{{', '.join(str(w) for w in weights)}}};\n"
            + "    float acc = 0.0f;\n"
            + f"    for (int k = -{half}; k <= {half}; ++k) acc += c[k + {half}] * x[{index}];\n"
            + f"    {out} = acc * {scale};\n}}\n")


BINOMIAL_16 = [math.comb(16, k) for k in range(17)]


def fused():
    """The solution's kernel."""
    return _taps_kernel(BINOMIAL_16, "(1.0f / 65536.0f)")


def fused_four_passes_in_registers():
    """Right, written differently: each thread loads its 17 neighbours and applies the 5-tap four times in registers."""
    return HEAD + GUARD + r"""
    const float w[5] = {0.0625f, 0.25f, 0.375f, 0.25f, 0.0625f};
    float v[17];
    for (int k = 0; k < 17; ++k) v[k] = x[(i + k - 8 + n) % n];
    for (int pass = 0; pass < 4; ++pass) {
        int width = 17 - 4 * (pass + 1);
        for (int j = 0; j < width; ++j) {
            float acc = 0.0f;
            for (int t = 0; t < 5; ++t) acc += w[t] * v[j + t];
            v[j] = acc;
        }
    }
    y[i] = v[0];
}
"""


def fused_weights_by_recurrence():
    """Right, written differently: binomial weights by the recurrence C(16, k+1) = C(16, k) (16 - k) / (k + 1),
    exact in float (every step an integer below 2^24)."""
    return HEAD + GUARD + r"""
    float c = 1.0f, acc = 0.0f;
    for (int k = 0; k <= 16; ++k) {
        acc += c * x[(i + k - 8 + n) % n];
        c = c * (16 - k) / (k + 1);
    }
    y[i] = acc / 65536.0f;
}
"""


def in_place_passes():
    # Four passes in one launch, ping-ponging through x and y, __syncthreads() between them: x is overwritten,
    # and neighbours in other blocks are read before or after their update.
    return HEAD + GUARD + r"""
    const float w[5] = {0.0625f, 0.25f, 0.375f, 0.25f, 0.0625f};
    float* bufs[2] = {(float*)x, y};
    for (int pass = 0; pass < 4; ++pass) {
        const float* src = bufs[pass % 2];
        float* dst = bufs[(pass + 1) % 2];
        float acc = 0.0f;
        for (int k = -2; k <= 2; ++k) acc += w[k + 2] * src[(i + k + n) % n];
        __syncthreads();
        dst[i] = acc;
        __syncthreads();
    }
    y[i] = x[i];
}
"""


def four_passes_redone_per_output():
    # Right numbers, but every output redoes the four 5-tap passes from x: 5 x 5 x 5 x 5 = 625 reads and products
    # where one 17-tap pass needs 17. Cheap enough per thread to win at 4,096 elements, where the launches decide.
    return HEAD + GUARD + r"""
    const float w[5] = {0.0625f, 0.25f, 0.375f, 0.25f, 0.0625f};
    double acc = 0.0;
    for (int a = 0; a < 5; ++a)
        for (int b = 0; b < 5; ++b)
            for (int c = 0; c < 5; ++c)
                for (int d = 0; d < 5; ++d) {
                    int j = i + a + b + c + d - 8;
                    j = j < 0 ? j + n : (j >= n ? j - n : j);
                    acc += w[a] * w[b] * w[c] * w[d] * x[j];
                }
    y[i] = (float)acc;
}
"""


FUSED_ANSWERS = [
    Answer("one 17-tap binomial pass (the solution)", "right", fused),
    Answer("four 5-tap passes in registers", "right", fused_four_passes_in_registers),
    Answer("weights by recurrence", "right", fused_weights_by_recurrence),
    Answer("one 5-tap pass renamed", "classic", lambda: _taps_kernel([1, 4, 6, 4, 1], "0.0625f")),
    Answer("three filters: C(12, k) / 4096", "classic",
           lambda: _taps_kernel([math.comb(12, k) for k in range(13)], "(1.0f / 4096.0f)")),
    Answer("clamped at the ends, not periodic", "method",
           lambda: _taps_kernel(BINOMIAL_16, "(1.0f / 65536.0f)", index="min(max(i + k, 0), n - 1)")),
    Answer("four passes in place in one launch", "structure", in_place_passes),
    Answer("every output redoes the four passes (625 reads)", "method", four_passes_redone_per_output),
    Answer("written into x, not y", "structure",
           lambda: _taps_kernel(BINOMIAL_16, "(1.0f / 65536.0f)", out="((float*)x)[i]")),
    Answer("no bounds check", "structure",
           lambda: _taps_kernel(BINOMIAL_16, "(1.0f / 65536.0f)", guard="    int i = blockIdx.x * blockDim.x + threadIdx.x;\n")),
    Answer("weights not divided by 65536", "unit", lambda: _taps_kernel(BINOMIAL_16, "1.0f")),
    Answer("integer weights divided as integers", "unit",
           lambda: _taps_kernel(BINOMIAL_16, "1.0f").replace("const float c[17]", "const int c[17]")
           .replace("acc += c[k + 8] *", "acc += (c[k + 8] / 65536) *")),
    Answer("the size 4,096 typed in", "hard-coded",
           lambda: _taps_kernel(BINOMIAL_16, "(1.0f / 65536.0f)", index="(i + k + 4096) % 4096")),
    Answer("the lecture's conv17, not renamed", "bad value",
           lambda: fused().replace("conv_chain_fused", "conv17")),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_FUSED = suite("01", 4, ch01.check_fused_conv, FUSED_ANSWERS)


@pytest.mark.exercise("01", 4)
@pytest.mark.gpu
def test_lab01_exercise4_fused_conv():
    wrong = judge(SUITE_FUSED.lab, SUITE_FUSED.number, SUITE_FUSED.checker, SUITE_FUSED.answers)
    assert not wrong, "\n".join(wrong)
    assert "periodic" in ch01.check_fused_conv(FUSED_ANSWERS[5].fn).hint
    assert "3 binomial filters" in ch01.check_fused_conv(FUSED_ANSWERS[4].fn).hint
    assert "i >= n" in ch01.check_fused_conv(FUSED_ANSWERS[9].fn).hint
    redone = ch01.check_fused_conv(four_passes_redone_per_output)
    assert "at 1,048,576 elements, but" in redone.detail  # right at 4,096, slower than the chain at 1,048,576
    assert "redoing the four passes" in redone.hint


def test_lab01_fused_conv_diagnoses_on_a_cpu():
    """The hints of exercise 4, from outputs made on the host: the checker's diagnosis needs no GPU."""
    rng = np.random.default_rng(0)
    n = 5001
    x = rng.random(n, dtype=np.float32)
    chain = ch01._binomial_passes(x, 4)
    weights = np.array(BINOMIAL_16) / 65536
    clamped = np.array([sum(w * x[min(max(i + k - 8, 0), n - 1)] for k, w in enumerate(weights)) for i in range(n)])
    assert "periodic" in ch01._diagnose(x, clamped.astype(np.float32), chain, n)
    assert "3 binomial filters" in ch01._diagnose(x, ch01._binomial_passes(x, 3).astype(np.float32), chain, n)
    assert "1 binomial filter," in ch01._diagnose(x, ch01._binomial_passes(x, 1).astype(np.float32), chain, n)
    assert "sums to 6.554e+04x" in ch01._diagnose(x, (65536 * chain).astype(np.float32), chain, n)
    assert "sums to 0x" in ch01._diagnose(x, np.zeros(n, np.float32), chain, n)
    assert ch01._diagnose(x, rng.random(n, dtype=np.float32), chain, n) is None
