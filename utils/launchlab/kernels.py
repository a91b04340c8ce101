"""Kernels whose duration is known, shared by the notebooks and the lab checkers: a calibrated CuPy spin, and how
many cycles PyTorch's own spin (torch.cuda._sleep) needs for a given time."""

from __future__ import annotations

import functools

# Spins for a number of SM clock cycles and writes how long that took by the GPU's global nanosecond timer,
# so every launch carries its own ground truth, independent of any host clock and of the SM clock rate.
SPIN_SOURCE = r"""
extern "C" __global__ void spin_cycles(long long cycles, unsigned long long* elapsed_ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    while (clock64() - c0 < cycles) { }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    elapsed_ns[0] = t1 - t0;
}
"""


class Spinner:
    """A compiled spin kernel, calibrated once: launch(us) runs for about that long; truth_us() says exactly."""

    def __init__(self, calibration_cycles: int = 2_000_000):
        import cupy as cp

        self._cp = cp
        self.kernel = cp.RawKernel(SPIN_SOURCE, "spin_cycles")
        self.elapsed_ns = cp.zeros(1, dtype=cp.uint64)
        self._other_ns = cp.zeros(1, dtype=cp.uint64)  # where spins that are not the one timed write their duration
        self.launch_cycles(calibration_cycles)  # warm-up: compile and load the module
        self.launch_cycles(calibration_cycles)
        self.cycles_per_ns = calibration_cycles / self.truth_ns()

    def launch_cycles(self, cycles: int, stream=None) -> None:
        """Enqueue one spin of `cycles` SM clock cycles on `stream` (the current stream by default)."""
        cp = self._cp
        self.kernel((1,), (1,), (cp.int64(cycles), self.elapsed_ns), stream=stream)

    def launch(self, duration_us: float, stream=None) -> None:
        """Enqueue one spin of about `duration_us` microseconds."""
        self.launch_cycles(max(int(duration_us * 1000 * self.cycles_per_ns), 0), stream=stream)

    def occupy(self, duration_us: float, stream) -> None:
        """Enqueue a spin of about `duration_us` microseconds on `stream` that leaves truth_ns() to the last launch:
        other work on the GPU, not the work being timed."""
        cycles = max(int(duration_us * 1000 * self.cycles_per_ns), 0)
        self.kernel((1,), (1,), (self._cp.int64(cycles), self._other_ns), stream=stream)

    def truth_ns(self) -> float:
        """Wait for the last spin and return its duration by the GPU's own timer, in nanoseconds."""
        self._cp.cuda.Device().synchronize()
        return float(self.elapsed_ns.get()[0])

    def truth_us(self) -> float:
        """Wait for the last spin and return its duration by the GPU's own timer, in microseconds."""
        return self.truth_ns() / 1000


@functools.lru_cache(maxsize=1)
def spinner() -> Spinner:
    """The process's one calibrated Spinner."""
    return Spinner()


def torch_sleep_cycles(ms: float) -> int:
    """SM clock cycles that torch.cuda._sleep spins for about `ms`, from the fastest of three timed spins."""
    import torch

    torch.cuda._sleep(1_000_000)  # loads the spin kernel and wakes the clocks before anything is timed
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return int(10_000_000 * ms / max(best, 1e-3))
