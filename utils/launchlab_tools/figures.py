"""Every figure across GPUs: one page of the reading site with every metric of every GPU report, and yours.

`python -m launchlab_tools.figures OUT_DIR [--run PATH ...]` writes OUT_DIR/index.md and a chart per chapter
(`make figures` writes across_gpus/, `make site` builds it into the site). Columns: each report in
reports/gpu/ by file name, then each learner run given (by default every runs/*.json of a GPU). Rows: each
chapter's declared figures (launchlab.course), with their descriptions, units and which way is better; a figure
set by the host CPU is marked, and each column names its host.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy
from PIL import Image

from launchlab import course
from launchlab.env import repo_root
from launchlab.report import Report, ReportError

OTHER = "Other figures"
TITLE = "# Every figure across GPUs"
# Charts are named so that a rewrite can clear the ones it wrote before without touching anything else there.
CHART_GLOB = "figures_*.png"
MISSING = "–"


@dataclass(frozen=True)
class Column:
    """One GPU's figures: a reference report or a learner's run."""

    label: str
    metrics: dict[str, float]
    units: dict[str, str] = field(default_factory=dict)
    yours: bool = False
    host: str | None = None


def _read(path: Path) -> dict:
    """A report or run file as a dict; a ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("metrics", {}), dict):
        raise ValueError(f"{path} is not a report or run file (no \"metrics\" object)")
    return data


def _column(path: Path, yours: bool) -> Column:
    if not yours:
        try:
            report = Report.load(path)
        except ReportError as exc:
            raise ValueError(str(exc)) from exc
        return Column(report.gpu or path.stem, dict(report.metrics), dict(report.units), False, report.host_cpu)
    data = _read(path)
    label = (data.get("gpu") or path.stem) + " (your run)"
    # None values would be figures nobody measured: leave them out, so the table shows them as missing.
    metrics = {k: float(v) for k, v in data.get("metrics", {}).items() if v is not None}
    return Column(label, metrics, dict(data.get("units", {})), True, data.get("host_cpu"))


def report_files(root: Path) -> list[Path]:
    """The committed reports in file-name order (not this GPU first: the page must not depend on the machine)."""
    return sorted((root / "reports" / "gpu").glob("*.json"))


def learner_runs(root: Path) -> list[Path]:
    """Every run file of a GPU in runs/ (or LAUNCHLAB_RESULTS_DIR, where results.record writes)."""
    folder = Path(os.environ.get("LAUNCHLAB_RESULTS_DIR") or root / "runs")
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = _read(path)
        except ValueError as exc:              # another tool's JSON in runs/ (a grades file, say): not a run
            print(f"launchlab_tools.figures: left out {exc}", file=sys.stderr)
            continue
        # A run without a GPU holds only the CPU-side figures of a machine with none: not a GPU to compare.
        if data.get("gpu"):
            found.append(path)
    return found


def columns(root: Path, runs: Sequence[Path]) -> list[Column]:
    """A column per report, then one per learner run."""
    return [_column(p, yours=False) for p in report_files(root)] + [_column(p, yours=True) for p in runs]


def sections(cols: Sequence[Column]) -> list[tuple[str, list[str]]]:
    """[(heading, figure names)] per chapter in the model's order, then figures no chapter declares any more."""
    present = {name for col in cols for name in col.metrics}
    out = []
    for ch in course.chapters():
        names = [f.name for f in ch.figures if f.name in present]
        if names:
            out.append((f"{ch.number} · {ch.title}", names))
    declared = {name for _, names in out for name in names}
    other = sorted(present - declared)
    return out + ([(OTHER, other)] if other else [])


def figure(value: float | None) -> str:
    """A value to 4 significant figures, with thousands separators from 1,000 up, '–' when missing."""
    if value is None:
        return MISSING
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 3:  # %g would switch to 1.235e+04 here, which reads worse in a table than 12,350
        return f"{round(value, 3 - magnitude):,.0f}"
    return f"{value:.4g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a label with a pipe would split the markdown table


BETTER_WORDS = {"lower": "lower is better", "higher": "higher is better", "neither": ""}


def describe(name: str) -> str:
    """A figure as a reader meets it: its description, which way is better, whether the host sets it, its name."""
    found = course.figure(name)
    if found is None:
        return f"no chapter declares it any more: `{name}`"
    fig = found[1]
    notes = [w for w in (BETTER_WORDS[fig.better], "set by the host CPU" if fig.host_bound else "") if w]
    return f"{fig.description}" + (f" ({'; '.join(notes)})" if notes else "") + f" `{name}`"


def table(names: Sequence[str], cols: Sequence[Column]) -> str:
    """The markdown table of one section: a row per figure (described, with its unit), a column per GPU."""
    rows = ["| figure | unit | " + " | ".join(_cell(c.label) for c in cols) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in cols) + " |"]
    for name in names:
        declared = course.figure(name)
        unit = declared[1].unit if declared else next((c.units[name] for c in cols if c.units.get(name)), "")
        rows.append(f"| {_cell(describe(name))} | {_cell(unit)} | "
                    + " | ".join(figure(c.metrics.get(name)) for c in cols) + " |")
    return "\n".join(rows)


def ratios(names: Sequence[str], cols: Sequence[Column]) -> dict[str, list[float | None]]:
    """{metric: each column's value / the first column's}, for the metrics the first column has, non-zero."""
    out = {}
    for name in names:
        base = cols[0].metrics.get(name)
        if base is None or base == 0 or not math.isfinite(base):
            continue
        # A log axis cannot show a zero or negative ratio: that bar is left out rather than drawn wrongly.
        out[name] = [r if r is not None and r > 0 and math.isfinite(r) else None
                     for r in (c.metrics[name] / base if name in c.metrics else None for c in cols)]
    return out


def chart(path: Path, heading: str, data: dict[str, list[float | None]], labels: Sequence[str]) -> Path:
    """A horizontal bar chart: a group per metric, a bar per column, each value / the first column's; log x."""
    names = list(data)
    height = 1.0 + len(names) * (0.06 + 0.1 * len(labels))
    # A bare Figure on the Agg canvas, not pyplot: importing this module never changes a notebook's backend.
    fig = Figure(figsize=(7.0, height), dpi=110)  # legible at the site's column width
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    values = [r for row in data.values() for r in row if r is not None]
    # Bars start at the left edge, half the smallest ratio, so every bar ends at its ratio, the smallest still
    # shows, and the first column's all end on the 1 line; the axis spans at least 0.5 to 2, so ratios near 1
    # are not magnified into long differences.
    low, high = min(values + [0.5]) / 2, max(values + [2.0]) * 1.15
    bar = 0.8 / len(labels)
    for j in range(len(labels)):  # column j's bar sits j bar-heights down its metric's group
        ys = [i + (j - (len(labels) - 1) / 2) * bar for i, row in enumerate(data.values()) if row[j] is not None]
        widths = [row[j] - low for row in data.values() if row[j] is not None]
        ax.barh(ys, widths, height=bar, left=low, color=f"C{j % 10}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.set_xticks(_ticks(low, high), [f"{t:g}" for t in _ticks(low, high)])  # 0.5, 1, 2: not 5x10^-1
    ax.set_xticks([], minor=True)
    ax.set_ylim(len(names) - 0.5, -0.5)  # the first metric on top, as in the table
    ax.set_yticks(range(len(names)), names, fontsize=8, family="monospace")  # the names the table shows
    ax.tick_params(axis="x", labelsize=8, top=True, labeltop=True)  # a long chart is read from its top too
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(f"value ÷ the same figure on {labels[0]} (log scale)", fontsize=9)
    # Above the axes, titled with the section, so no bar hides it; every column in it, in the same colour on
    # every chart, even one with no bar here (its table says why).
    ax.legend(handles=[Patch(color=f"C{j % 10}", label=label) for j, label in enumerate(labels)], fontsize=8,
              title=heading, title_fontsize=10, alignment="left", frameon=False, loc="lower left",
              bbox_to_anchor=(0.0, 1.0), bbox_transform=offset_copy(ax.transAxes, fig, y=12, units="points"))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", pad_inches=0.1)  # legend and long names included
    # Flat bars and black text on white: a palette of the bar colours and greys keeps the chart small (a site
    # page, not a print) with every bar its exact colour; PIL writes no date or version, so same figures, same bytes.
    Image.open(buffer).convert("RGB").quantize(palette=_palette(), dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def _ticks(low: float, high: float) -> list[float]:
    """Ratios at 1, 2 and 5 times the powers of ten between low and high; only the powers when those are many."""
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [(m, m * 10.0**d) for d in decades for m in (1, 2, 5) if low <= m * 10.0**d <= high]
    return [t for m, t in ticks if len(ticks) <= 9 or m == 1]


def _palette() -> Image.Image:
    """A palette image of matplotlib's ten cycle colours and 22 greys (antialiased text, grid, axes)."""
    colours = [to_rgb(f"C{j}") for j in range(10)] + [(g / 21,) * 3 for g in range(22)]
    palette = Image.new("P", (1, 1))
    palette.putpalette([round(255 * c) for rgb in colours for c in rgb])
    return palette


def _slug(heading: str) -> str:
    number = heading.split(" ", 1)[0]
    return number if number.isdigit() else "other"


def page(cols: Sequence[Column], out_dir: Path) -> str:
    """The markdown of the page, writing each section's chart into out_dir on the way."""
    first = cols[0].label
    yours = any(c.yours for c in cols)
    parts = [TITLE, (
        "Each figure the course records, on every GPU it has a reference run for (`reports/gpu/`)"
        + (", and your own runs from `runs/`." if yours else "; your own runs from `runs/` join them when present.")
        + f" Each chapter's table gives the figures as measured; its chart divides each by {first}'s, so 1 is "
        "that GPU (whether more is better depends on the unit). To add yours, run the notebooks on your GPU, "
        "then `make figures` or `make site`. A figure set by the host CPU (an enqueue, a dispatch, a sync) "
        "belongs to that host as much as to the GPU:")]
    parts.append("\n".join(f"- {c.label}: host CPU {c.host or 'not recorded'}" for c in cols))
    for heading, names in sections(cols):
        parts.append(f"## {heading}")
        if heading == OTHER:
            parts.append("Figures no chapter declares any more: a report or a run made before they were renamed.")
        parts.append(table(names, cols))
        data = ratios(names, cols)
        if data:
            name = f"figures_{_slug(heading)}.png"
            chart(out_dir / name, heading, data, [c.label for c in cols])
            parts.append(f"![{heading}: each figure divided by {first}'s]({name})")
        else:
            parts.append(f"*No chart: {first} has none of these figures, and the chart compares each to it.*")
    return "\n\n".join(parts) + "\n"


def write_page(out_dir: Path, root: Path | None = None, runs: list[Path] | None = None) -> Path:
    """Write out_dir/index.md and a chart per chapter from the reports and runs; return the page's path."""
    root = root or repo_root()
    if not report_files(root):
        raise FileNotFoundError(f"no GPU report in {root / 'reports' / 'gpu'}: run `make reference` on a GPU, "
                                "or point --root (LAUNCHLAB_ROOT) at the course checkout")
    cols = columns(root, learner_runs(root) if runs is None else runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(CHART_GLOB):  # a chapter that lost its chart must not keep a stale one
        old.unlink()
    path = out_dir / "index.md"
    path.write_text(page(cols, out_dir), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: write the page into OUT_DIR and print its path."""
    parser = argparse.ArgumentParser(prog="python -m launchlab_tools.figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="where index.md and the charts go")
    parser.add_argument("--run", type=Path, nargs="+", action="extend", metavar="PATH",
                        help="learner run files to add as columns (default: every runs/*.json of a GPU)")
    parser.add_argument("--reference-only", action="store_true",
                        help="the committed reports only, no runs/ (the published site uses this)")
    parser.add_argument("--root", type=Path, help="the course checkout (default: LAUNCHLAB_ROOT, else this one)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.run or [] if not p.is_file()]
    if missing:
        print(f"launchlab_tools.figures: no such run file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        path = write_page(args.out_dir, args.root, [] if args.reference_only else args.run)
    except (OSError, ValueError) as exc:
        print(f"launchlab_tools.figures: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
