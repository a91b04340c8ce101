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


def _nb(rel: str) -> dict:
    return json.loads((repo_root() / rel).read_text(encoding="utf-8"))


def _cell(rel: str, tag: str | None) -> dict:
    return next(c for c in _nb(rel)["cells"] if c["cell_type"] == "code" and (
        tag in c["metadata"].get("tags", []) if tag else not c["metadata"].get("tags")))


def _code(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    saved = list(sh.input_transformers_post)
    yield sh
    sh.input_transformers_post[:] = saved
    sh.parent_header = {}


def _as_cell(shell, cell_id: str | None, code: str) -> str:
    shell.parent_header = {"metadata": {"cellId": cell_id}} if cell_id else {}
    return shell.transform_cell(code)


def _install(shell, rel: str, gpus: int, monkeypatch) -> bool:
    monkeypatch.setenv("JPY_SESSION_NAME", rel)
    _as_cell(shell, _nb(rel)["cells"][1]["id"], "pass\n")  # the setup cell, which calls require_gpu()
    return stored.install(gpus, "no usable CUDA GPU here (test)")


def test_outside_a_jupyter_session_nothing_is_installed(shell, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert not stored.install(0, "no GPU")


def test_a_front_end_that_sends_no_cell_ids_keeps_the_one_line_notes(shell, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", LECTURE)
    _as_cell(shell, None, "pass\n")
    assert not stored.install(0, "no GPU")
    _as_cell(shell, "an-id-of-another-notebook", "pass\n")
    assert not stored.install(0, "no GPU")


def test_a_gpu_cell_is_replaced_and_a_cpu_cell_runs_as_written(shell, monkeypatch):
    assert _install(shell, LECTURE, 0, monkeypatch)
    assert _install(shell, LECTURE, 0, monkeypatch)  # the setup cell run twice: still one transformer
    assert sum(getattr(t, "launchlab_replay", False) for t in shell.input_transformers_post) == 1
    gpu, cpu = _cell(LECTURE, "gpu"), _cell(LECTURE, None)
    replaced = _as_cell(shell, gpu["id"], _code(gpu))
    assert "replay(" in replaced and gpu["id"] in replaced
    assert _as_cell(shell, cpu["id"], _code(cpu)).strip() == _code(cpu).strip()
    assert _as_cell(shell, "no-such-cell", "z = 3\n") == "z = 3\n"


def test_code_the_learner_changed_runs_as_written_even_in_a_gpu_cell(shell, monkeypatch):
    assert _install(shell, LECTURE, 0, monkeypatch)
    gpu = _cell(LECTURE, "gpu")
    edited = _code(gpu) + "\nprint(my_own_name)\n"
    assert "replay(" not in _as_cell(shell, gpu["id"], edited)


def test_with_one_gpu_the_gpu_cells_run_and_the_two_gpu_cells_are_replaced(shell, monkeypatch):
    assert _install(shell, LECTURE, 1, monkeypatch)
    gpu = _cell(LECTURE, "gpu")
    assert "replay(" not in _as_cell(shell, gpu["id"], _code(gpu))
    assert _install(shell, MULTI, 1, monkeypatch)
    multi = _cell(MULTI, "multi-gpu")
    assert "needs 2 CUDA GPUs and this machine has 1" in _as_cell(shell, multi["id"], _code(multi))


def test_the_replay_shows_the_stored_outputs_under_their_source(capsys, monkeypatch):
    gpu = next(c for c in _nb(LECTURE)["cells"] if "gpu" in c["metadata"].get("tags", []) and c.get("outputs"))
    shown = []
    monkeypatch.setattr("IPython.display.publish_display_data", lambda data, metadata=None: shown.append(data))
    stored.replay(str(repo_root() / LECTURE), gpu["id"], "no GPU (test)")
    out = capsys.readouterr().out
    label = stored.reference_label(stored.stored_notebook(repo_root() / LECTURE), LECTURE)
    assert label and out.startswith(f"{stored.MARK} no GPU (test): this cell did not run; below is its output "
                                    f"from the course's reference run on {label}.")
    texts = ["".join(o["text"]) for o in gpu["outputs"] if o["output_type"] == "stream" and o["name"] == "stdout"]
    assert all(t in out for t in texts)
    assert len(shown) == sum(o["output_type"] in ("display_data", "execute_result") for o in gpu["outputs"])


def test_a_saved_replay_read_back_keeps_its_outputs_less_the_mark_line():
    saved = {"output_type": "stream", "name": "stdout", "text": [f"{stored.MARK} no GPU: ...\n", "measured 3 us\n"]}
    assert stored._without_mark(saved)["text"] == "measured 3 us\n"
    assert stored._without_mark({**saved, "text": [f"{stored.MARK} no GPU: ...\n"]}) is None
    plain = {"output_type": "stream", "name": "stdout", "text": "measured 3 us\n"}
    assert stored._without_mark(plain) is plain


def test_a_lab_cell_points_to_its_solution(capsys):
    lab = "labs/03_torch_compile_graph_breaks.ipynb"
    cell = next(c for c in _nb(lab)["cells"] if "gpu" in c.get("metadata", {}).get("tags", []))
    stored.replay(str(repo_root() / lab), cell["id"], "no GPU (test)")
    assert "its solution notebook (solutions/) shows the reference run's verdict" in capsys.readouterr().out


def test_two_runs_of_the_same_code_on_one_day_are_told_apart_by_the_gpu_the_outputs_name(tmp_path, monkeypatch):
    """An H100 and an H200 report of the same day and code: the label names the GPU the notebook's outputs print."""
    nb = {"cells": [{"cell_type": "code", "source": "show_environment()",
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": "GPU: NVIDIA H100 80GB HBM3 x1 (sm_90, 132 SMs)\n"}]}]}
    digest = stored.source_sha256(nb)
    (tmp_path / "reports" / "gpu").mkdir(parents=True)
    for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        (tmp_path / "reports" / "gpu" / f"{gpu.split()[1].lower()}.json").write_text(json.dumps(
            {"gpu": gpu, "date": "2026-11-26", "notebooks": {"notebooks/x.ipynb": {"source_sha256": digest}}}))
    monkeypatch.setattr(stored, "repo_root", lambda: tmp_path)
    assert stored.reference_label(nb, "notebooks/x.ipynb") == "NVIDIA H100 80GB HBM3, 2026-11-26"
    nb["cells"][0]["outputs"][0]["text"] = "GPU: NVIDIA H200 x1 (sm_90, 132 SMs)\n"
    assert stored.reference_label(nb, "notebooks/x.ipynb") == "NVIDIA H200, 2026-11-26"
    nb["cells"][0]["outputs"][0]["text"] = "GPU: NVIDIA H200 NVL x1 (sm_90, 132 SMs)\n"  # a name inside a name
    unnamed = stored.reference_label(nb, "notebooks/x.ipynb")
    nb["cells"][0]["outputs"] = []
    assert unnamed == stored.reference_label(nb, "notebooks/x.ipynb")  # no exact name: as if none were printed
