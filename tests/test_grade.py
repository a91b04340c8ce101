"""The grading command: a verdict per exercise for solutions, generated labs, wrong answers, hangs and crashes.

Lab 09's exercise 4 runs on a CPU, so these tests run its notebooks for real; its GPU exercises are graded
"needs a GPU" here (the tests grade as a machine without a GPU, whatever this one has).
"""

import json

import nbformat
import pytest

from launchlab import checking
from launchlab.env import repo_root
from launchlab_tools import grade

ROOT = repo_root()
SOLUTION = ROOT / "solutions" / "09_past_graphs.ipynb"
LAB = ROOT / "labs" / "09_past_graphs.ipynb"
RUNG = "Exercise 4: pick the rung"
GPU_EXERCISES = ["Exercise 1: place the wait and the trigger", "Exercise 2: a PDL chain in a captured graph",
                 "Exercise 3: the grid barrier of a persistent kernel"]


def planted(tmp_path, name: str, change) -> str:
    """A copy of solution 09 in a learner's folder `name`, next to nothing else, with `change(nb)` applied."""
    nb = nbformat.read(SOLUTION, as_version=4)
    change(nb)
    path = tmp_path / name / SOLUTION.name
    path.parent.mkdir()
    nbformat.write(nb, path)
    return path


def answer_cell(nb, marker: str):
    return next(c for c in nb.cells if c.cell_type == "code" and marker in c.source)


@pytest.mark.slow
def test_the_solution_passes_and_the_generated_lab_is_not_attempted():
    solved, lab = grade.grade(SOLUTION, have=0), grade.grade(LAB, have=0)
    assert solved["status"] == lab["status"] == "finished"
    assert solved["exercises"][RUNG]["verdict"] == grade.PASS
    assert lab["exercises"][RUNG]["verdict"] == grade.NOT_ATTEMPTED
    for graded in (solved, lab):
        assert [graded["exercises"][n]["verdict"] for n in GPU_EXERCISES] == [grade.NEEDS_GPU] * 3
        # The grader's verdict and the checker's message say it in the same words.
        assert grade.NEEDS_GPU == checking.NEEDS_GPU


@pytest.mark.slow
def test_a_wrong_answer_fails_with_the_checkers_detail_and_hint(tmp_path):
    def always_graph(nb):
        cell = answer_cell(nb, "def choose_rung")
        cell.source = cell.source.replace("    allowed = {", '    return "graph"\n    allowed = {')

    graded = grade.grade(planted(tmp_path, "wrong", always_graph), have=0)
    entry = graded["exercises"][RUNG]
    assert entry["verdict"] == grade.FAIL and entry["detail"] and entry["hint"]


@pytest.mark.slow
def test_a_notebook_that_hangs_is_reported_and_the_next_one_still_graded(tmp_path, capsys):
    def hangs(nb):
        answer_cell(nb, "def choose_rung").source += "\n\nimport time\ntime.sleep(600)"

    def dies(nb):
        answer_cell(nb, "def choose_rung").source += "\n\nimport os\nos._exit(3)"

    hung = grade.grade(planted(tmp_path, "hangs", hangs), timeout_s=20, have=0)
    assert hung["status"] == "timed out" and hung["exercises"][RUNG]["verdict"] == grade.TIMED_OUT
    out = tmp_path / "class.json"
    paths = [planted(tmp_path, "dies", dies), tmp_path / "09_past_graphs.ipynb", SOLUTION]
    paths[1].write_text("{ not a notebook")
    assert grade.main([*map(str, paths), "--json", str(out)]) == 1, "a notebook that could not be graded"
    grades = {g["notebook"]: g for g in json.loads(out.read_text())}
    died, unreadable, fine = (grades[str(p)] for p in paths)
    assert died["exercises"][RUNG]["verdict"] == grade.ERROR
    assert unreadable["status"].startswith("unreadable") and not unreadable["exercises"]
    assert fine["exercises"][RUNG]["verdict"] == grade.PASS
    table = capsys.readouterr().out
    assert "unreadable" in table and "E4: Exercise 4: pick the rung" in table


def test_verdicts_are_the_recorded_ones_by_the_models_exercises():
    from launchlab import course

    exercises = tuple(course.Exercise(n, name, f"check_{name}", f"{name}()") for n, name in
                      ((1, "one"), (2, "two"), (3, "three"), (4, "four"), (5, "five")))
    chapter = course.Chapter("98", "98_demo", "demo", "", "", course.Needs(), 10, exercises=exercises)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f():  # then run check.check_one(f) below\n    return 1"),
        *[nbformat.v4.new_code_cell(f"check.check_{name}(f)") for name in ("one", "two", "three", "four", "five")]])
    for i, cell in enumerate(nb.cells[1:], 1):
        cell.execution_count = i
    nb.cells[5].execution_count = None          # the run stopped before exercise 5
    recorded = {
        "1": {"passed": False, "detail": "not implemented yet (Exercise 1: one: replace this line with your code)",
              "hint": "write it"},
        "3": {"passed": False, "detail": "not implemented yet (Could not run 'aten::foo' with arguments from the "
              "'Meta' backend)", "hint": ""},
        "4": {"passed": True, "partial": True, "detail": "the eager part is right", "hint": ""},
    }
    graded = grade.verdicts_of(nb, chapter, recorded, have=0)
    assert graded["Exercise 1: one"]["verdict"] == grade.NOT_ATTEMPTED and graded["Exercise 1: one"]["hint"] == "write it"
    assert graded["Exercise 2: two"]["verdict"] == grade.ERROR        # ran, recorded nothing
    assert graded["Exercise 3: three"]["verdict"] == grade.FAIL       # a library's NotImplementedError is an attempt
    assert graded["Exercise 4: four"]["verdict"] == grade.PARTIAL     # a CPU judged only part of it
    assert graded["Exercise 5: five"]["verdict"] == grade.ERROR


@pytest.mark.slow
def test_a_cpu_partial_pass_is_graded_as_such_never_as_pass(monkeypatch, tmp_path, capsys):
    """Lab 04's exercise 4 judged where CUDA is hidden (its capture is checked only on a GPU): the grade, the class
    table and the printed notes say PASS (CPU part), and no column shows a bare PASS for it."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the notebook's process sees no GPU, whatever this machine has
    solution = ROOT / "solutions" / "04_cuda_graphs_stream_capture.ipynb"
    clip = "Exercise 4: repair a capture that synchronises"
    graded = grade.grade(solution, have=0)
    entry = graded["exercises"][clip]
    assert entry["verdict"] == grade.PARTIAL != grade.PASS, entry
    assert "CPU part only" in entry["detail"] and "capture checked only on a GPU" in entry["detail"], entry
    assert graded["exercises"]["Exercise 2: choose a bucket"]["verdict"] == grade.PASS  # a cpu exercise: whole
    header, row = grade.table([graded]).splitlines()[:2]
    column = header.split().index("E4") - 1  # the notebook column's header is one word, its cell too
    assert row.split("  ")[0].strip() == str(solution)
    cells = [c.strip() for c in row[len(str(solution)):].split("  ") if c.strip()]
    assert cells[column] == grade.PARTIAL, (header, row)
    out = tmp_path / "grades.json"
    assert grade.main([str(solution), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{clip}: {grade.PARTIAL}, not yet a PASS" in printed
    assert json.loads(out.read_text())[0]["exercises"][clip]["verdict"] == grade.PARTIAL


def test_the_table_shows_every_verdict_whole():
    graded = {"notebook": "a.ipynb", "seconds": 1.0, "status": "finished",
              "exercises": {"Exercise 1: one": {"verdict": grade.PARTIAL}, "Exercise 2: two": {"verdict": grade.PASS}}}
    header, row = grade.table([graded]).splitlines()[:2]
    assert grade.PARTIAL in row and row.index(grade.PARTIAL) + len(grade.PARTIAL) == header.index("E1") + 2


def test_a_json_path_in_no_folder_is_refused_before_grading(capsys):
    assert grade.main([str(SOLUTION), "--json", "/no/such/folder/grades.json"]) == 2
    assert "no folder /no/such/folder" in capsys.readouterr().err


def test_a_missing_notebook_is_a_clear_message(capsys):
    assert grade.main(["no/such/lab.ipynb"]) == 2
    assert "no such notebook: no/such/lab.ipynb" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_every_exercise_of_a_solution_passes_and_none_of_its_lab_is_attempted():
    solved = grade.grade(ROOT / "solutions" / "10_graphs_in_real_code.ipynb")
    lab = grade.grade(ROOT / "labs" / "10_graphs_in_real_code.ipynb")
    assert len(solved["exercises"]) == len(lab["exercises"]) == 4
    assert {e["verdict"] for e in solved["exercises"].values()} == {grade.PASS}, solved
    assert {e["verdict"] for e in lab["exercises"].values()} == {grade.NOT_ATTEMPTED}, lab
