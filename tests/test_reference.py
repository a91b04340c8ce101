"""The reference run's report: executed in place, in the format CONTRIBUTING.md gives."""

import json

import nbformat

from launchlab_tools import reference_run as reference
from launchlab_tools.notebooks import source_sha256


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


def test_report_has_the_guide_fields_and_merges(tmp_path):
    (tmp_path / "notebooks").mkdir()
    paths = []
    for stem in ("00_demo", "01_demo"):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"x = '{stem}'")]
        paths.append(tmp_path / "notebooks" / f"{stem}.ipynb")
        nbformat.write(nb, paths[-1])
    stats = {f"notebooks/{p.name}": {"cells": 1, "failed": 0, "skipped": 0, "seconds": 0.5} for p in paths}
    first = reference.write_report(tmp_path, paths, stats, {"metrics": {"a_us": 1.0}, "units": {"a_us": "us"},
                                                            "claims": {"c1": {"held": True, "detail": "2 < 7"}}})
    reference.write_report(tmp_path, paths[1:], stats, {"metrics": {"b_us": 2.0}, "claims": {}})  # one re-run
    report = json.loads(first.read_text())
    assert set(report) == {"gpu", "driver", "cuda_runtime", "torch", "cupy", "python", "date", "notebooks",
                           "metrics", "units", "claims"}
    rel = "notebooks/00_demo.ipynb"
    assert report["notebooks"][rel] == {"source_sha256": source_sha256(paths[0]), **stats[rel]}
    assert report["metrics"] == {"a_us": 1.0, "b_us": 2.0} and report["units"] == {"a_us": "us"}
    assert report["claims"] == {"c1": {"held": True, "detail": "2 < 7"}}


def test_verdicts_are_read_from_checker_output():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check()")
    cell.outputs = [nbformat.v4.new_output("stream", text="PASS [Exercise 1: a] fine\nFAIL [Exercise 2: b] no\n")]
    nb.cells = [cell]
    assert reference.verdicts(nb) == {"Exercise 1: a": "PASS", "Exercise 2: b": "FAIL"}


def test_committed_reports_are_well_formed(root):
    for path in sorted((root / "reports" / "gpu").glob("*.json")):
        report = json.loads(path.read_text())
        assert report["gpu"] and report["notebooks"], path.name
        for path_in_report, entry in report["notebooks"].items():
            assert {"source_sha256", "cells", "failed", "skipped", "seconds"} <= set(entry) <= {
                "source_sha256", "cells", "failed", "skipped", "seconds", "verdicts", "check_trials", "claims",
                "metrics"}, path_in_report
            for key in ("claims", "metrics"):  # what a notebook says it wrote is in the report
                assert set(entry.get(key, [])) <= set(report[key]), (path_in_report, key)
        for name, value in report["claims"].items():
            assert isinstance(value, bool) or (isinstance(value, dict) and isinstance(value.get("held"), bool)), name
        assert set(report.get("units", {})) <= set(report["metrics"])


def test_collect_run_reads_the_gpu_run_file_and_keeps_traces(tmp_path, monkeypatch):
    import json

    from launchlab_tools import reference_run
    from launchlab.env import gpu_slug

    results = tmp_path / "results"
    (results / "traces").mkdir(parents=True)
    (results / "traces" / "02_step.json").write_text("{}")
    (results / "02_a_trace.json").write_text(json.dumps({"traceEvents": []}))  # sorts first, not the run
    (results / f"{gpu_slug()}.json").write_text(json.dumps({"metrics": {"x": 1.0}}))
    run = reference_run.collect_run(results, tmp_path / "kept")
    assert run == {"metrics": {"x": 1.0}}
    assert (tmp_path / "kept" / "traces" / "02_step.json").exists()
