"""environment.yml installs what pyproject.toml declares; the Makefile exposes the documented targets."""

import re
import tomllib

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
