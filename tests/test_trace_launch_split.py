"""trace.launch_split and the private trace._split_by_launch under it (private: with no call ids it is lab 07's
answer): idle time split at launch calls, a graph replay's gaps apart."""

import pytest

from launchlab import trace


@pytest.mark.parametrize(("kernels", "window", "expected"), [
    # one kernel per call, as eager launches: the same split as attribute_idle
    ([(1, 1.0, 2.0, 5.0)], (0.0, 6.0), (3.0, 2.0, 1.0, 0.0)),
    ([(1, -3.0, 1.0, 2.0), (2, 0.5, 4.0, 5.0)], (0.0, 5.0), (2.0, 0.0, 3.0, 0.0)),
    ([(2, 4.0, 5.0, 6.0), (1, 0.0, 1.0, 2.0)], (0.0, 8.0), (2.0, 4.0, 2.0, 0.0)),
    # one graph launch returning at 10 while its kernels already run: the gaps between them are the replay's
    ([(7, 10.0, 2.0, 3.0), (7, 10.0, 4.0, 5.0), (7, 10.0, 6.0, 7.0)], (0.0, 8.0), (3.0, 3.0, 0.0, 2.0)),
    # two replays: host wait before the second launch returned, queued after, replay gaps inside each
    ([(7, 1.0, 2.0, 3.0), (7, 1.0, 4.0, 5.0), (8, 6.0, 7.0, 8.0), (8, 6.0, 9.0, 10.0)], (0.0, 10.0),
     (4.0, 2.0, 2.0, 2.0)),
    # kernels with no launch call in the trace were queued before the window: never host wait, never a replay
    ([(None, float("-inf"), 1.0, 2.0), (None, float("-inf"), 3.0, 4.0)], (0.0, 4.0), (2.0, 0.0, 2.0, 0.0)),
    # overlapping kernels of one replay count once
    ([(7, 0.0, 1.0, 4.0), (7, 0.0, 2.0, 3.0), (7, 0.0, 5.0, 6.0)], (0.0, 6.0), (4.0, 0.0, 1.0, 1.0)),
])
def test_split_by_launch(kernels, window, expected):
    split = trace._split_by_launch(kernels, window)
    assert (split.busy_us, split.host_wait_us, split.queued_gap_us, split.replay_gap_us) == pytest.approx(expected)
    assert split.busy_us + split.idle_us == pytest.approx(window[1] - window[0])


def test_launch_split_reads_a_trace_and_keeps_the_replay_apart():
    def event(cat, name, ts, dur, correlation=None):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
                **({"args": {"correlation": correlation}} if correlation is not None else {})}

    events = [event("user_annotation", "calls", 0, 20),
              event("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=7),    # returns at 3
              event("kernel", "a", 4, 5, correlation=7),                        # idle 0-3 host, 3-4 queued
              event("cuda_runtime", "cudaGraphLaunch", 5, 10, correlation=8),   # returns at 15
              event("kernel", "b", 12, 2, correlation=8),                       # idle 9-12: host (launch running)
              event("kernel", "c", 15, 3, correlation=8)]                       # idle 14-15: inside the replay
    split = trace.launch_split(events, "calls")
    assert (split.kernel_count, split.launch_count) == (3, 2)
    # tail 18-20 is host wait; the old split called the 14-15 gap host wait too, only because the launch call
    # of the whole graph had not returned yet
    assert (split.busy_us, split.host_wait_us, split.queued_gap_us, split.replay_gap_us) == pytest.approx(
        (10.0, 8.0, 1.0, 1.0))
    old = trace.idle_split(events, "calls")
    assert (old.host_wait_us, old.gpu_gap_us) == pytest.approx((9.0, 1.0))


def test_with_no_call_ids_the_launch_split_agrees_with_the_idle_split_on_ties():
    """Kernels that start together: both splits let the first launched decide, as lab 07 exercise 4 says."""
    from launchlab.trace import _attribute_idle, _split_by_launch

    window = (0.0, 10.0)
    for kernels in ([(5.0, 4.0, 5.0), (1.0, 4.0, 6.0)], [(1.0, 4.0, 6.0), (5.0, 4.0, 5.0)]):  # the first ends first
        idle = _attribute_idle(kernels, window)
        split = _split_by_launch([(None, *k) for k in kernels], window)
        assert (split.busy_us, split.host_wait_us, split.queued_gap_us) == (idle.busy_us, idle.host_wait_us,
                                                                           idle.gpu_gap_us)
