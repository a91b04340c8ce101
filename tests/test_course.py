"""The course model: every chapter's facts declared once, read by every tool; the package split by audience."""

import importlib
import json
import subprocess
import sys
import textwrap

import nbformat
import pytest

from launchlab import course, results
from launchlab.report import load_all
from launchlab_tools import figures, guide, labs, site_toc, start_page
from launchlab_tools.notebooks import course_notebooks


def test_every_chapter_loads_and_numbers_follow_on():
    numbers = [ch.number for ch in course.chapters()]
    assert numbers == [f"{n:02d}" for n in range(len(numbers))], numbers


def test_each_chapter_has_its_three_notebooks_and_nothing_else_is_a_chapter(root):
    declared = {rel for ch in course.chapters() for rel in ch.notebook_paths()}
    on_disk = {p.relative_to(root).as_posix() for p in course_notebooks(root, ("notebooks", "labs", "solutions"))}
    assert declared == on_disk


def test_each_exercise_names_a_checker_its_module_exports():
    for ch in course.chapters():
        module = importlib.import_module(ch.checkers_module)
        exported = {name for name in module.__all__ if name.startswith("check_")}
        assert exported == {ex.checker for ex in ch.exercises}, ch.number
        assert all(callable(getattr(module, ex.checker)) for ex in ch.exercises)


def test_every_exercise_declares_at_least_six_mistakes_of_several_kinds():
    for ch in course.chapters():
        for ex in ch.exercises:
            assert len(ex.mistakes) >= 6, f"lab {ch.number} exercise {ex.number}: {len(ex.mistakes)} mistakes"
            assert len({m.kind for m in ex.mistakes}) >= 3, f"lab {ch.number} exercise {ex.number}"


def test_the_committed_reports_hold_only_declared_names(root):
    """Every figure a report holds is declared, and so is every claim of a notebook run at its current code; a
    claim the lecture has since renamed may stay in an older GPU's report until that GPU runs it again (the
    notebook shows as changed since its run there: ../shared/tools/gpu-report-check.py)."""
    from launchlab_tools.notebooks import source_sha256

    declared_figures = {f.name for ch in course.chapters() for f in ch.figures}
    declared_claims = {c.name for ch in course.chapters() for c in ch.claims}
    for report in load_all(root):
        assert set(report.metrics) <= declared_figures, sorted(set(report.metrics) - declared_figures)
        current = {name for path, entry in report.notebooks.items() if (root / path).exists()
                   and report.is_current(path, source_sha256(root / path)) for name in entry.get("claims", [])}
        assert current <= declared_claims, sorted(current - declared_claims)
        undeclared = set(report.claims) - declared_claims
        changed = {path: entry for path, entry in report.notebooks.items() if (root / path).exists()
                   and not report.is_current(path, source_sha256(root / path))}
        if all("claims" in entry for entry in report.notebooks.values()):
            of_changed = {name for entry in changed.values() for name in entry["claims"]}
        else:  # a report written before entries listed their claims: any notebook changed since may have held it
            of_changed = undeclared if changed else set()
        assert undeclared <= of_changed, f"{report.gpu}: undeclared, from no changed notebook: {undeclared - of_changed}"


def test_every_declared_figure_was_recorded_by_a_reference_run(root):
    """A chapter whose lecture has a current run in a report must find its figures there; one whose lecture
    changed since its last GPU run (awaiting it) may declare figures no GPU has measured yet."""
    from launchlab_tools.notebooks import source_sha256

    reports = load_all(root)
    recorded = {name for report in reports for name in report.metrics}
    missing = []
    for ch in course.chapters():
        sha = source_sha256(root / ch.lecture())
        if any(report.is_current(ch.lecture(), sha) for report in reports):
            missing += [f.name for f in ch.figures if f.name not in recorded and not f.optional]
    assert not missing, f"declared but in no report (renamed? never recorded?): {missing}"


def test_record_and_claim_refuse_a_name_no_chapter_declares(results_dir):
    with pytest.raises(results.UndeclaredName, match="no chapter declares this figure"):
        results.record("empty_launch_enqeue_us", 6.0)
    with pytest.raises(results.UndeclaredName, match="no chapter declares this claim"):
        results.record_claim("a claim nobody wrote", True)
    name, fig = next((f.name, f) for ch in course.chapters() for f in ch.figures)
    with pytest.raises(ValueError, match="declares"):
        results.record(name, 1.0, fig.unit + "x")
    assert results.record(name, 2.5) == 2.5 and results.load_run()["units"][name] == fig.unit


def test_a_duplicate_name_across_chapters_is_refused():
    first, second = course.chapters()[:2]
    clash = course.Chapter(**{**second.__dict__, "figures": second.figures + (first.figures[0],)})
    with pytest.raises(course.ModelError, match="unique across the course"):
        course._check_unique((first, clash))


def test_a_declaration_with_an_unknown_key_or_bad_toml_is_refused():
    with pytest.raises(course.ModelError, match="unknown key"):
        course.read_chapter(CHAPTER_TOML.replace('minutes = 30', 'minutes = 30\nminuets = 2'), "x.toml")
    with pytest.raises(course.ModelError, match="not valid TOML"):
        course.read_chapter("number = ", "x.toml")
    with pytest.raises(course.ModelError, match="should be bool"):
        course.read_chapter(CHAPTER_TOML.replace('better = "lower"', 'better = "lower"\noptional = "false"'), "x")


def test_importing_what_notebooks_import_loads_no_maintainers_module():
    script = textwrap.dedent("""
        import pkgutil, importlib, importlib.abc, sys

        class Refuse(importlib.abc.MetaPathFinder):
            # what only maintainers install: a learner's notebook must never need it, even inside a function
            refused = ("launchlab_tools", "yaml", "pytest", "nbclient", "nbval", "playwright")

            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.refused:
                    raise ImportError(f"a learner's import reached {name}")
                return None

        sys.meta_path.insert(0, Refuse())
        import launchlab
        from launchlab.checkers import for_lab
        for info in pkgutil.walk_packages(launchlab.__path__, "launchlab."):
            importlib.import_module(info.name)
        for number in [ch.number for ch in launchlab.course.chapters()]:
            for_lab(number)
        print(sorted(m for m in sys.modules if m.startswith("launchlab_tools")))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_no_notebook_imports_the_maintainers_tools(root):
    for path in course_notebooks(root, ("notebooks", "labs", "solutions")):
        nb = nbformat.read(path, as_version=4)
        assert not any("launchlab_tools" in c.source for c in nb.cells if c.cell_type == "code"), path.name


# ---- a throwaway chapter appears everywhere ----------------------------------------------------------------

CHAPTER_TOML = """
number = "99"
stem = "99_throwaway"
title = "A throwaway chapter"
leaves_able_to = "add a chapter in one folder"
measures = "nothing real"
minutes = 30

[needs]
gpus = 0
text = "a CPU"

[[figures]]
name = "throwaway_probe_us"
unit = "us"
better = "lower"
description = "a figure only this test records"

[[claims]]
name = "a throwaway claim holds"

[[exercises]]
number = 1
title = "return one"
checker = "check_one"
answer = "one()"
runs_on = "cpu"
""" + "".join(f"""
[[exercises.mistakes]]
name = "{name}"
kind = "{kind}"
what = "{what}"
""" for name, kind, what in (("returns two", "classic", "returns 2"), ("returns None", "bad value", "forgets to return"),
                             ("returns NaN", "bad value", "returns nan"), ("returns 1000", "unit", "a unit slip"),
                             ("returns a string", "structure", "a string"), ("returns 1.5", "hard-coded", "a number")))
CHECKERS_PY = '''
from ...checking import CheckFailed, exercise

__all__ = ["check_one"]


@exercise(1, "return the number one")
def check_one(one):
    if one() != 1:
        raise CheckFailed(f"one() returned {one()!r}")
    return "one() is 1"
'''
GUIDE_YML = """goals: [a, b, c]
plan: [[50, "everything"]]
demos: [{title: t, cell: c0, say: s, figures: [throwaway_probe_us]}, {title: u, cell: c0, say: s}]
when_a_claim_fails: w
questions: [q, r, s]
"""


def _notebook(root, folder, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i}"
    (root / folder).mkdir(exist_ok=True)
    nbformat.write(nb, root / folder / "99_throwaway.ipynb")


@pytest.fixture
def throwaway(tmp_path, monkeypatch, root):
    """A course checkout with chapter 99 added: its folder and its three notebooks, nothing else."""
    import launchlab.chapters

    extra = tmp_path / "extra"
    folder = extra / "ch99"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""Chapter 99."""\n')
    (folder / "chapter.toml").write_text(CHAPTER_TOML)
    (folder / "checkers.py").write_text(CHECKERS_PY)
    (folder / "guide.yml").write_text(GUIDE_YML)
    monkeypatch.setattr(launchlab.chapters, "__path__", [*launchlab.chapters.__path__, str(extra)])
    course.reload()
    checkout = tmp_path / "course"
    checkout.mkdir()
    (checkout / "README.md").write_text((root / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    (checkout / "reports" / "gpu").mkdir(parents=True)
    (checkout / "reports" / "gpu" / "nvidia-h100-80gb-hbm3.json").write_text(json.dumps({
        "gpu": "NVIDIA H100 80GB HBM3", "notebooks": {}, "metrics": {"throwaway_probe_us": 1.5},
        "units": {"throwaway_probe_us": "us"}, "claims": {"a throwaway claim holds": {"held": True}}}))
    _notebook(checkout, "notebooks", [nbformat.v4.new_code_cell("x = 1")])
    solution = [nbformat.v4.new_markdown_cell("## Exercise 1: return one"),
                nbformat.v4.new_code_cell("def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
                nbformat.v4.new_code_cell("check.check_one(one)")]
    _notebook(checkout, "solutions", solution)
    (checkout / "labs").mkdir()
    (checkout / "labs" / "99_throwaway.ipynb").write_text(labs.lab_text(checkout / "solutions" / "99_throwaway.ipynb"))
    yield checkout
    monkeypatch.undo()
    course.reload()


def test_a_throwaway_chapter_appears_on_the_start_page_site_figures_page_and_guide(throwaway, tmp_path):
    assert [ch.number for ch in course.chapters()][-1] == "99"
    start = "\n".join(start_page.index_cells(throwaway))
    assert "| 99 | A throwaway chapter |" in start and "[open](labs/99_throwaway.ipynb)" in start
    assert "| 99 | A throwaway chapter | add a chapter in one folder |" in start_page.readme_text(throwaway)
    assert "file: notebooks/99_throwaway" in site_toc.toc_text(throwaway)
    page = figures.write_page(tmp_path / "figures", throwaway, runs=[]).read_text()
    assert "## 99 · A throwaway chapter" in page and "a figure only this test records" in page
    pages = guide.write(tmp_path / "guide", throwaway)
    text = (tmp_path / "guide" / "99.md").read_text()
    assert [p.name for p in pages] == ["99.md"] and "Exercise 1: return one" in text and "returns 2" in text
    lab = nbformat.read(throwaway / "labs" / "99_throwaway.ipynb", as_version=4)
    assert 'raise NotImplementedError("Exercise 1: return one' in lab.cells[1].source


# Wrong answers a suite can only build on a GPU, inside its test (they capture a graph as they are made).
BUILT_ON_A_GPU = {("04", 6, "exercise 1's graph used, not the one given"), ("07", 1, "slot through .cpu()")}


def test_every_declared_mistake_is_planted_in_its_suite():
    """The guide says the checker catches each declared mistake: each one is a wrong answer its suite judges."""
    import mutants

    for ch in course.chapters():
        importlib.import_module(f"test_mutants_lab{ch.number}")
    planted = {(s.lab, s.number, a.name) for s in mutants.SUITES for a in s.answers if not a.right}
    for ch in course.chapters():
        for ex in ch.exercises:
            missing = [m.name for m in ex.mistakes
                       if (ch.number, ex.number, m.name) not in planted | BUILT_ON_A_GPU]
            assert not missing, f"lab {ch.number} exercise {ex.number}: declared, never planted: {missing}"


def test_no_learner_module_imports_a_maintainers_package_even_inside_a_function(root):
    """The import hook above sees only imports that run; this reads every import statement, wherever it is."""
    import ast

    refused = {"launchlab_tools", "yaml", "pytest", "nbclient", "nbval", "playwright"}
    found = []
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.split(".")[0] in refused]
    assert not found, found


def test_judge_reuses_the_one_process_verdicts_and_judges_only_the_trials_beyond(monkeypatch):
    """The GPU tier judges each answer once: a suite's own test reuses what the one-process test gave."""
    monkeypatch.delenv("LAUNCHLAB_CHECK_SEED", raising=False)
    monkeypatch.delenv("LAUNCHLAB_CHECK_TRIALS", raising=False)
    import mutants
    from launchlab.checking import Verdict

    calls = []

    def checker(fn):
        calls.append(fn)
        return Verdict("x", fn(), "judged again")

    answers = [mutants.Answer("the solution", "right", lambda: True)]
    monkeypatch.setattr(mutants, "JUDGED", {("00", 1, "", "the solution"): [Verdict("x", False, "from before")]})
    monkeypatch.setattr(mutants, "undeclared", lambda lab, number, answers: [])
    wrong = mutants.judge("00", 1, checker, answers, trials=2)
    del mutants.TABLE[-1]  # this made-up exercise's row stays out of the run's mutation table
    assert len(calls) == 1, "the first trial's verdict is the one-process test's; only the second is judged"
    assert wrong and "from before" in wrong[0], "a verdict reused is judged like one given now"
    calls.clear()
    monkeypatch.setenv("LAUNCHLAB_CHECK_SEED", "7")  # a replay of a seed judges anew
    mutants.judge("00", 1, checker, answers, trials=2)
    del mutants.TABLE[-1]
    assert len(calls) == 2, "under a forced seed nothing is reused"


def test_only_labs_that_time_nothing_are_judged_in_one_process_in_the_parallel_phase(request):
    """The GPU tier's parallel phase takes a lab's one-process judgement when none of its exercises times anything;
    a lab with a timed exercise keeps the GPU to itself in the serial phase."""
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "pytest", "tests/test_one_process.py", "--collect-only", "-q",
                             "-m", "gpu and concurrent", "-p", "no:cacheprovider"], cwd=request.config.rootpath,
                            capture_output=True, text=True, timeout=120).stdout
    parallel = {line.rsplit("[", 1)[1].rstrip("]") for line in listed.splitlines() if "::" in line}
    untimed = {ch.number for ch in course.chapters()
               if ch.exercises and ch.needs.gpus <= 1 and not any(ex.timed for ex in ch.exercises)}
    assert parallel == untimed and "09" not in parallel, (parallel, untimed)


def test_every_data_file_of_launchlab_is_installed_with_it():
    """A learner's `pip install .` carries every file launchlab reads beside its code (pyproject's package-data)."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["launchlab"]
    package = root / "utils" / "launchlab"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    missing = [d for d in data if not any(fnmatch.fnmatch(d, g) for g in globs)]
    assert data and not missing, f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"
