"""launchlab.graphs: readable kernel names, topology shapes, stream handles; on a GPU, real captures."""

from pathlib import Path

import pytest

from launchlab import graphs


def test_short_kernel_name_reads_mangled_and_plain_names():
    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEEEEviT0_T1_"
    assert graphs.short_kernel_name(mangled) == "at::native::vectorized_elementwise_kernel"
    assert graphs.short_kernel_name("_Z7add_onePfi") == "add_one"
    assert graphs.short_kernel_name("add_one") == "add_one"


def test_topology_knows_a_chain_from_a_diamond():
    chain = graphs.Topology(("KERNEL",) * 3, ((0, 1), (1, 2)), ("a", "b", "c"))
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

    class ExecutableLike:  # cuda.core's executable Graph: a handle, but no nodes to read
        handle = 55

        def launch(self, stream):
            pass

    class DefinitionLike:
        handle = 66

        def nodes(self):
            return set()

    assert graphs.graph_handle(DefinitionLike()) == 66
    with pytest.raises(TypeError, match="not the executable Graph"):
        graphs.graph_handle(ExecutableLike())


def test_edge_types_names_programmatic_edges_in_topologys_node_order(monkeypatch):
    class EdgeData:
        def __init__(self, kind: int):
            self.type, self.from_port, self.to_port = kind, kind, 0

    class Driver:  # what cuda.bindings answers for a three-node chain whose second edge is programmatic
        class CUgraphDependencyType:
            CU_GRAPH_DEPENDENCY_TYPE_DEFAULT, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 0, 1

        nodes, edges = [30, 10, 20], ([30, 10], [10, 20], [EdgeData(0), EdgeData(1)])

        @staticmethod
        def CUgraph(handle):
            return handle

        @classmethod
        def cuGraphGetNodes(cls, graph, count):
            return 0, cls.nodes[:count], len(cls.nodes)

        @classmethod
        def cuGraphGetEdges(cls, graph, count):
            return (0, *(part[:count] for part in cls.edges), len(cls.edges[0]))

    monkeypatch.setattr(graphs, "_driver", lambda: Driver)
    assert graphs.edge_types(1234) == [(0, 1, "default"), (1, 2, "programmatic")]
    Driver.edges = ([], [], [])
    assert graphs.edge_types(1234) == []


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


DIAMOND_DOT = Path(__file__).parent / "data" / "diamond.dot"  # a CuPy capture's DOT dump, from the GPU


def test_parse_dot_reads_a_stored_dump_of_a_captured_diamond():
    shape = graphs.parse_dot(DIAMOND_DOT.read_text())
    assert shape.names == ("stage_a", "stage_b", "stage_c", "stage_d")
    assert shape.depends_on() == {"stage_a": set(), "stage_b": {"stage_a"}, "stage_c": {"stage_a"},
                                  "stage_d": {"stage_b", "stage_c"}}
    assert not shape.is_chain()
    with pytest.raises(ValueError, match="no graph nodes"):
        graphs.parse_dot("digraph dot { }")


def test_equivalent_ignores_node_order_but_not_edges_or_names():
    shape = graphs.parse_dot(DIAMOND_DOT.read_text())
    reordered = graphs.Topology(("KERNEL",) * 4, ((3, 1), (3, 2), (1, 0), (2, 0)),
                                ("stage_d", "stage_b", "stage_c", "stage_a"))
    chain = graphs.Topology(("KERNEL",) * 4, ((0, 1), (1, 2), (2, 3)), shape.names)
    renamed = graphs.Topology(shape.kinds, shape.edges, ("stage_a", "stage_b", "stage_c", "other"))
    with_join = graphs.Topology(("KERNEL", "KERNEL", "KERNEL", "EMPTY", "KERNEL"),
                                ((0, 1), (0, 2), (1, 3), (2, 3), (3, 4)), (*shape.names[:3], "empty", "stage_d"))
    assert graphs.equivalent(shape, reordered)
    assert not graphs.equivalent(shape, chain)
    assert not graphs.equivalent(shape, renamed)
    assert not graphs.equivalent(shape, with_join)
    with pytest.raises(ValueError, match="not unique"):
        graphs.Topology(("KERNEL",) * 2, ((0, 1),), ("k", "k")).depends_on()


def test_draw_puts_each_dependency_level_on_its_own_row():
    import matplotlib

    matplotlib.use("Agg")
    from launchlab import plots

    shape = graphs.parse_dot(DIAMOND_DOT.read_text())
    fig, ax = plots.axes("diamond", "", "")
    graphs.draw(ax, shape)
    heights = {text.get_text(): round(text.get_position()[1], 3) for text in ax.texts}
    assert heights["stage_b"] == heights["stage_c"]
    assert heights["stage_a"] > heights["stage_b"] > heights["stage_d"]
    assert ax.get_title() == shape.summary()
