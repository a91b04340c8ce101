"""Chapter 06's kit: plumbing for graphs the GPU launches itself and for conditional nodes (feature checks,
device-runtime compilation, waiting on a stream with a deadline).

The lessons (the kernels that call cudaGraphLaunch, the graphs, the loops) stay in chapter 06; this module
holds what the chapter and its lab checkers share. Experiments that may corrupt a CUDA context run in a child
process: launchlab.child.
"""

from __future__ import annotations

import time

from .env import CellSkipped, skip_cell

# The driver version (cuDriverGetVersion: 1000 * major + 10 * minor) each feature first shipped in.
FEATURES = {
    "device graph launch": 12000,  # cudaGraphLaunch from a kernel, CUDA 12.0
    "conditional nodes": 12040,  # IF and WHILE nodes set by cudaGraphSetConditional, as cuda.core builds them
}
INSTANTIATE_DEVICE_LAUNCH = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
CUDA_INCLUDE = "/usr/local/cuda/include"


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
