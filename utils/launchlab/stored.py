"""Where a cell cannot run (no GPU, too few), show what it printed in the course's reference run instead.

In JupyterLab, `require_gpu()` installs an IPython input transformer: a cell tagged `gpu` (or `multi-gpu`) that this
machine cannot run is replaced, before it executes, by a call that shows the cell's stored outputs from the
notebook as the repository holds it (git's HEAD, else the file), under one line naming the GPU and date they came
from. The cell ends without an error, so Run All goes on through every cell that can run here, nothing stored is
lost when JupyterLab saves, and an error in any other cell (a learner's own) shows its traceback as usual.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from .env import repo_root

# How many CUDA GPUs a cell with each tag needs.
GPU_TAGS = {"gpu": 1, "multi-gpu": 2}
REPLAYED_TYPES = ("text/plain", "image/png")  # what the course stores; a replay shows nothing that could run code
MARK = "[reference output]"  # starts the line above replayed outputs; a replay never shows an older one again


def source_sha256(nb: dict) -> str:
    """sha256 hex of json.dumps(the code-cell sources in order), UTF-8: ties a GPU report to a notebook's code."""
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    return hashlib.sha256(json.dumps(sources).encode("utf-8")).hexdigest()


def notebook_path() -> Path | None:
    """The notebook this kernel runs, from the session name Jupyter's server gives its kernels (None elsewhere)."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    if not session.endswith(".ipynb"):
        return None
    path = Path(session)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path.name, repo_root() / path]
    return next((p.resolve() for p in candidates if p.is_file()), None)


@lru_cache(maxsize=8)
def stored_notebook(path: Path) -> dict:
    """The notebook as the repository holds it (git's HEAD), else as it is on disk: where its stored outputs live."""
    root = repo_root().resolve()
    try:
        rel = path.resolve().relative_to(root).as_posix()
        shown = subprocess.run(["git", "-C", str(root), "show", f"HEAD:./{rel}"], capture_output=True, timeout=10)
        if shown.returncode == 0:
            return json.loads(shown.stdout)
    except (ValueError, OSError, subprocess.SubprocessError, json.JSONDecodeError):
        pass  # not in the checkout, no git, or not committed: the file is all there is
    return json.loads(path.read_text(encoding="utf-8"))


def reference_label(nb: dict, rel: str) -> str:
    """'NVIDIA H100 80GB HBM3, 2026-11-26': the GPU report whose run of `rel` had exactly this code, else ''."""
    digest = source_sha256(nb)
    found = []
    for report in sorted((repo_root() / "reports" / "gpu").glob("*.json")):
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (data.get("notebooks") or {}).get(rel, {}).get("source_sha256") == digest:
            found.append((str(data.get("date", "")), f"{data.get('gpu', report.stem)}, "
                                                     f"{data.get('date', 'date not recorded')}"))
    if not found:
        return ""
    # Runs on two GPUs the same day tie on the date: the GPU the notebook's own outputs name (its environment
    # line) wrote them; else the newest run of this code, the one most likely to have.
    shown = " ".join("".join(o.get("text", "")) for c in nb.get("cells", []) for o in c.get("outputs", [])
                     if o.get("output_type") == "stream")
    named = set(re.findall(r"^GPU: (.+?) x\d+ \(", shown, flags=re.M))  # show_environment's line, names whole
    return max(found, key=lambda f: (f[1].rsplit(", ", 1)[0] in named, f[0]))[1]


def cell_by_id(nb: dict, cell_id: str) -> dict | None:
    """The cell with this id, or None."""
    return next((c for c in nb.get("cells", []) if c.get("id") == cell_id), None)


def gpus_needed(cell: dict) -> int:
    """How many CUDA GPUs a cell's tags say it needs (0: none)."""
    return max((GPU_TAGS.get(t, 0) for t in cell.get("metadata", {}).get("tags", [])), default=0)


def _without_mark(output: dict) -> dict | None:
    """An output as stored, less the mark line an earlier replay wrote at its head (None if nothing is left)."""
    text = "".join(output.get("text", "")) if output.get("output_type") == "stream" else ""
    if not text.startswith(MARK):
        return output
    rest = text.split("\n", 1)[1] if "\n" in text else ""
    return {**output, "text": rest} if rest else None


def replay(path: str, cell_id: str, why: str) -> None:
    """Show cell `cell_id`'s stored outputs under one line saying why and where they come from."""
    from IPython.display import publish_display_data

    nb_path = Path(path)
    nb = stored_notebook(nb_path)
    cell = cell_by_id(nb, cell_id) or {}
    outputs = [_without_mark(o) for o in cell.get("outputs", [])]
    outputs = [o for o in outputs if o is not None]
    try:
        rel = nb_path.resolve().relative_to(repo_root().resolve()).as_posix()
    except ValueError:  # a copy outside the checkout: its folder and name, as the reports know them
        rel = "/".join(nb_path.parts[-2:])
    if not outputs:
        where = ("its solution notebook (solutions/) shows the reference run's verdict" if "labs" in Path(rel).parts
                 else "this cell keeps no output from the reference run")
        print(f"{MARK} {why}: this cell did not run; {where}.")
        return
    label = reference_label(nb, rel)
    source = f"the course's reference run on {label}" if label else "the course's reference run"
    print(f"{MARK} {why}: this cell did not run; below is its output from {source}. On a GPU it measures yours.")
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            stream = sys.stderr if out.get("name") == "stderr" else sys.stdout
            stream.write("".join(out.get("text", "")))
            stream.flush()
        elif kind in ("display_data", "execute_result"):
            data = {k: "".join(v) if isinstance(v, list) else v for k, v in out.get("data", {}).items()
                    if k in REPLAYED_TYPES}
            if data:
                publish_display_data(data, out.get("metadata", {}))
        elif kind == "error":  # what the reference run raised, as text: it is not this run's error
            print(f"{out.get('ename')}: {out.get('evalue')}")


def _current_cell_id(shell) -> str | None:
    """The id of the cell being run, as JupyterLab sends it with each execution (None from other front ends)."""
    return (getattr(shell, "parent_header", None) or {}).get("metadata", {}).get("cellId")


def install(gpus_here: int, why: str) -> bool:
    """In a Jupyter kernel, replay every later cell that needs more GPUs than `gpus_here` and still holds the code
    the repository holds; False where it cannot (no session, a front end that sends no cell ids, an unreadable
    notebook), and the caller falls back to its one-line notes."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        path = notebook_path()
        if shell is None or path is None:
            return False
        here = _current_cell_id(shell)  # the setup cell calling this: it must be found, or cells cannot be told apart
        if not here or cell_by_id(stored_notebook(path), here) is None:
            return False
    except Exception:  # noqa: BLE001  (whatever went wrong, the notebook runs as before: with one-line notes)
        return False

    def transformer(lines: list[str]) -> list[str]:
        try:
            cell_id = _current_cell_id(shell)
            cell = cell_by_id(stored_notebook(path), cell_id) if cell_id else None
            if cell is None or gpus_needed(cell) <= gpus_here:
                return lines
            stored_code = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if "".join(lines).strip() != stored_code.strip():
                return lines  # code the learner changed runs as written: its errors are theirs to see
            needed = gpus_needed(cell)
        except Exception:  # noqa: BLE001  (a replay that cannot be prepared never stops a cell from running)
            return lines
        reason = why if needed == 1 else f"this cell needs {needed} CUDA GPUs and this machine has {gpus_here}"
        return [f"__import__('launchlab.stored', fromlist=['replay']).replay({str(path)!r}, {cell_id!r}, "
                f"{reason!r})\n"]

    transformer.launchlab_replay = True  # one at a time: the setup cell may run again
    shell.input_transformers_post[:] = [t for t in shell.input_transformers_post
                                        if not getattr(t, "launchlab_replay", False)] + [transformer]
    return True
