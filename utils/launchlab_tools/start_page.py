"""The course's start page, START_HERE.ipynb, generated from the chapters present and the GPU reports.

It sits beside the README, not in notebooks/: it is not a lecture, has nothing to run, and links to the
lecture, lab and solution of every chapter.

Run `python -m launchlab.syllabus` to regenerate it (`make labs` does), `--check` to only compare.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from launchlab import results
from launchlab.env import repo_root
from .notebooks import source_sha256

START_PAGE = "START_HERE.ipynb"


@dataclass(frozen=True)
class Chapter:
    """One chapter as the syllabus shows it."""

    number: str
    title: str
    measures: str
    needs: str


CHAPTERS = [
    Chapter("00", "Measuring GPU time", "asynchrony, warm-up, CUDA events, noise, the library timers against a "
            "kernel that reports its own duration", "one CUDA GPU; CuPy"),
    Chapter("01", "Launch cost with CuPy RawKernels", "enqueue cost, launch throughput, launch + sync latency, "
            "first-call (JIT) cost, the size where launches stop dominating, a fused conv1d chain",
            "one CUDA GPU; CuPy, cuda.core"),
    Chapter("02", "PyTorch dispatch overhead", "one operator split into Python, dispatcher and launch; sync "
            "points; the overhead-bound batch range; GPU bubbles read from a profiler trace",
            "sections 1-2 and labs 1-3 run on a CPU; the rest one CUDA GPU"),
    Chapter("03", "torch.compile and graph breaks", "kernels fused, breaks counted and fixed, fragmentation, "
            "recompiles over ten shapes, whether reduce-overhead really graphed",
            "all but section 6 and lab 3 run on a CPU; one CUDA GPU for CUDA graphs"),
    Chapter("04", "CUDA graphs by stream capture", "capture, replay, update; static buffers, forbidden calls, "
            "memory pools, graph caches", "one CUDA GPU (CuPy, PyTorch, cuda.core, Triton); lab exercises 2 and 4 "
            "also run on a CPU"),
    Chapter("05", "Multi-stream fork/join capture", "a DAG captured across streams, drawn, and the concurrency "
            "it buys", "one CUDA GPU (CuPy, PyTorch, cuda.core); lab exercise 4's schedule also checks on a CPU"),
    Chapter("06", "Device-side graph launch", "fire-and-forget and tail launch, a GPU-resident scheduler, "
            "conditional nodes, against host launch", "one CUDA GPU (CuPy, cuda.core, the CUDA toolkit's device "
            "runtime); conditional nodes need a CUDA 12.4 driver"),
    Chapter("07", "Capstone: the overhead ladder", "one decode loop from eager to whole-loop graphs, every rung "
            "against the GPU-busy limit", "one CUDA GPU"),
    Chapter("08", "Graphs across GPUs", "collectives in compiled regions and CUDA graphs; symmetric ranks",
            "two CUDA GPUs (the gloo parts run on a CPU)"),
    Chapter("09", "Past graphs: PDL and persistent kernels", "the gap a graph leaves between dependent kernels; "
            "programmatic dependent launch from cuda.core, Triton and Inductor; a persistent kernel; the ladder to "
            "one fused kernel", "one CUDA GPU of compute capability 9.0 or newer (Hopper); cuda.core 1.2, Triton"),
    Chapter("10", "Graphs in real code", "a whole training step in one graph; graph memory pools; piecewise graphs "
            "per batch bucket as serving engines build them; reduce-overhead's silent skips; a failed capture",
            "one CUDA GPU (PyTorch); the CUDA toolkit's compute-sanitizer for one cell"),
]


def _stem(root: Path, number: str) -> str | None:
    found = sorted(p.stem for p in (root / "notebooks").glob(f"{number}_*.ipynb"))
    return found[0] if found else None


def _runs(root: Path, stem: str) -> str:
    """'H100: 15 + 10 s': the lecture's and the solution's run time in every report that holds them."""
    by_gpu: dict[str, list[str]] = {}
    stale = set()
    for d in ("notebooks", "solutions"):
        path = root / d / f"{stem}.ipynb"
        if not path.exists():
            continue
        for run in results.notebook_runs(f"{d}/{stem}.ipynb", source_sha256(path), root):
            by_gpu.setdefault(run["gpu"], []).append(f"{run['seconds']:.0f}")
            if not run["current"] or run.get("failed"):
                stale.add(run["gpu"])
    if not by_gpu:
        return "not run yet"
    return "; ".join(f"{gpu}: {' + '.join(times)} s" + (" (since changed)" if gpu in stale else "")
                     for gpu, times in sorted(by_gpu.items()))


def index_cells(root: Path) -> list[str]:
    """The markdown of the start page: how to work, then one row per chapter."""
    rows = ["| # | chapter | what you measure | needs | reference runs | lecture | lab | solution |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for ch in CHAPTERS:
        stem = _stem(root, ch.number)
        if stem is None:
            rows.append(f"| {ch.number} | {ch.title} | {ch.measures} | {ch.needs} | not in this checkout yet | | | |")
            continue
        runs = _runs(root, stem)
        links = [f"[open]({d}/{stem}.ipynb)" if (root / d / f"{stem}.ipynb").exists() else "-"
                 for d in ("notebooks", "labs", "solutions")]
        rows.append(f"| {ch.number} | {ch.title} | {ch.measures} | {ch.needs} | {runs} | " + " | ".join(links) + " |")
    intro = """# LaunchLab: where the time goes between "launch this kernel" and "the GPU did it"

Start here. Each chapter is a **lecture** (read it, run it: every figure is measured on your GPU and shown
beside the course's reference run), a **lab** (exercises, each ending in a checker that measures its own
reference on your machine) and its **solution**. Work through them in order; each builds on the last.

- Run a lecture top to bottom first (Run > Run All Cells). Cells tagged `gpu` need a CUDA GPU: without
  one they print a one-line note, and the stored outputs show the reference run.
- In a lab, replace each `raise NotImplementedError(...)` line with your code, run the cell, then run the
  checker cell below it: it prints `PASS` or `FAIL` with a hint.
- The reference runs column gives, for each GPU the course's reports were made on, how long the lecture and
  the solution took to run there (`reports/gpu/`)."""
    syllabus = "## Syllabus\n\n" + "\n".join(rows)
    after = """## When something disagrees

A `CLAIM DID NOT HOLD` line means your GPU measured something the course did not expect: compare your
figures with the reference column the notebook prints, and note your GPU, driver and what else was running.
`make test` runs the course's own tests; `make reference` re-runs every notebook and writes a report for
your GPU into `reports/gpu/`."""
    return [intro, syllabus, after]


def index_notebook(root: Path | None = None) -> nbformat.NotebookNode:
    """The start page as a notebook of markdown cells only (nothing to run, so nothing can fail)."""
    root = root or repo_root()
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in index_cells(root)]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"index-{i}"
    return nb


def generate(root: Path | None = None, check: bool = False) -> bool:
    """Write START_HERE.ipynb (or, with check, only compare); return whether it differed."""
    root = root or repo_root()
    path = root / START_PAGE
    text = nbformat.writes(index_notebook(root), version=4) + "\n"
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current != text and not check:
        path.write_text(text, encoding="utf-8")
    return current != text


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate the start page, or check that it is current."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report whether the start page is out of date")
    args = parser.parse_args(argv)
    differs = generate(check=args.check)
    if args.check and differs:
        print(f"{START_PAGE} is out of date (run `make labs`)", file=sys.stderr)
        return 1
    print(f"{START_PAGE} " + ("regenerated" if differs else "is current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
