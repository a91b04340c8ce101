"""Every checker fails on its lab stub and passes on its solution; on the GPU, broken timers fail too."""

import json
import re

import nbformat
import pytest
from nbclient import NotebookClient

from launchlab import results
from launchlab.checking import FAIL_MARK, PASS_MARK
from launchlab.env import gpu_count, gpu_slug, tier_gpus
from launchlab_tools.labs import make_lab
from launchlab_tools.notebooks import course_notebooks, needs_gpus, runs_gpu_cells, source_sha256
from launchlab_tools.reference_run import verdicts

SOLUTIONS = course_notebooks(dirs=("solutions",))
EXERCISE = re.compile(r"^#+\s*(Exercise\b.*?)\s*$", re.MULTILINE)


def run_and_collect_verdicts(nb, cwd, have: int) -> dict[str, str]:
    """Execute the cells a machine with `have` GPUs can run (errors allowed); return {exercise: PASS or FAIL}."""
    runnable = nbformat.from_dict(nb)
    runnable.cells = [c for c in runnable.cells if c.cell_type != "code" or needs_gpus(c) <= have]
    NotebookClient(runnable, timeout=600, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return verdicts(runnable)


def runnable_exercises(nb, have: int) -> set[str]:
    """Exercises whose checker cell a machine with `have` GPUs can run."""
    current, names = None, set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = EXERCISE.findall(cell.source)
            current = found[-1] if found else current
        elif current and ".check_" in cell.source and needs_gpus(cell) <= have:
            names.add(current)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_checkers_pass_on_solutions_and_fail_on_stubs(solution, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")  # a failed check prints FAIL instead of stopping the run
    have = tier_gpus()
    nb = nbformat.read(solution, as_version=4)
    expected = runnable_exercises(nb, have)
    if not expected:
        pytest.skip(f"no exercise of {solution.name} can be checked with {have} GPUs")
    solved = run_and_collect_verdicts(nb, solution.parent, have)
    stubbed = run_and_collect_verdicts(make_lab(nb, solution.name), solution.parent, have)
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
    expected = runnable_exercises(nb, have)
    if not runs_gpu_cells(nb, have):
        pytest.skip(f"the GPU cells of {solution.name} need more than {have} GPUs; the CPU tier checks the rest")
    rel = solution.relative_to(root).as_posix()
    report = results.reports_dir(root) / f"{gpu_slug()}.json"
    entry = (json.loads(report.read_text()) if report.exists() else {}).get("notebooks", {}).get(rel)
    assert entry and entry["source_sha256"] == source_sha256(solution), (
        f"{rel} has no current run in {report.name}: run `make reference NOTEBOOKS={rel}` (make test-gpu does)")
    assert entry.get("verdicts") == dict.fromkeys(expected, PASS_MARK), f"reference-run verdicts: {entry.get('verdicts')}"
    stubbed = run_and_collect_verdicts(make_lab(nb, solution.name), solution.parent, have)
    assert stubbed == dict.fromkeys(expected, FAIL_MARK), f"lab verdicts: {stubbed}"


@pytest.mark.gpu
def test_lab03_graph_check_rejects_a_silent_fallback(monkeypatch):
    import torch

    from launchlab.chapters.ch03 import checkers as ch03

    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    assert not ch03.check_really_graphed(lambda fn: torch.compile(fn, mode="reduce-overhead"))
