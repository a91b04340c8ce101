"""launchlab.graphs: readable kernel names, topology shapes, stream handles; on a GPU, real captures."""

import pytest

from launchlab import graphs


def test_short_kernel_name_reads_mangled_and_plain_names():
    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEEEEviT0_T1_"
    assert graphs.short_kernel_name(mangled) == "at::native::vectorized_elementwise_kernel"
    assert graphs.short_kernel_name("_Z7add_onePfi") == "add_one"
    assert graphs.short_kernel_name("add_one") == "add_one"


def test_topology_knows_a_chain_from_a_diamond():
    chain = graphs.Topology(("KERNEL",) * 3, ((0, 1), (1, 2)), ("k",) * 3)
    diamond = graphs.Topology(("KERNEL",) * 4, ((0, 1), (0, 2), (1, 3), (2, 3)), ("k",) * 4)
    two_lines = graphs.Topology(("KERNEL",) * 4, ((0, 1), (2, 3)), ("k",) * 4)
    assert chain.is_chain() and not diamond.is_chain() and not two_lines.is_chain()
    assert graphs.Topology(("KERNEL",), (), ("k",)).is_chain()
    assert chain.summary() == "3 nodes (3 KERNEL), 2 edges, a straight chain"
    assert diamond.summary().endswith("not a chain")


def test_stream_handle_accepts_each_library_shape():
    class TorchLike:
        cuda_stream = 11

    class CupyLike:
        ptr = 22

    class ProtocolLike:
        def __cuda_stream__(self):
            return (0, 33)

    assert [graphs.stream_handle(s) for s in (TorchLike(), CupyLike(), ProtocolLike(), 44)] == [11, 22, 33, 44]
    with pytest.raises(TypeError, match="cannot find a CUDA stream"):
        graphs.stream_handle(object())
    with pytest.raises(TypeError, match="cannot find a CUgraph"):
        graphs.graph_handle(object())


def test_first_error_line_names_the_cause():
    try:
        try:
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        except RuntimeError:
            raise RuntimeError("operation failed due to a previous error during capture") from None
    except RuntimeError as exc:
        assert graphs.first_error_line(exc) == ("RuntimeError: operation failed due to a previous error during "
                                                "capture")
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise RuntimeError("second")  # noqa: B904  (the implicit context is what capture errors carry)
    except RuntimeError as exc:
        assert graphs.first_error_line(exc) == "RuntimeError: second (after ValueError: first)"


@pytest.mark.gpu
def test_topology_of_real_captures_and_cleanup_of_an_open_capture():
    import cupy as cp
    import torch

    kernel = cp.RawKernel('extern "C" __global__ void k(float* x) { x[0] += 1.0f; }', "k")
    x = cp.zeros(1, dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for _ in range(5):
            kernel((1,), (1,), (x,))
        graph = stream.end_capture()
    shape = graphs.topology(graph)
    assert shape.nodes == 5 and shape.is_chain() and shape.kernels == ("k",) * 5

    torch_graph = torch.cuda.CUDAGraph(keep_graph=True)
    t = torch.zeros(4, device="cuda")
    with torch.cuda.graph(torch_graph):
        t.add_(1)
        t.mul_(2)
    assert graphs.topology(torch_graph).nodes == 2

    def leave_capture_open():
        stream.begin_capture()
        kernel((1,), (1,), (x,), stream=stream)
        stream.synchronize()  # invalidates the capture and raises; nobody ends it

    attempt = graphs.attempt_capture("sync left open", leave_capture_open, stream)
    assert attempt.error and "StreamCapture" in attempt.error
    assert attempt.left_open and attempt.healthy
    assert graphs.capture_status(stream) == "none"
    x += 1  # the stream works again
    stream.synchronize()
