"""pytest plugin: skip nbval cells tagged `gpu` without a CUDA GPU, `multi-gpu` with fewer than two.

Loaded by `-p launchlab_tools.pytest_plugin` (pyproject's addopts). Also skips tests marked `gpu`, and says in
the summary how many cells were skipped and why. In the CPU tier (LAUNCHLAB_TIER=cpu) GPU cells are skipped
even on a GPU machine: the GPU tier runs them once, in the reference run.
"""

from __future__ import annotations

import pytest

from launchlab.env import environment, gpu_count, tier_gpus

from .notebooks import needs_gpus

_skipped: dict[str, list[str]] = {"gpu": [], "multi-gpu": []}


def _reason(needed: int) -> str | None:
    if tier_gpus() >= needed:
        return None
    if gpu_count() >= needed:
        return "the CPU tier leaves it to the GPU tier (make test-gpu)"
    if needed == 1:
        return f"needs a CUDA GPU: {environment().problem}"
    return f"needs {needed} CUDA GPUs, this machine has {gpu_count()}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's cell items carry their notebook cell
        if cell is not None:
            needed = needs_gpus(cell)
            reason = _reason(needed) if needed else None
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"cell tagged {'multi-gpu' if needed > 1 else 'gpu'}, {reason}"))
                _skipped["multi-gpu" if needed > 1 else "gpu"].append(item.nodeid)
        elif item.get_closest_marker("gpu") is not None:
            reason = _reason(1)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter):
    gpu, multi = _skipped["gpu"], _skipped["multi-gpu"]
    if gpu or multi:
        files = sorted({n.split("::")[0] for n in gpu + multi})
        terminalreporter.write_line(
            f"launchlab: skipped {len(gpu)} cells tagged gpu ({_reason(1)}) and {len(multi)} tagged multi-gpu "
            f"({_reason(2)}) in {len(files)} notebooks: {', '.join(files)}"
        )
