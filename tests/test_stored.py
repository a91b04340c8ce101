"""A cell this machine cannot run shows its stored reference output instead (launchlab.stored), in an IPython shell
standing in for JupyterLab's kernel: which cells are replaced, what the replacement shows, where it stays out."""

from __future__ import annotations

import json

import pytest
from IPython.core.interactiveshell import InteractiveShell

from launchlab import stored
from launchlab.env import repo_root

LECTURE = "notebooks/07_overhead_ladder.ipynb"
MULTI = "notebooks/08_graphs_across_gpus.ipynb"


def _cell(rel: str, tag: str | None, with_outputs: bool = True) -> dict:
    nb = json.loads((repo_root() / rel).read_text(encoding="utf-8"))
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and (
        tag in c["metadata"].get("tags", []) if tag else not c["metadata"].get("tags"))
        and (c.get("outputs") or not with_outputs))


@pytest.fixture
def shell(monkeypatch):
    sh = InteractiveShell.instance()
    saved = list(sh.input_transformers_post)
    yield sh
    sh.input_transformers_post[:] = saved


def _as_cell(shell, cell_id: str, code: str = "x = 1\n") -> str:
    shell.parent_header = {"metadata": {"cellId": cell_id}}
    return shell.transform_cell(code)


def test_outside_a_jupyter_session_nothing_is_installed(shell, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert not stored.install(0, "no GPU")


def test_a_gpu_cell_is_replaced_and_a_cpu_cell_runs_as_written(shell, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", LECTURE)
    assert stored.install(0, "no usable CUDA GPU here (test)")
    assert stored.install(0, "again")  # the setup cell run twice: still one transformer
    assert sum(getattr(t, "launchlab_replay", False) for t in shell.input_transformers_post) == 1
    gpu, cpu = _cell(LECTURE, "gpu"), _cell(LECTURE, None)
    assert "replay(" in _as_cell(shell, gpu["id"]) and gpu["id"] in _as_cell(shell, gpu["id"])
    assert _as_cell(shell, cpu["id"], "y = 2\n") == "y = 2\n"
    assert _as_cell(shell, "no-such-cell", "z = 3\n") == "z = 3\n"


def test_with_one_gpu_only_the_two_gpu_cells_are_replaced(shell, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", MULTI)
    assert stored.install(1, "no usable CUDA GPU here (test)")
    multi = _cell(MULTI, "multi-gpu", with_outputs=False)
    assert "needs 2 CUDA GPUs and this machine has 1" in _as_cell(shell, multi["id"])
    gpu_cells = [c for c in json.loads((repo_root() / MULTI).read_text())["cells"]
                 if "gpu" in c.get("metadata", {}).get("tags", [])]
    for c in gpu_cells:
        assert _as_cell(shell, c["id"], "w = 4\n") == "w = 4\n"


def test_the_replay_shows_the_stored_outputs_under_their_source(capsys, monkeypatch):
    gpu = _cell(LECTURE, "gpu")
    shown = []
    monkeypatch.setattr("IPython.display.publish_display_data", lambda data, metadata=None: shown.append(data))
    stored.replay(str(repo_root() / LECTURE), gpu["id"], "no GPU (test)")
    out = capsys.readouterr().out
    assert out.startswith(stored.MARK + " no GPU (test): this cell did not run")
    texts = ["".join(o["text"]) for o in gpu["outputs"] if o["output_type"] == "stream" and o["name"] == "stdout"]
    assert all(t in out for t in texts)
    assert len(shown) == sum(o["output_type"] in ("display_data", "execute_result") for o in gpu["outputs"])
    report = json.loads(next((repo_root() / "reports" / "gpu").glob("*.json")).read_text())
    label = stored.reference_label(stored.stored_notebook(repo_root() / LECTURE), LECTURE)
    assert not label or label.split(",")[0] in {report["gpu"], *[
        json.loads(p.read_text())["gpu"] for p in (repo_root() / "reports" / "gpu").glob("*.json")]}


def test_a_lab_cell_points_to_its_solution(capsys):
    lab = "labs/03_torch_compile_graph_breaks.ipynb"
    nb = json.loads((repo_root() / lab).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if "gpu" in c.get("metadata", {}).get("tags", []))
    stored.replay(str(repo_root() / lab), cell["id"], "no GPU (test)")
    assert "its solution notebook (solutions/) shows the reference run's verdict" in capsys.readouterr().out
