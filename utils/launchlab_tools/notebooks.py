"""Reading course notebooks: code cells, tags, the source hash of a GPU report (CONTRIBUTING.md), CUDA sources inside."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat

from launchlab import stored
from launchlab.env import repo_root

_KERNEL = re.compile(r"__global__\s+void")
GPU_TAG = "gpu"
MULTI_GPU_TAG = "multi-gpu"


def course_notebooks(root: Path | None = None, dirs: tuple[str, ...] = ("notebooks", "solutions")) -> list[Path]:
    """The notebooks of the given folders, in chapter order."""
    root = root or repo_root()
    return sorted(p for d in dirs for p in (root / d).glob("*.ipynb"))


def code_sources(nb: nbformat.NotebookNode) -> list[str]:
    """The code-cell sources in order, each one string."""
    return [c.source if isinstance(c.source, str) else "".join(c.source) for c in nb.cells if c.cell_type == "code"]


def source_sha256(path: Path) -> str:
    """sha256 hex of json.dumps(code-cell sources), UTF-8: ties a report to the notebook as it is."""
    return stored.source_sha256(json.loads(path.read_text(encoding="utf-8")))


def tags(cell) -> set[str]:
    """A cell's tags."""
    return set(cell.get("metadata", {}).get("tags", []))


def needs_gpus(cell) -> int:
    """How many GPUs a cell needs by its tags: 0, 1 (gpu) or 2 (multi-gpu)."""
    t = tags(cell)
    return 2 if MULTI_GPU_TAG in t else 1 if GPU_TAG in t else 0


def runs_gpu_cells(nb: nbformat.NotebookNode, have: int) -> bool:
    """True when a machine with `have` GPUs can run at least one of the notebook's GPU-tagged cells."""
    return any(cell.cell_type == "code" and 1 <= needs_gpus(cell) <= have for cell in nb.cells)


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at top level, names it reads). Magics and shell lines are ignored."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def untagged_reads_of_tagged_names(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(cell index, name) where an untagged cell reads a name that only tagged cells bind."""
    tagged_bound: set[str] = set()
    untagged_bound: set[str] = set()
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        bound, read = _names(cell.source)
        if needs_gpus(cell):
            tagged_bound |= bound
        else:
            problems += [(index, n) for n in sorted(read & (tagged_bound - untagged_bound - bound))]
            untagged_bound |= bound
    return problems


def cuda_sources(source: str) -> list[str]:
    """The string literals in Python source that define a CUDA kernel (f-strings are generated, so skipped)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in in_fstrings
            and _KERNEL.search(n.value)]


def regenerate_main(argv: list[str] | None, doc: str, generate, errors: tuple[type[Exception], ...], what: str) -> int:
    """The command line of a tool that regenerates files (or with --check only compares): 0 current or written,
    1 out of date under --check, 2 an error it explains. `generate(check=...)` returns the files that differed."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--check", action="store_true", help=f"only report whether {what} are out of date")
    args = parser.parse_args(argv)
    try:
        differ = generate(check=args.check)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check and differ:
        print(f"out of date (run `make labs`): {', '.join(differ)}", file=sys.stderr)
        return 1
    print(("regenerated: " + ", ".join(differ)) if differ else f"{what} are current")
    return 0


def changed_from_commit(root: Path | None = None, dirs: tuple[str, ...] = ("notebooks", "solutions")) -> list[str] | None:
    """The tracked course notebooks that differ from the checkout's last commit (a learner's run, JupyterLab's own
    metadata), or None outside a git checkout; RuntimeError with git's own words when git cannot tell."""
    import subprocess

    root = root or repo_root()
    try:
        done = subprocess.run(["git", "-c", "core.quotePath=false", "status", "--porcelain", "--untracked-files=no",
                               "--", *dirs], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"git could not be run ({exc})") from None
    if done.returncode != 0:
        if "not a git repository" in done.stderr:
            return None
        raise RuntimeError(done.stderr.strip() or f"git status exited {done.returncode}")
    return sorted(line[3:].strip() for line in done.stdout.splitlines() if line[3:].strip().endswith(".ipynb"))


def require_committed(root: Path | None = None) -> int:
    """Exit status for the site and slides builds: 1, naming them, when a course notebook differs from the commit."""
    import sys

    try:
        changed = changed_from_commit(root)
    except RuntimeError as exc:
        print(f"cannot tell whether the notebooks differ from the last commit: {exc}. Fix git (for a checkout "
              "owned by another user: git config --global --add safe.directory <path>), then build again.",
              file=sys.stderr)
        return 1
    if changed is None:
        print("not a git checkout: the site and the decks are built from the notebooks as they are", file=sys.stderr)
        return 0
    if changed:
        print("these notebooks differ from the repository's last commit, so a build would publish a local copy (a "
              "run without a GPU, JupyterLab's own metadata): " + ", ".join(changed) + ". Build from a clean "
              "checkout, or restore them with `git checkout -- <path>` (or commit them if the change is yours).",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line: exit 1, naming them, when a course notebook differs from the last commit (make site, slides)."""
    import argparse

    argparse.ArgumentParser(prog="python -m launchlab_tools.notebooks",
                            description=require_committed.__doc__).parse_args(argv)
    return require_committed()


if __name__ == "__main__":
    raise SystemExit(main())
