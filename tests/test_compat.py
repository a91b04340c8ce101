"""The version adapter for torch._dynamo.explain, on this machine's torch."""

from launchlab.compat import explain


def test_explain_counts_a_print_break():
    import torch

    def f(x):
        x = x + 1
        print("side effect")  # a graph break
        return x * 2

    report = explain(f, torch.ones(4))
    assert report.graph_count == 2
    assert report.break_count == 1
    assert any("print" in r.lower() or "builtin" in r.lower() for r in report.break_reasons), report


def test_explain_counts_no_break_in_a_clean_function():
    import torch

    report = explain(lambda x: (x + 1).relu() * 2, torch.ones(4))
    assert (report.graph_count, report.break_count) == (1, 0)


def test_small_adapters():
    from launchlab import compat

    assert compat.recompile_limit() >= 1
    assert compat.first_line("Headline\n  Explanation: more") == "Headline"
    assert compat.cudagraph_skips() >= 0
