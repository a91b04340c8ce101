"""The trace reader: busy time as a union, gaps, annotation windows, files, and a real profiler export."""

import gzip
import json

import pytest

from launchlab import trace


def event(name, cat, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 0}


STEP = [
    event("step", "user_annotation", 0, 50),
    event("k1", "kernel", 10, 10),             # gap 10 before it (the window starts at the annotation)
    event("k2", "kernel", 15, 10),             # overlaps k1 on another stream: busy 10..25 counts once
    event("copy", "gpu_memcpy", 45, 5),        # gap 20 before it
    event("k3", "kernel", 60, 20),             # starts after the range ends: outside the window
    event("aten::add", "cpu_op", 1, 3),
    event("cudaLaunchKernel", "cuda_runtime", 2, 1),
    {"ph": "i", "name": "marker", "cat": "kernel", "ts": 5},   # not a complete event: ignored
]


def test_the_window_of_a_range_runs_to_the_end_of_the_gpu_work_it_started():
    assert trace.work_of_range(STEP, "step")[1] == (0, 50)
    late = [*STEP, event("k4", "kernel", 48, 12)]
    assert trace.work_of_range(late, "step")[1] == (0, 60)


def test_busy_time_is_a_union_and_gaps_include_the_lead_in():
    idle = trace.gpu_idle(STEP, annotation="step")
    assert idle.kernel_count == 2
    assert idle.busy_us == pytest.approx(15 + 5)
    assert idle.largest_gaps_us == (20, 10)   # 25..45, then the lead-in 0..10; no trailing gap
    assert idle.idle_fraction == pytest.approx(1 - 20 / 50)
    assert idle.largest_gap_us == 20


def test_without_an_annotation_the_window_is_the_span_of_gpu_work():
    idle = trace.gpu_idle(STEP)
    assert idle.window_us == (10, 80)
    assert idle.kernel_count == 3
    assert idle.busy_us == pytest.approx(15 + 5 + 20)


def test_a_trailing_gap_counts_when_the_cpu_range_outlasts_the_gpu():
    busy, gaps = trace.busy_and_gaps([trace.Interval("k", "kernel", 0, 10)], (0, 30))
    assert (busy, gaps) == (10, [20])


def test_files_plain_and_gzipped(tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps({"traceEvents": STEP}))
    with gzip.open(packed, "wt") as f:
        json.dump({"traceEvents": STEP}, f)
    assert trace.gpu_idle(plain, "step") == trace.gpu_idle(packed, "step")


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="export_chrome_trace"):
        trace.load_events(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="traceEvents"):
        trace.load_events({"events": []})
    with pytest.raises(ValueError, match="record_function"):
        trace.gpu_idle(STEP, annotation="nope")
    with pytest.raises(ValueError, match="no GPU activity"):
        trace.gpu_idle([event("a", "cpu_op", 0, 1)])


def test_timeline_rows_keep_top_level_ops_inside_the_window():
    nested = [*STEP, event("aten::empty", "cpu_op", 2, 1)]
    rows = trace.timeline_rows(nested, (0, 50))
    assert [i.name for i in rows["CPU: aten ops"]] == ["aten::add"]
    assert [i.name for i in rows["GPU"]] == ["k1", "k2", "copy"]


def test_reads_a_real_profiler_export(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("step"):
            torch.ones(8).add_(1)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    events = trace.load_events(path)
    _, (start, end) = trace.work_of_range(events, "step")
    assert end > start
    assert any(i.name.startswith("aten::") for i in trace.timeline_rows(events, (start, end))["CPU: aten ops"])


def test_the_shipped_trace_is_a_gpu_trace_with_a_sync_per_step():
    path = trace.shipped_trace_path()
    idle = trace.gpu_idle(path, annotation="loop")
    assert idle.kernel_count > 20
    assert 0 < idle.idle_fraction < 1
    copies = trace.intervals(trace.load_events(path), {"gpu_memcpy"})
    assert copies, "the shipped trace should contain the device-to-host copies of .item()"


def test_a_slim_trace_keeps_what_the_reader_needs(tmp_path):
    noisy = [{**e, "args": {"big": "x" * 1000}} for e in STEP]
    slim = trace.write_slim(noisy, tmp_path / "slim.json.gz")
    assert trace.gpu_idle(slim, "step") == trace.gpu_idle(STEP, "step")
    assert all("args" not in e for e in trace.load_events(slim))


def test_record_profiles_the_calls_on_a_schedule():
    import torch

    x = torch.ones(4)
    events = trace.record(lambda: x.add_(1), calls=5)
    assert trace.count(events, {"cpu_op"}, "aten::add_") == 5  # only the active step's calls
    assert trace.count(events, {"user_annotation"}, "calls") == 1


def test_launches_are_counted_at_every_api_a_driver_launch_included():
    from launchlab import trace

    def event(name, cat, ts):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": 1.0}

    events = [event("cudaLaunchKernel", "cuda_runtime", 0), event("cudaLaunchKernelExC", "cuda_runtime", 2),
              event("cuLaunchKernelEx", "cuda_driver", 4), event("cuLaunchKernel", "cuda_driver", 6),
              event("cudaGraphLaunch", "cuda_runtime", 8), event("cudaMemcpyAsync", "cuda_runtime", 10),
              event("triton_poi_fused_add_0", "kernel", 12)]
    counts = trace.launch_counts(events)
    assert (counts.runtime_kernels, counts.driver_kernels, counts.graphs, counts.kernels) == (2, 2, 1, 4)
    assert trace.count(events, {"cuda_runtime"}, "cudaLaunchKernel") == 2, "the runtime alone misses half"
    assert str(trace.launch_counts(events, per=2)) == "2 kernel launches (1 runtime, 1 driver), 0 graph launches"
