"""Detection and the no-GPU path: a clear paragraph, never a traceback."""

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
