"""Detection and the no-GPU path: a clear paragraph, never a traceback."""

import re

import nbformat
import pytest
from nbclient import NotebookClient

from launchlab import env
from launchlab.env import Environment

NO_GPU = not env.environment().has_gpu


def fake_env(**overrides) -> Environment:
    fields = dict(gpu_name=None, gpu_count=0, compute_capability=None, sm_count=None, driver=None,
                  cuda_runtime=None, python="3.11.7", libraries={"torch": "2.13.0"}, problem="no driver")
    fields.update(overrides)
    return Environment(**fields)


def test_describe_names_gpu_driver_and_libraries():
    text = env.describe(fake_env(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, compute_capability="9.0",
                                 sm_count=132, driver="580.159.04", cuda_runtime="13.0", problem=None))
    assert "NVIDIA H100 80GB HBM3 x1 (sm_90, 132 SMs)" in text
    assert "driver: 580.159.04" in text and "torch 2.13.0" in text


@pytest.mark.parametrize("problem, driver, advice", [
    ("PyTorch finds no CUDA GPU", None, "nvidia-smi should list the GPU"),
    ("your PyTorch 2.13.0+cpu is a CPU-only build", "580.1", "installs a CUDA build"),
    ("the NVIDIA driver 470.1 is older than 525", "470.1", "Update the NVIDIA driver"),
    ("CuPy is not installed", "580.1", "pip install cupy-cuda13x"),
])
def test_no_gpu_message_says_what_is_missing_and_what_to_do(problem, driver, advice):
    message = env.no_gpu_message(fake_env(problem=problem, driver=driver))
    assert problem in message and advice in message and "stored outputs" in message
    # A lab has no stored outputs of its own: the message sends its reader to the solution.
    assert "a lab's are in its solution" in message


TESTED = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cupy": "14.2.0", "cuda.core": "1.2.0"}


def test_bootstrap_conda_and_env_read_one_file_of_tested_versions():
    root = env.repo_root()
    bootstrap = (root / "utils" / "bootstrap.sh").read_text(encoding="utf-8")
    assert env.TESTED_VERSIONS_FILE == root / "utils" / "launchlab" / "tested_versions.toml"
    assert 'tested_file="$here/launchlab/tested_versions.toml"' in bootstrap
    for key in ("torch", "triton", "cupy", "cuda-core"):
        assert f"$(tested tested {key})" in bootstrap
    assert "$(tested cpu torch)" in bootstrap
    # No version typed into the script itself: every pin comes from the file.
    assert not re.search(r"==\d", bootstrap)
    tested = env.tested_versions()
    conda = (root / "environment.yml").read_text(encoding="utf-8")
    for pin in (f"torch=={tested['torch']}", f"triton=={tested['triton']}", f"cupy-cuda13x=={tested['cupy']}",
                f"cuda-core=={tested['cuda-core']}"):
        assert pin in conda, f"environment.yml should pin {pin} (utils/launchlab/tested_versions.toml)"


def test_tested_versions_are_the_reference_runs():
    import json

    tested = env.tested_versions()
    for report in sorted((env.repo_root() / "reports" / "gpu").glob("*.json")):
        data = json.loads(report.read_text(encoding="utf-8"))
        assert data["torch"].split("+")[0] == tested["torch"], report.name
        assert data["cupy"] == tested["cupy"], report.name


def test_show_environment_is_quiet_on_the_tested_versions(monkeypatch, capsys):
    monkeypatch.setattr(env, "environment", lambda: fake_env(libraries=dict(TESTED)))
    env.show_environment()
    assert "differ from" not in capsys.readouterr().out


@pytest.mark.parametrize("module, version", [("torch", "2.13.0+cpu"), ("triton", "3.7.0"), ("cupy", "14.3.0"),
                                             ("cuda.core", "1.2.2")])
def test_show_environment_says_when_a_version_differs_and_how_to_get_the_tested_one(
        monkeypatch, capsys, module, version):
    monkeypatch.setattr(env, "environment", lambda: fake_env(libraries={**TESTED, module: version}))
    env.show_environment()
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "differ from" in line)
    assert f"{module} {version} (tested: {env.tested_versions()[module.replace('.', '-')]})" in line
    assert "`make lab`" in line and ".venv" in line and "can move between releases" in line


def test_gpu_slug():
    assert env.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert env.gpu_slug("") == "cpu"


@pytest.mark.skipif(not NO_GPU, reason="checks the experience of a learner without a GPU")
def test_require_gpu_prints_the_paragraph_and_returns_false(capsys):
    assert env.require_gpu() is False
    assert "No usable CUDA GPU here" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(not NO_GPU, reason="checks the experience of a learner without a GPU")
def test_running_chapter_00_without_a_gpu_shows_the_message_not_a_traceback(root):
    """Run every cell of chapter 00, as a learner without a GPU would with Run All."""
    nb = nbformat.read(root / "notebooks" / "00_measuring_gpu_time.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(root / "notebooks")}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + "".join(out.get("traceback", [])))
    everything = "\n".join(texts)
    assert "No usable CUDA GPU here" in everything
    assert "[skipped: no usable CUDA GPU" in everything
    assert "Traceback" not in everything and "File \"" not in everything
