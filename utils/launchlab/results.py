"""Results: this GPU's run (metrics with units, claims), the committed GPU reports, and yours beside theirs.

One module owns every file of results: the run a learner's notebooks write (`runs/<gpu>.json`), the reports
the reference run commits (`reports/gpu/<gpu>.json`, format in CONTRIBUTING.md), how a run merges into a
report, and where a reference figure comes from: this GPU's report when it holds the figure, else the first
report that does, always named beside the figure.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .env import environment, gpu_slug, library_version, repo_root

# ---- this machine's run ------------------------------------------------------------------------------------


def results_dir() -> Path:
    """Where this machine's run is stored (LAUNCHLAB_RESULTS_DIR, else runs/ in the course, git-ignored)."""
    return Path(os.environ.get("LAUNCHLAB_RESULTS_DIR") or repo_root() / "runs")


def run_path() -> Path:
    """This GPU's run file: one JSON per GPU model, so classmates' runs can sit side by side."""
    return results_dir() / f"{gpu_slug()}.json"


def load_run(path: Path | None = None) -> dict:
    """The stored run (metrics, their units, claims), or an empty one."""
    path = path or run_path()
    if not path.exists():
        return {"gpu": environment().gpu_name, "metrics": {}, "units": {}, "claims": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def _write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a kernel killed mid-write never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def record(name: str, value: float, unit: str) -> float:
    """Store a measured metric of this GPU's run, with its unit; return the value."""
    value = float(value)
    if not math.isfinite(value):  # a measurement went wrong, and a report must not hide it
        raise ValueError(f"record('{name}'): the value is {value}; check the measurement that produced it")
    run = load_run()
    run["gpu"] = environment().gpu_name
    run.setdefault("metrics", {})[name] = value
    run.setdefault("units", {})[name] = unit
    _write_json(run, run_path())
    return value


def record_claim(name: str, held: bool, detail: str = "", margin: float | None = None) -> None:
    """Store whether a teaching claim held on this GPU, by what margin, and the figures it was judged on."""
    run = load_run()
    entry = {"held": bool(held), "detail": detail}
    if margin is not None:
        entry["margin"] = round(float(margin), 4) if math.isfinite(margin) else None
    run.setdefault("claims", {})[name] = entry
    _write_json(run, run_path())


def record_verdict(chapter: str, exercise: int, passed: bool, detail: str, hint: str = "", partial: bool = False,
                   seed: int | None = None) -> None:
    """Store a checker's verdict on this GPU's run (the grader and the reference run read it from here)."""
    run = load_run()
    entry = {"passed": bool(passed), "partial": bool(partial), "detail": detail, "hint": hint}
    if seed is not None:
        entry["seed"] = int(seed)
    run.setdefault("verdicts", {}).setdefault(chapter, {})[str(exercise)] = entry
    _write_json(run, run_path())


# ---- the committed reports ---------------------------------------------------------------------------------


def reports_dir(root: Path | None = None) -> Path:
    """reports/gpu/ of the course."""
    return (root or repo_root()) / "reports" / "gpu"


def report_paths(root: Path | None = None) -> list[Path]:
    """The committed reports, this GPU's first, then the others by file name."""
    paths = sorted(reports_dir(root).glob("*.json"))
    mine = gpu_slug()
    return sorted(paths, key=lambda p: (p.stem != mine, p.name))


def load_reports(root: Path | None = None) -> list[dict]:
    """Every committed report, this GPU's first."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in report_paths(root)]


def short_gpu(name: str | None) -> str:
    """'H100' for 'NVIDIA H100 80GB HBM3', 'RTX 4090' for 'NVIDIA GeForce RTX 4090': a name for a table column."""
    if not name:
        return "no GPU"
    words = [w for w in re.split(r"[\s-]+", name) if w not in ("NVIDIA", "GeForce", "Tesla", "Quadro")] or [name]
    if any(ch.isdigit() for ch in words[0]) or len(words) == 1:
        return words[0]
    return f"{words[0]} {words[1]}"


def merge_into_report(report_path: Path, notebooks: Mapping[str, dict], run: Mapping) -> dict:
    """Merge one run (its notebooks' cell results, metrics, units, claims) into a GPU report and write it; a run
    of every notebook the report holds replaces it, so renamed claims and metrics do not linger."""
    env = environment()
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    if set(notebooks) >= set(report.get("notebooks", {})):  # every notebook re-run: nothing old is kept
        report = {}
    # A re-run notebook's old claims and metrics go (its entry lists them), so a renamed one does not linger.
    for rel in notebooks:
        old = report.get("notebooks", {}).get(rel, {})
        for key, owned in (("claims", "claims"), ("metrics", "metrics"), ("units", "metrics")):
            for name in old.get(owned, []):
                report.get(key, {}).pop(name, None)
    merged = {**report.get("notebooks", {}), **notebooks}
    report = {
        "gpu": env.gpu_name, "driver": env.driver, "cuda_runtime": env.cuda_runtime,
        "torch": library_version("torch"), "cupy": library_version("cupy"),
        "python": env.python, "date": dt.date.today().isoformat(),
        "notebooks": dict(sorted(merged.items())),
        **{key: dict(sorted({**report.get(key, {}), **run.get(key, {})}.items()))
           for key in ("metrics", "units", "claims")},
    }
    _write_json(report, report_path)
    return report


def narrow_claims(run_or_report: Mapping, under: float) -> dict[str, float]:
    """{claim: margin} for every claim that held by less than `under`: figures another run may not repeat."""
    return {name: v["margin"] for name, v in run_or_report.get("claims", {}).items()
            if isinstance(v, dict) and v.get("held") and v.get("margin") is not None and v["margin"] < under}


def claim_held(value: object) -> bool:
    """Whether a report's claim entry (true/false, or {"held": ...}) says the claim held."""
    return value is True or (isinstance(value, dict) and value.get("held") is True)


# ---- your figure beside the reference ----------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A figure from a committed report, and which GPU it was measured on."""

    value: float
    unit: str | None
    gpu: str

    @property
    def label(self) -> str:
        """'reference (H100)': how a table or a plot names it."""
        return f"reference ({short_gpu(self.gpu)})"


def reference(name: str, root: Path | None = None) -> Reference | None:
    """The reference figure for a metric: this GPU's report if it holds it, else the first report that does."""
    for report in load_reports(root):
        value = report.get("metrics", {}).get(name)
        if value is not None:
            return Reference(float(value), report.get("units", {}).get(name), report.get("gpu") or "unknown GPU")
    return None


def reference_series(names: Sequence[str], root: Path | None = None) -> tuple[str, list[float | None]]:
    """(label, values) of the reference figures for a bar chart, the label naming every GPU they came from."""
    found = [reference(n, root) for n in names]
    gpus = sorted({short_gpu(r.gpu) for r in found if r})
    return (f"reference ({', '.join(gpus)})" if gpus else "reference (none committed)",
            [r.value if r else None for r in found])


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def compare(names: Sequence[str], yours: Mapping[str, float] | None = None, root: Path | None = None) -> list[dict]:
    """Print your figures beside the reference run's, one row per metric with its unit; return the rows."""
    yours = load_run()["metrics"] if yours is None else yours
    units = load_run().get("units", {})
    rows = []
    for name in names:
        ref = reference(name, root)
        mine = yours.get(name)
        ratio = mine / ref.value if (mine is not None and ref and ref.value) else None
        rows.append({"metric": name, "yours": mine, "reference": ref.value if ref else None,
                     "reference_gpu": short_gpu(ref.gpu) if ref else None,
                     "unit": units.get(name) or (ref.unit if ref else None) or "", "ratio": ratio})
    width = max([len("metric")] + [len(r["metric"]) for r in rows])
    unit_width = max([len("unit")] + [len(r["unit"]) for r in rows])
    print(f"{'metric':{width}}  {'yours':>10}  {'reference':>10}  {'measured on':12} {'unit':{unit_width}}  "
          "yours/reference")
    for r in rows:
        on = r["reference_gpu"] or "no report holds it"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"{r['metric']:{width}}  {_figure(r['yours']):>10}  {_figure(r['reference']):>10}  {on:12} "
              f"{r['unit']:{unit_width}}  {ratio}")
    return rows


def notebook_runs(path: str, sha256: str | None = None, root: Path | None = None) -> list[dict]:
    """Every report's entry for a notebook ('notebooks/00_x.ipynb'), with the GPU and whether it is current."""
    runs = []
    for report in load_reports(root):
        entry = report.get("notebooks", {}).get(path)
        if entry:
            runs.append({**entry, "gpu": short_gpu(report.get("gpu")),
                         "current": sha256 is None or entry.get("source_sha256") == sha256})
    return sorted(runs, key=lambda r: r["gpu"])
