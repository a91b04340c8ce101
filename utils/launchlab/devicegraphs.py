"""Chapter 06's kit: plumbing for graphs the GPU launches itself and for conditional nodes (feature checks,
device-runtime compilation, waiting on a stream with a deadline).

The lessons (the kernels that call cudaGraphLaunch, the graphs, the loops) stay in chapter 06; this module
holds what the chapter and its lab checkers share. Experiments that may corrupt a CUDA context run in a child
process: launchlab.child.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from . import graphs
from .env import CellSkipped, skip_cell

# The driver version (cuDriverGetVersion: 1000 * major + 10 * minor) each feature first shipped in.
FEATURES = {
    "device graph launch": 12000,  # cudaGraphLaunch from a kernel, CUDA 12.0
    "conditional nodes": 12040,  # IF and WHILE nodes set by cudaGraphSetConditional, as cuda.core builds them
}
INSTANTIATE_DEVICE_LAUNCH = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
# The CUDA toolkit's headers, as the README says: under CUDA_PATH (or CUDA_HOME), else the usual install place.
CUDA_INCLUDE = str(Path(os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "include")


def cuda_include_dirs() -> list[str]:
    """The toolkit's header folders that exist here: include/, and include/cccl/, where CUDA 13 keeps the C++
    library (<cuda/atomic>, <nv/target>) that cooperative_groups.h and cuda::atomic_ref need."""
    return [d for d in (CUDA_INCLUDE, str(Path(CUDA_INCLUDE) / "cccl")) if Path(d).is_dir()]


class FeatureMissing(CellSkipped):
    """A CUDA feature this chapter needs is missing here; IPython shows one line, not a traceback."""


def driver_version() -> int:
    """The CUDA driver's version as cuDriverGetVersion reports it (13000 for 13.0), 0 without a driver."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    err, version = driver.cuDriverGetVersion()
    return int(version) if int(err) == 0 else 0


def version_text(version: int) -> str:
    """'12.4' for 12040."""
    return f"{version // 1000}.{version % 1000 // 10}"


def missing(feature: str, version: int | None = None) -> str | None:
    """Why `feature` cannot run on this driver, with what to do; None when it can."""
    needed = FEATURES[feature]
    version = driver_version() if version is None else version
    if version >= needed:
        return None
    have = f"CUDA driver {version_text(version)}" if version else "no CUDA driver"
    return (f"{feature} needs a CUDA {version_text(needed)} driver or newer; this machine has {have}. "
            "Update the NVIDIA driver to run this part; its stored outputs show the reference run.")


def require(feature: str) -> None:
    """Raise FeatureMissing (shown as one line) unless this driver has `feature`; later cells then say why they
    stop in one line too, instead of a traceback about a name this cell never defined."""
    reason = missing(feature)
    if reason:
        skip_cell(reason, FeatureMissing)


def compile_with_device_runtime(source: str):
    """A CuPy RawModule of `source` built as relocatable device code and linked with the device runtime."""
    import cupy as cp
    from cupy.cuda.compiler import CompileException

    module = cp.RawModule(code=source, options=("-rdc=true",))
    try:
        module.compile()
    except CompileException:
        raise  # an error in the source itself: NVRTC's log says where
    except Exception as exc:  # the link step: say which part of the toolkit is missing
        raise FeatureMissing(
            f"linking kernels that launch graphs failed ({str(exc).strip().splitlines()[0][:160]}). They are "
            "linked with the CUDA device runtime (libcudadevrt.a) from the CUDA toolkit: install the toolkit "
            "matching your driver and set CUDA_PATH to it.") from None
    return module


def device_launchable(graph) -> bool:
    """True if an executable graph (cuda.core Graph, or a CUgraphExec address) was instantiated for device launch."""
    from cuda.bindings import driver

    handle = graph.handle if hasattr(graph, "handle") else driver.CUgraphExec(int(graph))
    err, flags = driver.cuGraphExecGetFlags(handle)
    if int(err) != 0:
        raise RuntimeError(f"cuGraphExecGetFlags failed with {err.name}: pass an executable graph, not a definition")
    return bool(int(flags) & INSTANTIATE_DEVICE_LAUNCH)


def cuda_error_name(code: int) -> str:
    """'cudaErrorInvalidValue' for 1: the name of a cudaError_t a kernel stored."""
    from cuda.bindings import runtime

    try:
        return runtime.cudaError_t(int(code)).name
    except ValueError:
        return f"cudaError {int(code)}"


def wait(stream, timeout_s: float = 30.0, what: str = "the GPU work") -> float:
    """Wait for `stream` without hanging: seconds waited, or TimeoutError after `timeout_s`."""
    from cuda.bindings import driver

    from .graphs import stream_handle

    handle = driver.CUstream(stream_handle(stream))
    start = time.perf_counter()
    while True:
        result = driver.cuStreamQuery(handle)
        err = result[0] if isinstance(result, tuple) else result
        if err != driver.CUresult.CUDA_ERROR_NOT_READY:
            break
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(
                f"{what} did not finish within {timeout_s:.0f} s: a loop on the GPU is probably relaunching "
                "itself without reaching its stop condition. Restart the kernel (the GPU work cannot be "
                "cancelled from this process) and check the loop's exit test and its fuse.")
        time.sleep(0)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed on the GPU with {err.name}")
    return time.perf_counter() - start


# ---- conditional nodes read back ---------------------------------------------------------------------------

DOT_CONDITIONAL_PARAMS = 1 << 15  # CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS: bodies and types in the dump


@dataclass(frozen=True)
class Conditional:
    """A conditional node as the driver's DOT dump shows it: its type and, per branch, the body's nodes."""

    kind: str  # "WHILE", "IF" or "SWITCH"
    bodies: tuple[tuple[tuple[str, str], ...], ...]  # per branch: (kind, name) of each node of its body graph

    def body_summary(self, branch: int = 0) -> str:
        """'1 kernel node (halve_all)' or '2 nodes: kernel halve_all, kernel halve_all'."""
        nodes = self.bodies[branch] if branch < len(self.bodies) else ()
        if not nodes:
            return "no nodes"
        names = ", ".join(f"{kind.lower()} {name}" if kind == "KERNEL" else kind.lower() for kind, name in nodes)
        return f"{len(nodes)} node{'s' if len(nodes) > 1 else ''} ({names})"


_DOT_NODE_STATEMENT = re.compile(r'"(?P<id>[^"]+)"\[(?P<attrs>(?:[^\]"]|"(?:[^"\\]|\\.)*")*)\]', re.S)
_DOT_LABEL = re.compile(r'label="((?:[^"\\]|\\.)*)"', re.S)
_DOT_BODY = re.compile(r"\|\s*(graph_\w+)\s*\}")


def _dot_clusters(text: str) -> dict[str, str]:
    """Each `subgraph cluster_* { label="graph_N" ... }` of a DOT dump: graph name to its text (braces inside
    quoted labels skipped; a nested cluster stays in its parent's text, told apart later by node ids)."""
    clusters, i = {}, 0
    while (start := text.find("subgraph cluster_", i)) != -1:
        first = text.find("{", start)
        if first == -1:
            break
        depth, quoted, j = 0, False, first
        while j < len(text):
            c = text[j]
            if quoted:
                if c == "\\":
                    j += 1
                elif c == '"':
                    quoted = False
            elif c == '"':
                quoted = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        body = text[first + 1:j]
        name = re.match(r'\s*label="([^"]+)"', body)
        if name:
            clusters[name.group(1)] = body
        i = first + 1
    return clusters


def conditionals_from_dot(text: str) -> list[Conditional] | None:
    """The conditional nodes of a graph's top level, read from a DOT dump written with DOT_CONDITIONAL_PARAMS;
    None when the dump does not show them (a driver that writes another format): then judge by behaviour."""
    clusters = _dot_clusters(text)
    if not clusters:
        return None
    nodes: dict[str, list[tuple[str, str, str]]] = {}  # graph -> (kind, name, label) of each of its own nodes
    for graph, body in clusters.items():
        found = []
        for node in _DOT_NODE_STATEMENT.finditer(body):
            if not node["id"].startswith(f"{graph}_node_"):
                continue  # a node of a nested cluster
            label_match = _DOT_LABEL.search(node["attrs"])
            label = (label_match.group(1) if label_match else "").replace("\\n", "\n")
            lines = [line.strip() for line in label.split("\n") if line.strip()]
            if 'shape="octagon"' in node["attrs"]:
                found.append(("KERNEL", graphs.short_kernel_name(lines[1]) if len(lines) > 1 else "kernel", label))
            else:
                words = re.findall(r"[A-Z_]{3,}", label)
                kind = words[0] if words else "UNKNOWN"
                found.append((kind, kind.lower(), label))
        nodes[graph] = found
    referenced = {body for found in nodes.values() for _, _, label in found for body in _DOT_BODY.findall(label)}
    tops = [g for g in clusters if g not in referenced]
    if len(tops) != 1:
        return None
    result = []
    for kind, _, label in nodes[tops[0]]:
        if kind != "CONDITIONAL":
            continue
        ctype = re.search(r"Conditional Type\s*\|\s*(\w+)", label)
        bodies = _DOT_BODY.findall(label)
        if not ctype or not bodies or any(b not in nodes for b in bodies):
            return None
        result.append(Conditional(ctype.group(1).upper(), tuple(tuple((k, n) for k, n, _ in nodes[b]) for b in bodies)))
    return result


def conditionals(graph) -> list[Conditional] | None:
    """The conditional nodes at the top level of a graph (a cuda.core GraphBuilder after end_building(), or
    anything graphs.graph_handle reads), each with its type and body; None where the driver's dump hides them."""
    import os
    import tempfile

    from cuda.bindings import driver

    handle = driver.CUgraph(graphs.graph_handle(graph))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "graph.dot")
        result = driver.cuGraphDebugDotPrint(handle, path.encode(), DOT_CONDITIONAL_PARAMS)
        if int(result[0] if isinstance(result, tuple) else result) != 0 or not os.path.exists(path):
            return None
        with open(path) as dump:
            return conditionals_from_dot(dump.read())
