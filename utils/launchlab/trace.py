"""Read a torch.profiler Chrome trace: GPU activity, busy and idle time in a window, the largest gaps.

HolisticTraceAnalysis does this for whole training jobs (pandas, many ranks); the course needs a few
numbers from one short trace, checked on a CPU as well, so this reader is small and depends on nothing.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# What occupies the GPU in a Kineto trace: kernels, copies and memsets.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
SHIPPED_TRACE = "sync_loop_trace.json.gz"


@dataclass(frozen=True)
class Interval:
    """One complete ("X") trace event: what ran, in which category, from when to when (microseconds)."""

    name: str
    cat: str
    start_us: float
    end_us: float
    correlation: int | None = None  # links a kernel to the call that launched it

    @property
    def duration_us(self) -> float:
        """Length in microseconds."""
        return self.end_us - self.start_us


@dataclass(frozen=True)
class GpuIdle:
    """GPU occupancy over a window: how many kernels, busy and idle time, the largest idle gaps."""

    window_us: tuple[float, float]
    kernel_count: int
    busy_us: float
    largest_gaps_us: tuple[float, ...]

    @property
    def span_us(self) -> float:
        """Length of the window."""
        return self.window_us[1] - self.window_us[0]

    @property
    def idle_fraction(self) -> float:
        """Share of the window in which nothing ran on the GPU."""
        return 1 - self.busy_us / self.span_us if self.span_us > 0 else 0.0

    @property
    def largest_gap_us(self) -> float:
        """The longest stretch of the window with nothing on the GPU."""
        return self.largest_gaps_us[0] if self.largest_gaps_us else 0.0


def shipped_trace_path() -> Path:
    """A trace recorded on the course's reference GPU (a training loop with a sync point per step)."""
    return Path(str(resources.files("launchlab") / "data" / SHIPPED_TRACE))


def load_events(trace: str | Path | dict) -> list[dict]:
    """The trace events of a Chrome trace file (plain or .gz) or of an already-loaded trace dict."""
    if isinstance(trace, dict):
        data = trace
    else:
        path = Path(trace)
        if not path.exists():
            raise FileNotFoundError(f"no trace at {path}; export one with prof.export_chrome_trace(path)")
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            data = json.load(f)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: expected a 'traceEvents' list (torch.profiler's export_chrome_trace)")
    return events


def intervals(events: Iterable[dict], categories: Iterable[str]) -> list[Interval]:
    """Complete events of the given categories, sorted by start."""
    wanted = set(categories)
    found = [Interval(str(e.get("name", "")), e["cat"], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                      (e.get("args") or {}).get("correlation")) for e in events
             if e.get("ph") == "X" and e.get("cat") in wanted]
    return sorted(found, key=lambda i: (i.start_us, i.end_us))


def annotation_range(events: Sequence[dict], name: str) -> Interval:
    """The first CPU range called `name` (torch.profiler.record_function) in the trace."""
    ranges = [i for i in intervals(events, {"user_annotation"}) if i.name == name]
    if not ranges:
        raise ValueError(f"the trace has no record_function range named {name!r}; "
                         f"wrap the code in torch.profiler.record_function({name!r})")
    return ranges[0]


def work_of_range(events: Sequence[dict], name: str) -> tuple[list[Interval], tuple[float, float]]:
    """The GPU work that starts inside the CPU range `name`, and the window from the range's start to the
    range's end or the end of that work, whichever is later. (End the range with a synchronisation so that
    it covers all the GPU work it launched.)"""
    cpu = annotation_range(events, name)
    mine = [i for i in intervals(events, GPU_CATEGORIES) if cpu.start_us <= i.start_us <= cpu.end_us]
    return mine, (cpu.start_us, max([cpu.end_us, *(i.end_us for i in mine)]))


def busy_and_gaps(gpu: Sequence[Interval], window: tuple[float, float]) -> tuple[float, list[float]]:
    """Busy time (the union of the intervals, so overlapping streams count once) and every idle gap."""
    lo, hi = window
    busy, gaps, cursor = 0.0, [], lo
    for i in sorted(gpu, key=lambda i: i.start_us):
        start, end = max(i.start_us, lo), min(i.end_us, hi)
        if end <= start:
            continue
        if start > cursor:
            gaps.append(start - cursor)
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    if hi > cursor:
        gaps.append(hi - cursor)
    return busy, gaps


def gpu_idle(trace: str | Path | dict | list, annotation: str | None = None, top: int = 5) -> GpuIdle:
    """GPU idle time in the window of a record_function range (the work it started), or over all GPU work."""
    events = trace if isinstance(trace, list) else load_events(trace)
    gpu = intervals(events, GPU_CATEGORIES)
    if not gpu:
        raise ValueError("the trace has no GPU activity: profile with ProfilerActivity.CUDA on a CUDA device")
    if annotation:
        gpu, window = work_of_range(events, annotation)
    else:
        window = (gpu[0].start_us, max(i.end_us for i in gpu))
    busy, gaps = busy_and_gaps(gpu, window)
    kernels = sum(1 for i in gpu if i.cat == "kernel")
    return GpuIdle(window, kernels, busy, tuple(sorted(gaps, reverse=True)[:top]))


@dataclass(frozen=True)
class IdleSplit:
    """A window's GPU time in three parts: busy, idle waiting for the host to launch, idle with work queued."""

    window_us: tuple[float, float]
    kernel_count: int
    busy_us: float
    host_wait_us: float
    gpu_gap_us: float


# The calls that put work on the GPU; a kernel's launch shares its correlation id (graph kernels: the graph's).
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


def _attribute_idle(kernels: Iterable[tuple[float, float, float]], window: tuple[float, float]) -> IdleSplit:
    """Split a window given each kernel's (launch call returned, start, end) in microseconds.

    Private: it is the answer to lab 07's exercise 4, and a lab never hands out its answer; `idle_split` is the
    public way to it, from a trace.

    An idle stretch before a kernel counts as host wait up to the moment its launch call returned (the GPU
    had nothing to run yet) and as a GPU gap after it (the work was queued and the GPU had not started it).
    After the last kernel the GPU waits for the host. Overlapping kernels count once, as busy.
    """
    lo, hi = window
    busy = host = gpu = 0.0
    cursor, count = lo, 0
    # Of kernels that start together, the first launched decides when the GPU had work.
    for launched, start, end in sorted(kernels, key=lambda k: (k[1], k[0], k[2])):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        count += 1
        if start > cursor:
            waiting = min(max(launched - cursor, 0.0), start - cursor)
            host += waiting
            gpu += start - cursor - waiting
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    host += max(hi - cursor, 0.0)
    return IdleSplit(window, count, busy, host, gpu)


def idle_split(events: Sequence[dict], annotation: str) -> IdleSplit:
    """The idle split over the GPU work of a record_function range, each kernel matched to its launch call."""
    returned = {i.correlation: i.end_us for i in intervals(events, LAUNCH_CATEGORIES) if i.correlation is not None}
    gpu, window = work_of_range(events, annotation)
    # A kernel whose launch is not in the trace was queued before it began: its idle time is the GPU's.
    return _attribute_idle([(returned.get(i.correlation, float("-inf")), i.start_us, i.end_us) for i in gpu], window)


@dataclass(frozen=True)
class LaunchSplit:
    """A window's GPU time by launch call: busy; idle before a call's first kernel, split where the call returned
    (host wait before, queued after); idle between kernels of one call (a graph replay's own gaps)."""

    window_us: tuple[float, float]
    kernel_count: int
    launch_count: int
    busy_us: float
    host_wait_us: float
    queued_gap_us: float
    replay_gap_us: float

    @property
    def idle_us(self) -> float:
        """All idle time in the window."""
        return self.host_wait_us + self.queued_gap_us + self.replay_gap_us


def _split_by_launch(kernels: Iterable[tuple[object, float, float, float]], window: tuple[float, float]) -> LaunchSplit:
    """Split a window given each kernel's (launch call id or None, call returned, start, end) in microseconds.

    Private: with None for every call id it is the answer to lab 07's exercise 4, and a lab never hands out its
    answer; `launch_split` is the public way to it, from a trace.

    The launch-return rule of `idle_split` holds only for a call's first kernel: a graph replay's kernels all
    share one cudaGraphLaunch, which hands the GPU the whole graph at once, so the idle between kernels of one
    call is the GPU's own gap inside the replay, whenever the call returned. After the last kernel the GPU waits
    for the host. Overlapping kernels count once, as busy.
    """
    lo, hi = window
    busy = host = queued = replay = 0.0
    cursor, count, started = lo, 0, set()
    # Of kernels that start together, the first launched decides when the GPU had work (as in _attribute_idle).
    for call, launched, start, end in sorted(kernels, key=lambda k: (k[2], k[1], k[3])):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        count += 1
        if start > cursor:
            if call is not None and call in started:
                replay += start - cursor
            else:
                waiting = min(max(launched - cursor, 0.0), start - cursor)
                host += waiting
                queued += start - cursor - waiting
        if call is not None:
            started.add(call)
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    host += max(hi - cursor, 0.0)
    return LaunchSplit(window, count, len(started), busy, host, queued, replay)


def launch_split(events: Sequence[dict], annotation: str) -> LaunchSplit:
    """The launch-call split over the GPU work of a record_function range, each kernel matched to its launch call."""
    returned = {i.correlation: i.end_us for i in intervals(events, LAUNCH_CATEGORIES) if i.correlation is not None}
    gpu, window = work_of_range(events, annotation)
    # A kernel whose launch is not in the trace was queued before the range began: its idle time is the GPU's.
    return _split_by_launch([(i.correlation if i.correlation in returned else None,
                             returned.get(i.correlation, float("-inf")), i.start_us, i.end_us) for i in gpu], window)


def timeline_rows(events: Sequence[dict], window: tuple[float, float]) -> dict[str, list[Interval]]:
    """The rows a timeline draws: top-level CPU ops, CUDA runtime calls and GPU work, inside the window."""
    lo, hi = window

    def inside(cats: set[str]) -> list[Interval]:
        return [i for i in intervals(events, cats) if i.end_us > lo and i.start_us < hi]

    cpu_ops, outer_end = [], -1.0
    for op in inside({"cpu_op"}):
        if op.start_us >= outer_end:  # keep only ops not nested in the previous one
            cpu_ops.append(op)
            outer_end = op.end_us
    return {"CPU: aten ops": cpu_ops, "CPU: CUDA runtime": inside({"cuda_runtime", "cuda_driver"}),
            "GPU": inside(set(GPU_CATEGORIES))}


def write_slim(events: Iterable[dict], path: str | Path,
               categories: Iterable[str] = (*GPU_CATEGORIES, "user_annotation", "cpu_op", "cuda_runtime")) -> Path:
    """Write a small gzipped trace: only complete events of `categories`, only the fields this reader uses."""
    wanted = set(categories)
    keep = [{k: e[k] for k in ("ph", "name", "cat", "ts", "dur", "pid", "tid") if k in e}
            for e in events if e.get("ph") == "X" and e.get("cat") in wanted]
    path = Path(path)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": keep}, f, separators=(",", ":"))
    return path


def record(fn: Callable[[], object], calls: int = 1) -> list[dict]:
    """The trace events of `calls` calls of fn, profiled (CPU, and CUDA where present) on a schedule that
    keeps the profiler's own start-up out of the trace, inside a record_function("calls") range."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings():
        # Only the one active cycle is wanted, so the profiler's note that it drops earlier cycles is noise.
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=1)) as prof:
            for _ in range(3):
                with record_function("calls"):
                    for _ in range(calls):
                        fn()
                    if cuda:
                        torch.cuda.synchronize()
                prof.step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return load_events(path)


def count(events: Sequence[dict], categories: Iterable[str], prefix: str = "") -> int:
    """How many complete events of the categories have a name starting with `prefix`."""
    return sum(1 for i in intervals(events, categories) if i.name.startswith(prefix))


# Launch calls by the API they go through: PyTorch's own kernels use the runtime, Triton's launcher and cuBLASLt
# the driver, a graph replay one graph launch (runtime or driver). Counting only cudaLaunchKernel misses the rest.
KERNEL_LAUNCH_PREFIXES = ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
                          "cuLaunchCooperativeKernel")
GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch")


@dataclass(frozen=True)
class LaunchCounts:
    """Launch calls in a trace: kernels through the runtime and through the driver, and graph launches."""

    runtime_kernels: int
    driver_kernels: int
    graphs: int

    @property
    def kernels(self) -> int:
        """Kernel launches through either API."""
        return self.runtime_kernels + self.driver_kernels

    def __str__(self) -> str:
        return (f"{self.kernels} kernel launches ({self.runtime_kernels} runtime, {self.driver_kernels} driver), "
                f"{self.graphs} graph launches")


def launch_counts(events: Sequence[dict], per: float = 1.0) -> LaunchCounts:
    """Every launch call in the trace's CUDA API events, by API (divided by `per`, the calls traced)."""
    runtime = driver = graphs = 0
    for i in intervals(events, LAUNCH_CATEGORIES):
        if i.name.startswith(GRAPH_LAUNCH_PREFIXES):
            graphs += 1
        elif i.name.startswith(KERNEL_LAUNCH_PREFIXES):
            if i.name.startswith("cu") and not i.name.startswith("cuda"):
                driver += 1
            else:
                runtime += 1
    return LaunchCounts(round(runtime / per), round(driver / per), round(graphs / per))
