"""The timing harness: statistics, and figures measured on a CPU workload of known duration."""

import time

import numpy as np
import pytest

from launchlab import timing
from launchlab.timing import Timing


def busy_wait(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def test_statistics_match_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 100.0]
    t = Timing.of("x", samples, "test")
    assert t.n == 5
    assert t.median_us == 3.0
    assert t.min_us == 1.0
    assert t.mean_us == pytest.approx(22.2)
    assert t.iqr_us == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    assert "median 3.00 us" in str(t)


def test_empty_samples_are_a_clear_error():
    with pytest.raises(ValueError, match="no samples"):
        Timing.of("enqueue cost", [], "test")


@pytest.mark.parametrize("measure", [timing.enqueue_us, timing.launch_throughput_us])
def test_per_call_figures_recover_a_known_duration(measure):
    result = measure(lambda: busy_wait(200), launches=10, rounds=7)
    assert 180 < result.median_us < 260, str(result)


def test_sync_latency_recovers_a_known_duration():
    result = timing.sync_latency_us(lambda: busy_wait(300), repeats=25)
    assert 280 < result.median_us < 380, str(result)
    assert result.n == 25


def test_table_lists_every_timing():
    rows = timing.table([Timing.of("a", [1.0], "s1"), Timing.of("b", [2.0, 4.0], "s2")]).splitlines()
    assert len(rows) == 3 and rows[2].split()[1] == "3.00"
