"""Ranks started from Python: results come back, a hung program is stopped by the timeout, and the rank-side
watchdog stops a rank that waits on a collective its partner never issues."""

import time

import pytest

from launchlab.env import gpu_count
from launchlab.ranks import NotEnoughGPUs, require_gpus, run_ranks

HANG = """
import time
from launchlab.ranks import result
result(started=True)
time.sleep(600)
"""


def test_a_hung_program_is_stopped_by_the_timeout():
    start = time.perf_counter()
    run = run_ranks(HANG, nprocs=2, timeout_s=20, echo=False)
    assert run.timed_out and not run.ok
    assert len(run.results()) == 2
    assert time.perf_counter() - start < 60, "stopping the ranks should take seconds, not minutes"


def test_the_watchdog_stops_a_rank_waiting_for_a_missing_partner():
    program = """
import sys, time
import torch
import torch.distributed as dist
from launchlab.ranks import Watchdog, init, result
rank, world, device = init("gloo")
watchdog = Watchdog(rank, 8)
watchdog.collective("extra", 1)
if rank == 0:
    dist.all_reduce(torch.ones(1))   # rank 1 never joins
else:
    time.sleep(60)                    # alive, but never issuing the collective
watchdog.finish()
"""
    run = run_ranks(program, nprocs=2, timeout_s=120, echo=False)
    assert not run.timed_out and run.returncode != 0
    assert any(line.startswith("WATCHDOG rank=") for line in run.lines), run.lines[-5:]


@pytest.mark.skipif(gpu_count() >= 2, reason="checks the message on a machine with fewer than two GPUs")
def test_two_gpu_cells_stop_with_one_line():
    with pytest.raises(NotEnoughGPUs) as raised:
        require_gpus(2)
    assert "2 ranks" in str(raised.value) and raised.value._render_traceback_()[0].startswith("[skipped]")
