"""launchlab.checking refuses values that cannot be a measurement; a lab sees its checkers, never their answers."""

import ast
import json
import subprocess
import sys

import nbformat
import pytest

from launchlab.checkers import for_lab
from launchlab.checking import TIME_SLIPS_MS, CheckFailed, exercise, number, within, within_factor

CHAPTERS = [f"{n:02d}" for n in range(9)]


@pytest.mark.parametrize("value, message", [
    (None, "forget to `return`"), ("3.0", "str"), (True, "bool"), ([1.0], "list"),
    (float("nan"), "went wrong"), (float("inf"), "went wrong"), (-1.0, "must be positive"), (0, "must be positive"),
])
def test_number_refuses_what_cannot_be_a_measurement(value, message):
    with pytest.raises(CheckFailed, match=message):
        number(value, "your figure", "microseconds")


def test_number_accepts_numbers_of_every_kind():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    assert number(3, "x") == 3.0 and number(np.float32(2.5), "x") == 2.5 and number(torch.tensor(1.5), "x") == 1.5
    assert number(-2.0, "x", positive=False) == -2.0
    with pytest.raises(CheckFailed, match="has 3 values"):
        number(torch.ones(3), "x")


def test_tolerance_checks_fail_on_nan():
    with pytest.raises(CheckFailed, match="went wrong"):
        within(float("nan"), 1.0, 0.1, "yours")
    with pytest.raises(CheckFailed, match="went wrong"):
        within_factor(float("nan"), 1.0, 2.0, "yours")


def test_a_unit_slip_fails_with_a_hint_that_names_it():
    with pytest.raises(CheckFailed) as failed:
        within(5000.0, 5.0, 0.1, "your time in ms", slips=TIME_SLIPS_MS)
    assert "microseconds" in failed.value.hint
    with pytest.raises(CheckFailed) as failed:
        within(9.0, 5.0, 0.1, "your time in ms", slips=TIME_SLIPS_MS)
    assert failed.value.hint is None  # wrong, but not by a factor that names a slip


@exercise("Exercise 0: a demo", "the general hint")
def _demo(answer):
    if answer == "slip":
        raise CheckFailed("yours is off by 1,000", hint="the slip's own hint")
    if answer == "wrong":
        raise CheckFailed("yours is wrong")
    if answer == "flaky":
        _demo.calls = getattr(_demo, "calls", 0) + 1
        if _demo.calls % 3 == 0:
            raise CheckFailed("failed this time")
    return "fine"


def test_a_verdict_carries_the_mistakes_own_hint_else_the_exercises(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    slip, wrong = _demo("slip"), _demo("wrong")
    assert not slip and slip.hint == "the slip's own hint" and wrong.hint == "the general hint"
    printed = capsys.readouterr().out
    assert "Hint: the slip's own hint" in printed and "Hint: the general hint" in printed


def test_under_check_trials_every_run_must_pass(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setenv("LAUNCHLAB_CHECK_TRIALS", "5")
    assert _demo("right").detail == "fine (passed 5 runs of 5)"
    _demo.calls = 0
    flaky = _demo("flaky")  # passes twice, then fails
    assert not flaky and flaky.detail == "failed this time (run 3 of 5)"
    monkeypatch.setenv("LAUNCHLAB_CHECK_TRIALS", "0")
    with pytest.raises(ValueError, match="LAUNCHLAB_CHECK_TRIALS"):
        _demo("right")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_lab_sees_checkers_and_material_but_no_answers_and_no_modules(chapter):
    seen = vars(for_lab(chapter))
    assert any(name.startswith("check_") for name in seen)
    for name, value in seen.items():
        assert not name.startswith(("_", "reference")), f"lab {chapter} can reach {name}"
        assert type(value).__name__ != "module", f"lab {chapter} can reach the module {name} through check.{name}"


def test_lab02_cannot_reach_the_trace_reader_that_answers_exercise_1(root):
    assert not hasattr(for_lab("02"), "trace") and not hasattr(for_lab("02"), "gpu_idle")
    lab = nbformat.read(root / "labs" / "02_pytorch_dispatch.ipynb", as_version=4)
    first = next(c for c in lab.cells if c.cell_type == "code").source
    imported = {a.asname or a.name for node in ast.walk(ast.parse(first))
                if isinstance(node, ast.ImportFrom) and node.module in ("launchlab", "launchlab.trace")
                for a in node.names}
    assert "trace" not in imported and "gpu_idle" not in imported, imported


def test_every_lab_reaches_its_checkers_through_for_lab(root):
    for lab in sorted((root / "labs").glob("*.ipynb")):
        source = "\n".join(c.source for c in nbformat.read(lab, as_version=4).cells if c.cell_type == "code")
        assert f'check = for_lab("{lab.name[:2]}")' in source and "launchlab.checkers import ch" not in source, lab


def test_no_module_imports_another_modules_private_names(root):
    offenders = []
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("launchlab")):
                offenders += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders


def test_every_module_says_what_it_is_for_in_its_first_line(root):
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.splitlines()[0]) > 20, path


def test_importing_launchlab_leaves_matplotlib_settings_alone(root):
    script = ("import json, matplotlib\nbefore = {k: repr(v) for k, v in matplotlib.rcParams.items()}\n"
              "import launchlab, launchlab.plots\n"
              "after = {k: repr(v) for k, v in matplotlib.rcParams.items()}\n"
              "print(json.dumps(sorted(k for k in before if before[k] != after[k])))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(root / "utils"), "MPLBACKEND": "Agg", "PATH": ""}).stdout
    assert json.loads(out) == []
