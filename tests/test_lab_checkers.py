"""Every checker fails on its lab stub and passes on its solution; on the GPU, broken timers fail too."""

import json
import os
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from launchlab import course
from launchlab.checking import FAIL_MARK, PASS_MARK
from launchlab.env import gpu_count, gpu_slug, tier_gpus
from launchlab.report import Report, report_path
from launchlab_tools.grade import exercise_cells
from launchlab_tools.labs import make_lab
from launchlab_tools.notebooks import course_notebooks, needs_gpus, runs_gpu_cells, source_sha256
from launchlab_tools.reference_run import verdicts

SOLUTIONS = course_notebooks(dirs=("solutions",))


def run_and_collect_verdicts(nb, path: Path, have: int) -> dict[str, str]:
    """Execute the cells a machine with `have` GPUs can run (errors allowed); return {exercise: PASS or FAIL} as
    the checkers recorded them in the run."""
    runnable = nbformat.from_dict(nb)
    runnable.cells = [c for c in runnable.cells if c.cell_type != "code" or needs_gpus(c) <= have]
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("LAUNCHLAB_RESULTS_DIR")
        os.environ["LAUNCHLAB_RESULTS_DIR"] = tmp     # the kernel inherits it and records its verdicts there
        try:
            NotebookClient(runnable, timeout=600, allow_errors=True, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            os.environ.pop("LAUNCHLAB_RESULTS_DIR") if old is None else os.environ.update(LAUNCHLAB_RESULTS_DIR=old)
        run_file = Path(tmp) / f"{gpu_slug()}.json"
        run = json.loads(run_file.read_text()) if run_file.exists() else {}
    return verdicts(run, f"solutions/{path.name}")


def runnable_exercises(nb, path: Path, have: int) -> set[str]:
    """Exercises whose checker cell a machine with `have` GPUs can run."""
    chapter = course.chapter_of_path(path.name)
    return {ex.heading for ex, index in exercise_cells(nb, chapter).items() if needs_gpus(nb.cells[index]) <= have}


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_checkers_pass_on_solutions_and_fail_on_stubs(solution, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")  # a failed check prints FAIL instead of stopping the run
    have = tier_gpus()
    nb = nbformat.read(solution, as_version=4)
    expected = runnable_exercises(nb, solution, have)
    if not expected:
        pytest.skip(f"no exercise of {solution.name} can be checked with {have} GPUs")
    solved = run_and_collect_verdicts(nb, solution, have)
    stubbed = run_and_collect_verdicts(make_lab(nb, f"solutions/{solution.name}"), solution, have)
    assert solved == dict.fromkeys(expected, PASS_MARK), f"solution verdicts: {solved}"
    assert stubbed == dict.fromkeys(expected, FAIL_MARK), f"lab verdicts: {stubbed}"


# The GPU tier runs each solution once, in the reference run (strictly: a FAIL fails its cell), and these tests
# read the verdicts it recorded in this GPU's report; only the labs are executed here, in parallel (make test-gpu).
@pytest.mark.gpu
@pytest.mark.labs
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_gpu_checkers_passed_the_reference_run_and_fail_on_stubs(solution, root, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    have = gpu_count()
    nb = nbformat.read(solution, as_version=4)
    expected = runnable_exercises(nb, solution, have)
    if not runs_gpu_cells(nb, have):
        pytest.skip(f"the GPU cells of {solution.name} need more than {have} GPUs; the CPU tier checks the rest")
    rel = solution.relative_to(root).as_posix()
    path = report_path(root)
    entry = Report.load(path).notebook(rel) if path.exists() else None
    assert entry and entry["source_sha256"] == source_sha256(solution), (
        f"{rel} has no current run in {path.name}: run `make reference NOTEBOOKS={rel}` (make test-gpu does)")
    assert entry.get("verdicts") == dict.fromkeys(expected, PASS_MARK), f"reference-run verdicts: {entry.get('verdicts')}"
    stubbed = run_and_collect_verdicts(make_lab(nb, rel), solution, have)
    assert stubbed == dict.fromkeys(expected, FAIL_MARK), f"lab verdicts: {stubbed}"


@pytest.mark.gpu
def test_lab03_graph_check_rejects_a_silent_fallback(monkeypatch):
    import torch

    from launchlab.chapters.ch03 import checkers as ch03

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    assert not ch03.check_really_graphed(lambda fn: torch.compile(fn, mode="reduce-overhead"))
