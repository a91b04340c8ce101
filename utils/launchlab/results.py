"""Your results: this GPU's run (figures, claims, checkers' verdicts) and each figure beside the reference's.

The run your notebooks write is `runs/<gpu>.json`. A figure's reference comes from the committed reports
(`launchlab.report`): this GPU's report when it holds the figure, else the first report that does, always named
beside the figure. `record` refuses a figure no chapter declares (launchlab/chapters/chNN/chapter.toml), so a typo is
an error, not a new figure.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import course
from .env import environment, gpu_slug, repo_root
from .report import load_all, write_json

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
    write_json(data, path)  # through a temporary file and a rename: a kernel killed mid-write leaves no half file


@contextlib.contextmanager
def _updating_run() -> Iterator[dict]:
    """This GPU's run, to change in place and write back, locked against another kernel (a lecture and its lab open
    side by side) doing the same at once, which would lose one of the two updates."""
    path = run_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # no fcntl (Windows): updates are not locked there
            pass
        run = load_run()
        yield run
        _write_json(run, path)


class UndeclaredName(KeyError):
    """A figure or claim that no chapter declares: a typo, or a declaration missing from chapter.toml."""

    def __str__(self) -> str:
        return str(self.args[0])


def declared_figure(name: str, unit: str | None = None) -> course.Figure:
    """The chapter's declaration of figure `name`, or UndeclaredName saying where to declare it."""
    found = course.figure(name)
    if found is None:
        raise UndeclaredName(f"record({name!r}): no chapter declares this figure. Check its spelling, or declare "
                             "it in the chapter's launchlab/chapters/chNN/chapter.toml (figures=...)")
    ch, fig = found
    if unit is not None and unit != fig.unit:
        raise ValueError(f"record({name!r}): the unit is {unit!r} here but chapter {ch.number} declares "
                         f"{fig.unit!r}; make them agree")
    return fig


def record(name: str, value: float, unit: str | None = None) -> float:
    """Store a measured figure of this GPU's run (declared by its chapter, with its unit); return the value."""
    fig = declared_figure(name, unit)
    value = float(value)
    if not math.isfinite(value):  # a measurement went wrong, and a report must not hide it
        raise ValueError(f"record('{name}'): the value is {value}; check the measurement that produced it")
    with _updating_run() as run:
        run["gpu"] = environment().gpu_name
        run.setdefault("metrics", {})[name] = value
        run.setdefault("units", {})[name] = fig.unit
    return value


def record_claim(name: str, held: bool, detail: str = "", margin: float | None = None,
                 comparisons: list[dict] | None = None) -> None:
    """Store whether a teaching claim held on this GPU, by what margin, its two sides and their rule."""
    if course.declared_claim(name) is None:
        raise UndeclaredName(f"claim({name!r}): no chapter declares this claim. Check its wording, or declare it "
                             "in the chapter's launchlab/chapters/chNN/chapter.toml (claims=...)")
    entry: dict = {"held": bool(held), "detail": detail}
    if margin is not None:
        entry["margin"] = round(float(margin), 4) if math.isfinite(margin) else None
    if comparisons:
        first, *more = comparisons
        entry.update(ours=first["ours"], baseline=first["baseline"], rule=first["rule"])
        if more:
            entry["more"] = more
    with _updating_run() as run:
        run.setdefault("claims", {})[name] = entry


def record_verdict(chapter: str, exercise: int, passed: bool, detail: str, hint: str = "", partial: bool = False,
                   seed: int | None = None) -> None:
    """Store a checker's verdict on this GPU's run (the grader and the reference run read it from here)."""
    entry = {"passed": bool(passed), "partial": bool(partial), "detail": detail, "hint": hint}
    if seed is not None:
        entry["seed"] = int(seed)
    with _updating_run() as run:
        run.setdefault("verdicts", {}).setdefault(chapter, {})[str(exercise)] = entry


def short_gpu(name: str | None) -> str:
    """'H100' for 'NVIDIA H100 80GB HBM3', 'RTX 4090' for 'NVIDIA GeForce RTX 4090': a name for a table column."""
    if not name:
        return "no GPU"
    words = [w for w in re.split(r"[\s-]+", name) if w not in ("NVIDIA", "GeForce", "Tesla", "Quadro")] or [name]
    if any(ch.isdigit() for ch in words[0]) or len(words) == 1:
        return words[0]
    return f"{words[0]} {words[1]}"


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
    for report in load_all(root):
        value = report.metric(name)
        if value is not None:
            return Reference(value, report.units.get(name), report.gpu or "unknown GPU")
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
        try:   # a typo in a compare list is an error, not "no report holds it"
            declared = declared_figure(name)
        except UndeclaredName:
            raise UndeclaredName(f"compare: {name!r} is a figure no chapter declares; check its spelling") from None
        ref = reference(name, root)
        mine = yours.get(name)
        ratio = mine / ref.value if (mine is not None and ref and ref.value) else None
        rows.append({"metric": name, "yours": mine, "reference": ref.value if ref else None,
                     "reference_gpu": short_gpu(ref.gpu) if ref else None,
                     "unit": declared.unit or units.get(name) or "", "ratio": ratio})
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
