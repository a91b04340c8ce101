"""The reference run's report: executed in place, in the format CONTRIBUTING.md gives."""

import json

import nbformat

from launchlab_tools import reference_run as reference


def test_execute_in_place_counts_cells_and_keeps_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('measured')"),
                nbformat.v4.new_code_cell("raise RuntimeError('boom')"),
                nbformat.v4.new_code_cell("print('needs more GPUs')", metadata={"tags": ["multi-gpu"]})]
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    stats = reference.execute_in_place(path, {"LAUNCHLAB_STRICT": "1"}, cell_timeout=60)
    assert stats["cells"] == 3 and stats["failed"] == 1 and stats["skipped"] >= 1
    executed = nbformat.read(path, as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "measured\n"


def test_verdicts_come_from_the_run_by_the_chapters_exercises():
    run = {"verdicts": {"04": {"2": {"passed": True}, "1": {"passed": False}}}}
    found = reference.verdicts(run, "solutions/04_cuda_graphs_stream_capture.ipynb")
    assert found == {"Exercise 1: capture a four-kernel pipeline": "FAIL", "Exercise 2: choose a bucket": "PASS"}
    assert reference.verdicts(run, "notebooks/04_cuda_graphs_stream_capture.ipynb") == {}


def test_committed_reports_follow_the_schema(root):
    from launchlab.report import Report, validate

    for path in sorted((root / "reports" / "gpu").glob("*.json")):
        data = json.loads(path.read_text())
        assert validate(data) == [], path.name
        report = Report.load(path)
        assert report.gpu and report.notebooks, path.name
        assert set(report.units) <= set(report.metrics)
