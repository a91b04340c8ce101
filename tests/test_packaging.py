"""environment.yml installs what pyproject.toml declares; the Makefile exposes the documented targets."""

import re
import tomllib

import pytest
import yaml


def names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].strip().lower() for r in requirements}


def test_environment_yml_matches_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = names(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = names(d for d in env["dependencies"] if isinstance(d, str))
    pip = names(p for p in pip_section if not p.startswith("-e"))
    assert declared <= conda | pip, f"missing from environment.yml: {declared - conda - pip}"
    assert {"torch", "cupy-cuda13x"} <= pip, "torch and CuPy belong in the pip section"
    assert "-e ." in pip_section, "the course itself installs editable"


def test_makefile_has_the_documented_targets(root):
    makefile = (root / "Makefile").read_text()
    for target in ("lab", "test", "test-cpu", "test-gpu", "reference", "labs", "site", "wheelhouse"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target
    assert "make test" in (root / ".ci" / "run").read_text()


def test_site_installs_jupyter_book_from_the_site_extra(root):
    """One pin for Jupyter Book: the `site` extra, which `make site` installs on first use."""
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("jupyter-book") for r in extras["site"])
    assert not any(r.startswith("jupyter-book") for r in extras["dev"])
    makefile = (root / "Makefile").read_text()
    site = makefile.split("\nsite:", 1)[1].split("\n\n", 1)[0]
    assert '-e ".[site]"' in site and "jupyter-book>" not in site


def test_bootstrap_turns_jupyterlab_news_off_with_values_jupyterlab_accepts(root):
    import json
    import sys
    from pathlib import Path

    overrides = json.loads((root / "utils" / "jupyterlab_overrides.json").read_text())
    assert "jupyterlab_overrides.json" in (root / "utils" / "bootstrap.sh").read_text()
    from jupyter_core.paths import jupyter_path

    found = [Path(p) for p in jupyter_path("lab", "schemas") if (Path(p) / "@jupyterlab").is_dir()]
    found += [p for p in [Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"] if p.is_dir()]
    if not found:
        pytest.skip("JupyterLab is not installed here (an offline GPU machine's route brings only the test tools)")
    schemas = found[0]
    for plugin, settings in overrides.items():
        package, name = plugin.split(":")
        schema = json.loads((schemas / package / f"{name}.json").read_text())["properties"]
        for key, value in settings.items():
            allowed = [o["const"] for o in schema[key].get("oneOf", [])] or [True, False]
            assert value in allowed, f"{plugin} {key}={value!r}: JupyterLab accepts {allowed}"
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_bootstrap_pipes_no_python_into_head(root):
    """`python ... | head` closes the pipe on a Python still writing: a BrokenPipeError traceback."""
    bootstrap = (root / "utils" / "bootstrap.sh").read_text()
    for line in bootstrap.splitlines():
        if "python" in line and "| head" in line:
            raise AssertionError(f"bootstrap.sh pipes Python into head: {line.strip()}")


def test_the_site_and_decks_refuse_a_notebook_that_differs_from_the_commit(tmp_path):
    import subprocess

    from launchlab_tools.notebooks import changed_from_commit, require_committed

    (tmp_path / "notebooks").mkdir()
    nb = tmp_path / "notebooks" / "00_x.ipynb"
    nb.write_text("{}")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    assert changed_from_commit(tmp_path) == [] and require_committed(tmp_path) == 0
    nb.write_text('{"metadata": {"kernelspec": {}}}')     # as JupyterLab saves it after a run
    assert changed_from_commit(tmp_path) == ["notebooks/00_x.ipynb"] and require_committed(tmp_path) == 1


def _tools_with_a_command_line(root):
    tools = root / "utils" / "launchlab_tools"
    return sorted(p.stem for p in tools.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_every_maintainer_tool_answers_help_and_writes_nothing(root, tmp_path):
    import os
    import subprocess
    import sys

    tools = _tools_with_a_command_line(root)
    assert {"guide", "site_toc", "figures", "grade", "slides", "start_page", "labs"} <= set(tools), tools
    env = {**os.environ, "PYTHONPATH": str(root / "utils"), "LAUNCHLAB_ROOT": str(root)}
    for tool in tools:
        run = subprocess.run([sys.executable, "-m", f"launchlab_tools.{tool}", "--help"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "usage:" in run.stdout, f"{tool} --help: {run.returncode} {run.stderr[-500:]}"
        assert not list(tmp_path.iterdir()), f"{tool} --help wrote {[p.name for p in tmp_path.iterdir()]}"


def test_the_conda_route_starts_jupyterlab_with_the_save_hook(root):
    import subprocess

    readme = (root / "README.md").read_text()
    assert "conda env create -f environment.yml" in readme and "make lab PYTHON=python" in readme
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    dry = subprocess.run(["make", "-s", "-n", "lab", "PYTHON=python"], cwd=root, capture_output=True, text=True,
                         timeout=60, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "python -m jupyter lab" in dry.stdout and "pre_save_hook=launchlab.jupyter_hooks" in dry.stdout, dry.stdout
    assert ".venv" not in dry.stdout, "with PYTHON=, make lab must not create or use .venv"
