"""A few matplotlib helpers so every figure has units, sensible scales and a title, at a lean size.

The course's style applies to the figures these helpers make, never to matplotlib's global settings.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

# Lean stored outputs (80 dpi PNGs) and a light grid; applied where a figure is made, not at import.
STYLE = {"figure.dpi": 80, "savefig.dpi": 80, "figure.figsize": (7.0, 3.6)}
GRID = {"visible": True, "alpha": 0.3}


def subplots(*args, **kwargs):
    """plt.subplots in the course's style: (figure, axes)."""
    with plt.rc_context(STYLE):
        fig, axs = plt.subplots(*args, **kwargs)
    for ax in fig.axes:
        ax.grid(**GRID)  # stored on the axes, so it holds for ticks drawn later, outside the style context
    return fig, axs


def axes(title: str, xlabel: str, ylabel: str, logx: bool = False, logy: bool = False):
    """A new figure and axes with title, labelled axes (units in the label) and optional log scales."""
    fig, ax = subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return fig, ax


def show(fig) -> None:
    """Lay out, add the legend when something is labelled, and show."""
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    plt.show()


def histogram_us(ax, samples_us: Sequence[float], label: str, bins: int = 80) -> None:
    """A histogram of microsecond samples on log-spaced bins, with the median marked."""
    import numpy as np

    samples = np.asarray(samples_us, dtype=float)
    edges = np.geomspace(max(samples.min(), 1e-3), samples.max() * 1.01, bins)
    ax.hist(samples, bins=edges, alpha=0.7, label=label)
    ax.axvline(float(np.median(samples)), color="k", linestyle="--", linewidth=1)
    ax.set_xscale("log")


def compare_bars(ax, names: Sequence[str], series: dict[str, Sequence[float | None]], unit: str) -> None:
    """Grouped bars: one group per figure, one bar per source (your GPU, the reference, published)."""
    import numpy as np

    x = np.arange(len(names))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        heights = [np.nan if v is None else v for v in values]
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, heights, width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize="x-small")
    ax.set_xticks(x, names)
    ax.set_ylabel(unit)


def timeline(ax, rows: dict[str, Sequence], origin_us: float) -> None:
    """One row of bars per name (intervals with start_us and end_us), in microseconds from `origin_us`."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = list(rows)
    for y, name in enumerate(reversed(names)):
        bars = [(i.start_us - origin_us, i.end_us - i.start_us) for i in rows[name]]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=colors[y % len(colors)])
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xlabel("time (microseconds from the start of the window)")
    ax.grid(axis="y", visible=False)
