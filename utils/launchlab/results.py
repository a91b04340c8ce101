"""Measured metrics and claims of this GPU's run, and the committed reference report to set beside them."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .env import environment, gpu_slug, repo_root


def results_dir() -> Path:
    """Where this machine's run is stored (LAUNCHLAB_RESULTS_DIR, else runs/ in the course, git-ignored)."""
    return Path(os.environ.get("LAUNCHLAB_RESULTS_DIR") or repo_root() / "runs")


def run_path() -> Path:
    """This GPU's run file: one JSON per GPU model, so classmates' runs can sit side by side."""
    return results_dir() / f"{gpu_slug()}.json"


def load_run(path: Path | None = None) -> dict:
    """The stored run (metrics with units, claims), or an empty one."""
    path = path or run_path()
    if not path.exists():
        return {"gpu": environment().gpu_name, "metrics": {}, "units": {}, "claims": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def _save_run(run: dict, path: Path | None = None) -> None:
    path = path or run_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a kernel killed mid-write never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(run, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def record(name: str, value: float, unit: str) -> float:
    """Store a measured metric of this GPU's run; return the value."""
    value = float(value)
    if value != value:  # NaN: a measurement went wrong, and a report must not hide it
        raise ValueError(f"record('{name}'): the value is NaN; check the measurement that produced it")
    run = load_run()
    run["gpu"] = environment().gpu_name
    run.setdefault("metrics", {})[name] = value
    run.setdefault("units", {})[name] = unit
    _save_run(run)
    return value


def record_claim(name: str, held: bool) -> None:
    """Store whether a teaching claim held on this GPU."""
    run = load_run()
    run.setdefault("claims", {})[name] = bool(held)
    _save_run(run)


def reference_reports() -> list[Path]:
    """The committed GPU reports, reports/gpu/*.json."""
    return sorted((repo_root() / "reports" / "gpu").glob("*.json"))


def reference_report(gpu: str | None = None) -> dict | None:
    """The committed report for `gpu` (a slug), else the first one; None when there is none."""
    reports = reference_reports()
    if not reports:
        return None
    wanted = [p for p in reports if gpu and p.stem == gpu]
    return json.loads((wanted or reports)[0].read_text(encoding="utf-8"))


def reference(name: str, gpu: str | None = None) -> tuple[float | None, str | None]:
    """(value, GPU name) of a metric in the committed reference report; (None, None) if absent."""
    report = reference_report(gpu)
    if not report:
        return None, None
    return report.get("metrics", {}).get(name), report.get("gpu")
