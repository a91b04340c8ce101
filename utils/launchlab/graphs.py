"""Reading CUDA graphs and cleaning up failed captures, whichever library made them.

A captured graph is one driver object (a CUgraph) whether CuPy, PyTorch or cuda.core captured it, so its
nodes, edges and kernel names are read here through cuda.bindings, once for all three libraries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def _driver():
    from cuda.bindings import driver

    return driver


def _ok(result, what: str):
    """Unpack a cuda.bindings result tuple, raising a readable error if the call failed."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed with {err.name}: check that a CUDA context is current and the "
                           "graph or stream is still alive")
    return values[0] if len(values) == 1 else tuple(values)


def graph_handle(graph) -> int:
    """The CUgraph address behind a CuPy Graph, a torch CUDAGraph(keep_graph=True), cuda.core objects or an int."""
    if isinstance(graph, int):
        return graph
    if hasattr(graph, "raw_cuda_graph"):  # torch.cuda.CUDAGraph; needs keep_graph=True
        return int(graph.raw_cuda_graph())
    if hasattr(graph, "graph_definition"):  # cuda.core GraphBuilder after end_building()
        return int(graph.graph_definition.handle)
    if hasattr(graph, "graphExec") and hasattr(graph, "graph"):  # cupy.cuda.graph.Graph
        return int(graph.graph)
    if hasattr(graph, "handle"):  # cuda.core GraphDefinition
        return int(graph.handle)
    raise TypeError(f"cannot find a CUgraph in {type(graph).__name__}: pass a CuPy Graph, a torch CUDAGraph "
                    "captured with keep_graph=True, a cuda.core GraphBuilder or GraphDefinition, or an address")


def short_kernel_name(name: str) -> str:
    """A readable kernel name: the (nested) name of a C++ mangled symbol, without its template arguments."""
    if not name.startswith("_Z"):
        return name
    nested = name.startswith("_ZN")
    rest, parts = name[3 if nested else 2:], []
    while match := re.match(r"\d+", rest):
        length, digits = int(match.group()), len(match.group())
        parts.append(rest[digits:digits + length])
        rest = rest[digits + length:]
        if not nested:
            break
    return "::".join(parts) or name


@dataclass(frozen=True)
class Topology:
    """A graph's shape: node kinds in the driver's order, edges as (from, to) indices, kernel names."""

    kinds: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]
    kernels: tuple[str, ...]

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return len(self.kinds)

    def is_chain(self) -> bool:
        """True if the nodes form one straight line: each depends on the one before."""
        n = self.nodes
        if n <= 1:
            return not self.edges
        outs, ins = [0] * n, [0] * n
        for a, b in self.edges:
            outs[a] += 1
            ins[b] += 1
        return len(self.edges) == n - 1 and max(outs) == 1 and max(ins) == 1 and ins.count(0) == 1

    def summary(self) -> str:
        """One line: nodes by kind, edges, and whether it is a straight chain."""
        counts = {k: self.kinds.count(k) for k in dict.fromkeys(self.kinds)}
        kinds = ", ".join(f"{v} {k}" for k, v in counts.items())
        shape = "a straight chain" if self.is_chain() else "not a chain"
        return f"{self.nodes} nodes ({kinds}), {len(self.edges)} edges, {shape}"


def topology(graph) -> Topology:
    """Read nodes, edges and kernel names of a captured graph (see graph_handle for what it accepts)."""
    driver = _driver()
    g = driver.CUgraph(graph_handle(graph))
    count = _ok(driver.cuGraphGetNodes(g, 0), "cuGraphGetNodes")[1]
    nodes = _ok(driver.cuGraphGetNodes(g, count), "cuGraphGetNodes")[0] if count else []
    index = {int(node): i for i, node in enumerate(nodes)}
    kinds, kernels = [], []
    for node in nodes:
        kind = _ok(driver.cuGraphNodeGetType(node), "cuGraphNodeGetType")
        kinds.append(kind.name.removeprefix("CU_GRAPH_NODE_TYPE_"))
        if kind == driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            func = _ok(driver.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams").func
            name = _ok(driver.cuFuncGetName(func), "cuFuncGetName")
            kernels.append(short_kernel_name(name.decode() if isinstance(name, bytes) else str(name)))
    edge_count = _ok(driver.cuGraphGetEdges(g, 0), "cuGraphGetEdges")[-1]
    edges: list[tuple[int, int]] = []
    if edge_count:
        found = _ok(driver.cuGraphGetEdges(g, edge_count), "cuGraphGetEdges")
        edges = [(index[int(a)], index[int(b)]) for a, b in zip(found[0], found[1], strict=True)]
    return Topology(tuple(kinds), tuple(sorted(edges)), tuple(kernels))


def stream_handle(stream) -> int:
    """The cudaStream_t address of a torch, CuPy or cuda.core stream (or an int)."""
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr"):  # torch, CuPy
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core, others)
        return int(stream.__cuda_stream__()[1])
    raise TypeError(f"cannot find a CUDA stream in {type(stream).__name__}: pass a torch, CuPy or cuda.core "
                    "stream, or its address")


def capture_status(stream) -> str:
    """'none', 'active' or 'invalidated': whether the stream is capturing, and whether the capture broke."""
    driver = _driver()
    status = _ok(driver.cuStreamIsCapturing(driver.CUstream(stream_handle(stream))), "cuStreamIsCapturing")
    return status.name.removeprefix("CU_STREAM_CAPTURE_STATUS_").lower()


def end_abandoned_capture(stream) -> bool:
    """End a capture left open on `stream` and throw its graph away; True if there was one to end."""
    if capture_status(stream) == "none":
        return False
    driver = _driver()
    err, graph = driver.cuStreamEndCapture(driver.CUstream(stream_handle(stream)))
    if int(err) == 0 and graph is not None and int(graph):
        driver.cuGraphDestroy(graph)
    return True


def gpu_healthy() -> bool:
    """True if the current context synchronises cleanly (no sticky error, no capture blocking it)."""
    driver = _driver()
    return int(driver.cuCtxSynchronize()[0]) == 0


@dataclass(frozen=True)
class CaptureAttempt:
    """What happened when a capture tried something: the error, whether capture was left open, health after."""

    what: str
    error: str | None
    left_open: bool
    healthy: bool

    def __str__(self) -> str:
        verdict = f"refused: {self.error}" if self.error else "allowed"
        cleanup = "capture left open, ended here" if self.left_open else "capture closed"
        return f"{self.what:38} {verdict}\n{'':38} [{cleanup}; GPU healthy after: {'yes' if self.healthy else 'NO'}]"


def first_error_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message, and its cause's when it has one."""
    line = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and str(cause).strip():
        line += f" (after {type(cause).__name__}: {str(cause).strip().splitlines()[0]})"
    return line


def attempt_capture(what: str, capture: Callable[[], object], stream) -> CaptureAttempt:
    """Run a capture attempt; report its error, end any capture it left open on `stream`, check the GPU."""
    error = None
    try:
        capture()
    except Exception as exc:  # the point is to show the error, not to stop
        error = first_error_line(exc)
    left_open = end_abandoned_capture(stream)
    return CaptureAttempt(what, error, left_open, gpu_healthy() and capture_status(stream) == "none")
