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
    if hasattr(graph, "nodes") and hasattr(graph, "handle"):  # cuda.core GraphDefinition
        return int(graph.handle)
    # cuda.core's executable Graph also has a handle, but a CUgraphExec has no nodes to read
    raise TypeError(f"cannot find a CUgraph in {type(graph).__name__}: pass a CuPy Graph, a torch CUDAGraph "
                    "captured with keep_graph=True, a cuda.core GraphBuilder or GraphDefinition (not the "
                    "executable Graph that complete() or instantiate() returns), or an address")


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
    """A graph's shape: node kinds in the driver's order, edges as (from, to) indices, a name per node.

    A kernel node's name is its kernel's; any other node is named by its kind in lower case.
    """

    kinds: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]
    names: tuple[str, ...]

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return len(self.kinds)

    @property
    def kernels(self) -> tuple[str, ...]:
        """Names of the kernel nodes, in node order."""
        return tuple(n for n, k in zip(self.names, self.kinds, strict=True) if k == "KERNEL")

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

    def depends_on(self) -> dict[str, set[str]]:
        """For each node name, the names of the nodes it directly depends on (names must be unique)."""
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"node names are not unique ({', '.join(self.names)}): use equivalent() instead")
        found: dict[str, set[str]] = {name: set() for name in self.names}
        for a, b in self.edges:
            found[self.names[b]].add(self.names[a])
        return found

    def summary(self) -> str:
        """One line: nodes by kind, edges, and whether it is a straight chain."""
        counts = {k: self.kinds.count(k) for k in dict.fromkeys(self.kinds)}
        kinds = ", ".join(f"{v} {k}" for k, v in counts.items())
        shape = "a straight chain" if self.is_chain() else "not a chain"
        return f"{self.nodes} nodes ({kinds}), {len(self.edges)} edges, {shape}"


def to_networkx(shape: Topology):
    """The topology as a networkx DiGraph whose nodes carry kind and name."""
    import networkx as nx

    g = nx.DiGraph()
    for i, (kind, name) in enumerate(zip(shape.kinds, shape.names, strict=True)):
        g.add_node(i, kind=kind, name=name)
    g.add_edges_from(shape.edges)
    return g


def equivalent(a: Topology, b: Topology) -> bool:
    """True if the two graphs are the same DAG: nodes of the same kind and name, joined by the same edges."""
    import networkx as nx

    def same_node(x: dict, y: dict) -> bool:
        return x["kind"] == y["kind"] and x["name"] == y["name"]

    return nx.is_isomorphic(to_networkx(a), to_networkx(b), node_match=same_node)


_DOT_NODE = re.compile(r'^"(?P<id>[^"]+)"\[(?P<attrs>.*)\];?$', re.S)
_DOT_EDGE = re.compile(r'^"(?P<a>[^"]+)"\s*->\s*"(?P<b>[^"]+)"')


def parse_dot(text: str) -> Topology:
    """A Topology from the driver's DOT dump (cudaGraphDebugDotPrint with default flags).

    In that dump a kernel node is an octagon labelled "<index>\\n<kernel name>"; other nodes are named by
    the first line of their label.
    """
    ids: list[str] = []
    kinds: list[str] = []
    names: list[str] = []
    edges: list[tuple[str, str]] = []
    for line in _dot_statements(text):
        if edge := _DOT_EDGE.match(line):
            edges.append((edge["a"], edge["b"]))
        elif node := _DOT_NODE.match(line):
            attrs = node["attrs"]
            label = re.search(r'label="((?:[^"\\]|\\.)*)"', attrs, re.S)
            lines = [part for part in (label.group(1) if label else "").replace("\\n", "\n").split("\n") if part]
            is_kernel = 'shape="octagon"' in attrs
            ids.append(node["id"])
            kinds.append("KERNEL" if is_kernel else (lines[0].strip("{ ").split()[0].upper() if lines else "UNKNOWN"))
            names.append(short_kernel_name(lines[1]) if is_kernel and len(lines) > 1 else kinds[-1].lower())
    if not ids:
        raise ValueError("no graph nodes found in this DOT text: pass the output of cudaGraphDebugDotPrint "
                         "(CuPy's graph.debug_dot_str(), cuda.core's debug_dot_print(path))")
    index = {node_id: i for i, node_id in enumerate(ids)}
    return Topology(tuple(kinds), tuple(sorted((index[a], index[b]) for a, b in edges)), tuple(names))


def _dot_statements(text: str) -> list[str]:
    """DOT statements one per item: a node's label may span lines, so split on the closing '];'."""
    statements, current = [], ""
    for line in text.splitlines():
        current = f"{current}\n{line}" if current else line
        if current.startswith('"') and not (current.rstrip().endswith("];") or "->" in current):
            continue
        statements.append(current.strip())
        current = ""
    return statements


def draw(ax, shape: Topology, title: str = "") -> None:
    """Draw a DAG top to bottom, one row per dependency level, each node labelled with its name."""
    import networkx as nx

    g = to_networkx(shape)
    for level, nodes in enumerate(nx.topological_generations(g)):
        for node in nodes:
            g.nodes[node]["level"] = -level
    pos = nx.multipartite_layout(g, subset_key="level", align="horizontal")
    nx.draw_networkx(g, pos, ax=ax, labels={i: n for i, n in enumerate(shape.names)}, node_color="#cfe2f3",
                     node_size=1600, font_size=8, arrows=True, arrowsize=14, node_shape="o")
    ax.set_title(title or shape.summary())
    ax.axis("off")


def topology(graph) -> Topology:
    """Read nodes, edges and kernel names of a captured graph (see graph_handle for what it accepts)."""
    driver = _driver()
    g = driver.CUgraph(graph_handle(graph))
    count = _ok(driver.cuGraphGetNodes(g, 0), "cuGraphGetNodes")[1]
    nodes = _ok(driver.cuGraphGetNodes(g, count), "cuGraphGetNodes")[0] if count else []
    index = {int(node): i for i, node in enumerate(nodes)}
    kinds, names = [], []
    for node in nodes:
        kind = _ok(driver.cuGraphNodeGetType(node), "cuGraphNodeGetType")
        kinds.append(kind.name.removeprefix("CU_GRAPH_NODE_TYPE_"))
        if kind == driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            func = _ok(driver.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams").func
            name = _ok(driver.cuFuncGetName(func), "cuFuncGetName")
            names.append(short_kernel_name(name.decode() if isinstance(name, bytes) else str(name)))
        else:
            names.append(kinds[-1].lower())
    edge_count = _ok(driver.cuGraphGetEdges(g, 0), "cuGraphGetEdges")[-1]
    edges: list[tuple[int, int]] = []
    if edge_count:
        found = _ok(driver.cuGraphGetEdges(g, edge_count), "cuGraphGetEdges")
        edges = [(index[int(a)], index[int(b)]) for a, b in zip(found[0], found[1], strict=True)]
    return Topology(tuple(kinds), tuple(sorted(edges)), tuple(names))


def edge_types(graph) -> list[tuple[int, int, str]]:
    """Each edge of a captured graph as (from, to, "default" or "programmatic"), node indices as topology() has them."""
    driver = _driver()
    g = driver.CUgraph(graph_handle(graph))
    count = _ok(driver.cuGraphGetNodes(g, 0), "cuGraphGetNodes")[1]
    nodes = _ok(driver.cuGraphGetNodes(g, count), "cuGraphGetNodes")[0] if count else []
    index = {int(node): i for i, node in enumerate(nodes)}
    edge_count = _ok(driver.cuGraphGetEdges(g, 0), "cuGraphGetEdges")[-1]
    if not edge_count:
        return []
    found = _ok(driver.cuGraphGetEdges(g, edge_count), "cuGraphGetEdges")
    programmatic = driver.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    # A programmatic edge (PDL) lets its destination start before its source has finished.
    return sorted((index[int(a)], index[int(b)], "programmatic" if data.type == programmatic else "default")
                  for a, b, data in zip(found[0], found[1], found[2], strict=True))


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
