"""One result type over the library timers, for the five launch figures that CONTRIBUTING.md defines.

Each function says which figure it measures. Launch throughput and launch + sync latency come from
torch.utils.benchmark.Timer (its default timer synchronises the whole device, so CuPy work counts too);
GPU time comes from cupyx.profiler.benchmark (CUDA events). Only the enqueue cost, which no library
reports, is timed here by hand.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Samples of one figure, in microseconds, with the statistics the course quotes."""

    figure: str
    samples_us: tuple[float, ...]
    source: str

    @classmethod
    def of(cls, figure: str, samples_us: Sequence[float] | np.ndarray, source: str) -> Timing:
        """Build from any sequence of microsecond samples."""
        samples = tuple(float(s) for s in np.asarray(samples_us, dtype=float).ravel())
        if not samples:
            raise ValueError(f"Timing '{figure}' from {source}: no samples; time at least one repetition")
        return cls(figure, samples, source)

    @property
    def n(self) -> int:
        """Number of samples."""
        return len(self.samples_us)

    @property
    def median_us(self) -> float:
        """Median sample."""
        return float(np.median(self.samples_us))

    @property
    def mean_us(self) -> float:
        """Mean sample (pulled up by outliers; quote the median)."""
        return float(np.mean(self.samples_us))

    @property
    def min_us(self) -> float:
        """Fastest sample."""
        return float(np.min(self.samples_us))

    @property
    def iqr_us(self) -> float:
        """Interquartile range: the spread of the middle half."""
        q1, q3 = np.percentile(self.samples_us, [25, 75])
        return float(q3 - q1)

    def __str__(self) -> str:
        return (f"{self.figure}: median {self.median_us:.2f} us (min {self.min_us:.2f}, "
                f"IQR {self.iqr_us:.2f}, n={self.n}) [{self.source}]")


def synchronize() -> None:
    """Wait for all work on the current GPU, whichever library queued it."""
    import torch

    torch.cuda.synchronize()


def _sync_if_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def enqueue_us(launch: Callable[[], object], launches: int = 100, rounds: int = 50, warmup: int = 3) -> Timing:
    """Enqueue cost: wall time of `launches` back-to-back calls, before any synchronisation, / launches."""
    for _ in range(warmup):
        launch()
    _sync_if_gpu()
    samples = []
    # The garbage collector stays off while timing, as timeit (behind launch_throughput_us) keeps it: the two
    # figures then differ only by the final synchronisation.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(launches):
                launch()
            samples.append((time.perf_counter() - start) / launches * 1e6)
            _sync_if_gpu()  # drain the queue outside the timed region, so no round waits on a full queue
    finally:
        if collecting:
            gc.enable()
    return Timing.of("enqueue cost", samples, f"perf_counter around {launches} calls, no sync")


def launch_throughput_us(launch: Callable[[], object], launches: int = 100, rounds: int = 50,
                         warmup: int = 3) -> Timing:
    """Launch throughput: `launches` back-to-back calls plus one final synchronisation, / launches."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="launch()", globals={"launch": launch})
    timer.timeit(warmup)
    samples = [timer.timeit(launches).median * 1e6 for _ in range(rounds)]
    return Timing.of("launch throughput", samples, f"torch.utils.benchmark.Timer.timeit({launches})")


def sync_latency_us(launch: Callable[[], object], repeats: int = 500, warmup: int = 3) -> Timing:
    """Launch + sync latency: one call then a synchronisation, many times."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="launch()", globals={"launch": launch})
    timer.timeit(warmup)
    samples = [timer.timeit(1).median * 1e6 for _ in range(repeats)]
    return Timing.of("launch + sync latency", samples, "torch.utils.benchmark.Timer.timeit(1)")


def gpu_time_us(work: Callable[[], object], repeats: int = 200, warmup: int = 10, per_call: int = 1) -> Timing:
    """GPU time by CUDA events around each call, divided by the kernels (`per_call`) it launches."""
    from cupyx.profiler import benchmark

    result = benchmark(work, n_repeat=repeats, n_warmup=warmup)
    return Timing.of("GPU time (events)", result.gpu_times[0] * 1e6 / per_call,
                     f"cupyx.profiler.benchmark, n_repeat={repeats}")


def table(timings: Sequence[Timing]) -> str:
    """A fixed-width table of several Timings, medians first."""
    rows = [f"{'figure':34} {'median us':>10} {'min us':>9} {'IQR us':>8} {'n':>6}  source"]
    for t in timings:
        rows.append(f"{t.figure:34} {t.median_us:10.2f} {t.min_us:9.2f} {t.iqr_us:8.2f} {t.n:6d}  {t.source}")
    return "\n".join(rows)
