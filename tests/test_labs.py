"""Lab generation from solutions (launchlab.labs), and the checker framework's verdicts (launchlab.checking)."""

import nbformat
import pytest

from launchlab.checking import CheckFailed, exercise, within
from launchlab_tools import labs
from launchlab_tools.labs import LabError, make_lab, strip_solutions


def solution_notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_stub_keeps_indentation_and_names_the_exercise():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n\nprint('after')"
    out = strip_solutions(source, "Exercise 3: add one", "sol.ipynb, cell 2")
    assert out.splitlines() == [
        "def f(x):",
        '    raise NotImplementedError("Exercise 3: add one: replace this line with your code")',
        "",
        "print('after')",
    ]
    namespace = {}
    exec(out.replace("print('after')", ""), namespace)
    with pytest.raises(NotImplementedError, match="Exercise 3"):
        namespace["f"](1)


def test_missing_end_marker_names_notebook_cell_and_line():
    with pytest.raises(LabError, match=r"solutions/00_x.ipynb, cell 4, line 2: '### BEGIN SOLUTION' has no"):
        strip_solutions("x = 1\n### BEGIN SOLUTION\ny = 2", "Exercise 1", "solutions/00_x.ipynb, cell 4")


def test_end_without_begin_is_an_error():
    with pytest.raises(LabError, match="without a"):
        strip_solutions("### END SOLUTION", "Exercise 1", "nb, cell 1")


def test_make_lab_clears_outputs_and_requires_an_exercise_heading():
    code = nbformat.v4.new_code_cell("### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", text="42\n")]
    shown = nbformat.v4.new_code_cell("print(1)", execution_count=4)
    shown.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    lab = make_lab(solution_notebook(nbformat.v4.new_markdown_cell("## Exercise 7: the answer"), code, shown), "s")
    assert lab.cells[1].source.startswith('raise NotImplementedError("Exercise 7: the answer')
    assert all(c.outputs == [] and c.execution_count is None for c in lab.cells[1:])
    with pytest.raises(LabError, match="no '## Exercise ...' markdown heading"):
        make_lab(solution_notebook(code), "solutions/01_x.ipynb")


def test_committed_labs_are_generated_from_solutions(root):
    assert labs.generate(root, check=True) == [], "run `make labs` and commit labs/"


def test_every_solution_block_becomes_a_stub(root):
    for solution in sorted((root / "solutions").glob("*.ipynb")):
        lab = nbformat.read(root / "labs" / solution.name, as_version=4)
        sol = nbformat.read(solution, as_version=4)
        blocks = sum(c.source.count(labs.BEGIN) for c in sol.cells if c.cell_type == "code")
        stubs = sum(c.source.count("raise NotImplementedError(") for c in lab.cells if c.cell_type == "code")
        assert blocks > 0 and stubs == blocks, solution.name
        assert not any(labs.BEGIN in c.source or labs.END in c.source for c in lab.cells)


def make_checker():
    @exercise("Exercise 9: double", "multiply by two")
    def check_double(fn):
        return within(fn(21), 42, 0.01, "fn(21)")

    return check_double


def test_checker_passes_a_correct_answer(capsys):
    assert make_checker()(lambda x: 2 * x).passed
    assert capsys.readouterr().out.startswith("PASS [Exercise 9: double] fn(21): yours 42")


@pytest.mark.parametrize("answer, detail", [
    (lambda x: x, "fn(21): yours 21, expected 42"),
    (lambda x: (_ for _ in ()).throw(NotImplementedError("Exercise 9: double")), "not implemented yet"),
    (lambda x: x / 0, "your code raised ZeroDivisionError"),
])
def test_checker_fails_wrong_answers_stubs_and_errors_with_a_hint(answer, detail, capsys, monkeypatch):
    monkeypatch.delenv("LAUNCHLAB_STRICT", raising=False)
    verdict = make_checker()(answer)
    out = capsys.readouterr().out
    assert not verdict.passed and detail in verdict.detail
    assert out.startswith("FAIL [Exercise 9: double]") and "Hint: multiply by two" in out
    assert "Traceback" not in out


def test_failed_check_raises_under_strict(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    with pytest.raises(CheckFailed, match="Exercise 9"):
        make_checker()(lambda x: x)


def test_a_strict_failure_of_a_drawn_scenario_says_how_to_replay_it(monkeypatch):
    from launchlab.checking import rng

    @exercise("Exercise 9: double", "multiply by two")
    def check_double_drawn(fn):
        x = rng().randrange(1, 100)
        return within(fn(x), 2 * x, 0.01, f"fn({x})")

    monkeypatch.setenv("LAUNCHLAB_STRICT", "1")
    with pytest.raises(CheckFailed, match=r"\(seed (\d+): check\.check_double_drawn\(your_answer, seed=\1\) replays it\)"):
        check_double_drawn(lambda x: x)


def test_a_labs_stub_is_judged_under_the_models_heading(results_dir, monkeypatch, capsys):
    """A generated lab's stub raises with the model's heading; the verdict stored says so, and the grader calls it
    not attempted."""
    from launchlab import course, results
    from launchlab.chapters.ch04 import checkers as ch04
    from launchlab_tools.grade import NOT_ATTEMPTED, _verdict

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    ex = course.chapter("04").exercise(2)
    stub = strip_solutions(f"def bucket_for(batch, buckets):\n    {labs.BEGIN}\n    return batch\n    {labs.END}",
                           ex.heading, "lab, cell 1")
    namespace = {}
    exec(stub, namespace)
    verdict = ch04.check_bucket_for(namespace["bucket_for"])
    assert capsys.readouterr().out.startswith(f"FAIL [{ex.heading}] not implemented yet")
    recorded = results.load_run()["verdicts"]["04"]["2"]
    assert not verdict and recorded["detail"] == verdict.detail and _verdict(ex, recorded) == NOT_ATTEMPTED


def test_within_factor_accepts_inside_and_rejects_outside():
    from launchlab.checking import CheckFailed, within_factor

    assert "ratio 2.00, 0.5 to 2 allowed" in within_factor(2048, 1024, 2, "flat until batch")
    with pytest.raises(CheckFailed, match="ratio 0.25"):
        within_factor(256, 1024, 2, "flat until batch")


def test_graph_and_output_names_what_a_capture_exercise_must_return():
    from launchlab.checking import CheckFailed, graph_and_output

    with pytest.raises(CheckFailed, match=r"return \(graph, out\).*not tuple"):
        graph_and_output(("not a graph", 1))
    with pytest.raises(CheckFailed, match="not NoneType"):
        graph_and_output(None)
