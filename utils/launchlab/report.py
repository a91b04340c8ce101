"""The GPU report, `reports/gpu/<gpu>.json`: one type that loads, validates, merges and looks figures up.

Its schema is the format's definition: `SCHEMA` lists every top-level key and what it holds, `NOTEBOOK_KEYS` and
`CLAIM_KEYS` the keys of a notebook entry and of a claim. results (your figure beside the reference), the
maintainers' tools (reference run, figures page, guide, start page) and the tests all go through `Report`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .env import environment, gpu_slug, host_cpu_model, library_version, repo_root

SCHEMA: dict[str, str] = {
    "gpu": "the GPU's name as the driver reports it",
    "host_cpu": "the host CPU's model name: host-side figures belong to it as much as to the GPU",
    "driver": "the NVIDIA driver version",
    "cuda_runtime": "the CUDA runtime PyTorch was built with",
    "torch": "PyTorch's version", "cupy": "CuPy's version", "python": "Python's version",
    "date": "the day of the run (ISO 8601)",
    "notebooks": "{path: notebook entry}: every notebook and solution the report describes",
    "metrics": "{figure: value}: every figure recorded, as the chapters declare them",
    "units": "{figure: unit}",
    "claims": "{claim: claim entry}: every teaching claim checked",
}
NOTEBOOK_KEYS: dict[str, str] = {
    "source_sha256": "sha256 hex of json.dumps(the code-cell sources in order), UTF-8",
    "cells": "code cells", "failed": "cells that raised", "skipped": "cells left for a machine with more GPUs",
    "seconds": "wall time of the notebook's run",
    "verdicts": "(solutions) {exercise heading: PASS | FAIL}",
    "check_trials": "(solutions) how many times each checker judged its answer",
    "metrics": "the figures this notebook recorded (a re-run drops the ones it no longer records)",
    "claims": "the claims this notebook checked (likewise)",
}
REQUIRED_NOTEBOOK_KEYS = ("source_sha256", "cells", "failed", "skipped", "seconds")
CLAIM_KEYS: dict[str, str] = {
    "held": "whether the claim held", "margin": "the measured ratio over the threshold, minus 1 (null: exact)",
    "detail": "the figures the claim was judged on",
    "ours": "{label, value}: the side the claim is about", "baseline": "{label, value, config}: what it beats",
    "rule": "the rule, e.g. 'ours < baseline / 3'",
    "more": "[{ours, baseline, rule}]: the claim's further comparisons, all of which had to hold",
}


class ReportError(ValueError):
    """A report file that does not follow the schema."""


def claim_held(value: object) -> bool:
    """Whether a claim entry ({"held": ...}, or an old bare true/false) says the claim held."""
    return value is True or (isinstance(value, dict) and value.get("held") is True)


@dataclass
class Report:
    """One GPU's reference run: hardware and versions, the notebooks run, their figures and claims."""

    gpu: str | None
    host_cpu: str | None = None
    driver: str | None = None
    cuda_runtime: str | None = None
    torch: str | None = None
    cupy: str | None = None
    python: str | None = None
    date: str | None = None
    notebooks: dict[str, dict] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    claims: dict[str, dict] = field(default_factory=dict)

    # ---- reading ------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping, where: str = "report") -> Report:
        """The report a dict holds, or ReportError naming what breaks the schema."""
        problems = validate(data)
        if problems:
            raise ReportError(f"{where}: " + "; ".join(problems))
        mappings = ("notebooks", "metrics", "units", "claims")
        return cls(**{k: dict(data.get(k) or {}) if k in mappings else data.get(k) for k in SCHEMA})

    @classmethod
    def load(cls, path: Path) -> Report:
        """The report in a file, or ReportError naming the file and the problem."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{path}: not a readable JSON report ({exc})") from exc
        return cls.from_dict(data, str(path))

    def to_dict(self) -> dict:
        """The report as the JSON file holds it, keys in schema order."""
        return {k: getattr(self, k) for k in SCHEMA}

    def write(self, path: Path) -> Path:
        """Write the report (to a temporary file, then renamed, so a killed run never leaves half a file)."""
        write_json(self.to_dict(), Path(path))
        return Path(path)

    # ---- looking up ---------------------------------------------------------------------------------------

    def metric(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return None if value is None else float(value)

    def notebook(self, path: str) -> dict | None:
        """The entry of a notebook ('notebooks/04_....ipynb'), or None."""
        return self.notebooks.get(path)

    def is_current(self, path: str, sha256: str) -> bool:
        """Whether the report describes the notebook's code as it is now and it ran without a failed cell."""
        entry = self.notebooks.get(path)
        return bool(entry) and entry.get("source_sha256") == sha256 and not entry.get("failed")

    def failed_claims(self) -> list[str]:
        return [name for name, v in self.claims.items() if not claim_held(v)]

    def narrow_claims(self, under: float) -> dict[str, float]:
        """{claim: margin} for every claim that held by less than `under`."""
        return {name: v["margin"] for name, v in self.claims.items()
                if isinstance(v, dict) and v.get("held") and v.get("margin") is not None and v["margin"] < under}

    # ---- merging a run ------------------------------------------------------------------------------------

    def merged(self, notebooks: Mapping[str, dict], run: Mapping, declared: set[str] | None = None,
               known_paths: set[str] | None = None) -> Report:
        """This report with a new run merged in: the run's notebook entries, figures and claims replace the old;
        a re-run notebook's old figures and claims go first (its entry lists them), so one it no longer records
        does not linger; a run of every notebook the report holds starts afresh; names no chapter declares and
        notebooks no chapter has (`known_paths`) are dropped."""
        env = environment()
        old = Report(gpu=self.gpu) if set(notebooks) >= set(self.notebooks) else self
        gone: set[str] = set()
        for rel in notebooks:
            entry = old.notebooks.get(rel, {})
            gone |= set(entry.get("metrics", [])) | set(entry.get("claims", []))

        def keep(names: Mapping, new: Mapping) -> dict:
            kept = {k: v for k, v in names.items() if k not in gone}
            return {k: v for k, v in {**kept, **new}.items() if declared is None or k in declared}

        entries = {rel: e for rel, e in {**old.notebooks, **notebooks}.items()
                   if known_paths is None or rel in known_paths}
        return Report(
            gpu=env.gpu_name, host_cpu=host_cpu_model(), driver=env.driver, cuda_runtime=env.cuda_runtime,
            torch=library_version("torch"), cupy=library_version("cupy"), python=env.python,
            date=dt.date.today().isoformat(),
            notebooks=dict(sorted(entries.items())),
            metrics=dict(sorted(keep(old.metrics, run.get("metrics", {})).items())),
            units=dict(sorted(keep(old.units, run.get("units", {})).items())),
            claims=dict(sorted(keep(old.claims, run.get("claims", {})).items())),
        )


def validate(data: object) -> list[str]:
    """What in `data` breaks the report schema (empty when nothing does)."""
    if not isinstance(data, Mapping):
        return ["not a JSON object"]
    problems = [f"unknown key {k!r}" for k in data if k not in SCHEMA]
    problems += [f"missing key {k!r}" for k in ("gpu", "notebooks", "metrics", "claims") if k not in data]
    for key in ("notebooks", "metrics", "units", "claims"):
        if key in data and not isinstance(data[key], Mapping):
            problems.append(f"{key!r} is not an object")
    if problems:
        return problems
    for path, entry in data["notebooks"].items():
        if not isinstance(entry, Mapping):
            problems.append(f"notebook {path!r} is not an object")
            continue
        problems += [f"notebook {path!r}: unknown key {k!r}" for k in entry if k not in NOTEBOOK_KEYS]
        problems += [f"notebook {path!r}: missing {k!r}" for k in REQUIRED_NOTEBOOK_KEYS if k not in entry]
    for name, value in data["metrics"].items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            problems.append(f"metric {name!r} is {value!r}, not a finite number")
    for name, entry in data["claims"].items():
        if isinstance(entry, bool):
            continue
        if not isinstance(entry, Mapping) or "held" not in entry:
            problems.append(f"claim {name!r} has no 'held'")
            continue
        problems += [f"claim {name!r}: unknown key {k!r}" for k in entry if k not in CLAIM_KEYS]
    return problems


def write_json(data: dict, path: Path) -> None:
    """Write JSON through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def reports_dir(root: Path | None = None) -> Path:
    """reports/gpu/ of the course."""
    return (root or repo_root()) / "reports" / "gpu"


def report_path(root: Path | None = None) -> Path:
    """This GPU's report file."""
    return reports_dir(root) / f"{gpu_slug()}.json"


def report_paths(root: Path | None = None, this_gpu_first: bool = True) -> list[Path]:
    """The committed reports: by file name, or this GPU's first (what a learner's comparison wants)."""
    paths = sorted(reports_dir(root).glob("*.json"))
    if not this_gpu_first:
        return paths
    mine = gpu_slug()
    return sorted(paths, key=lambda p: (p.stem != mine, p.name))


def load_all(root: Path | None = None, this_gpu_first: bool = True) -> list[Report]:
    """Every committed report."""
    return [Report.load(p) for p in report_paths(root, this_gpu_first)]
