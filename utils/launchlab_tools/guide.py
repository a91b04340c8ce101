"""The instructor's guide: one page per chapter, from guides/NN.yml plus what must never be typed by hand.

    python -m launchlab.guide instructors     # writes instructors/NN.md (make site does, into the reading site)

A chapter's YAML (schema in guides/README.md) holds what an instructor writes: goals, a 50-minute plan, the live
demos, what to say when a claim does not hold, discussion questions. The page adds the figures each demo should
show on every GPU with a reference run (reports/gpu/, through launchlab.figures) and, per exercise, the mistakes
learners make, as the lab's mutation suite in tests/ plants them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import nbformat

from . import figures
from launchlab.env import repo_root
from .start_page import CHAPTERS

PLAN_MINUTES = 50
KIND_WORDS = {"classic": "the classic mistake", "unit": "a unit slip", "method": "a method slip",
              "hard-coded": "a typed-in answer", "bad value": "a bad value", "structure": "a structural shortcut"}


def sources(root: Path) -> list[Path]:
    """The chapters' guide files, in chapter order."""
    return sorted((root / "guides").glob("[0-9][0-9].yml"))


def load(path: Path) -> dict:
    """A chapter's guide file, checked against the schema; ValueError naming the file and the problem."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [k for k in ("goals", "plan", "demos", "when_a_claim_fails", "questions") if not data.get(k)]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)} (see guides/README.md)")
    counts = {"goals": (3, 4), "demos": (2, 3), "questions": (3, 3)}
    for key, (low, high) in counts.items():
        if not isinstance(data[key], list) or not low <= len(data[key]) <= high:
            raise ValueError(f"{path}: {key} should be a list of {low}" + (f" to {high}" if high > low else "")
                             + " entries")
    bad_demo = next((d for d in data["demos"] if not (isinstance(d, dict) and d.get("title") and d.get("cell")
                                                      and d.get("say"))), None)
    if bad_demo is not None:
        raise ValueError(f"{path}: every demo needs a title, a cell and what to say; got {bad_demo!r:.80}")
    if not all(isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) for row in data["plan"]):
        raise ValueError(f"{path}: every plan row is [minutes, \"what happens\"]")
    minutes = sum(int(m) for m, _ in data["plan"])
    if minutes != PLAN_MINUTES:
        raise ValueError(f"{path}: the plan takes {minutes} minutes, not {PLAN_MINUTES}")
    return data


def lecture(root: Path, number: str) -> Path:
    """The chapter's lecture notebook."""
    found = sorted((root / "notebooks").glob(f"{number}_*.ipynb"))
    if not found:
        raise ValueError(f"no lecture notebooks/{number}_*.ipynb for guides/{number}.yml")
    return found[0]


def recorded(nb: nbformat.NotebookNode) -> set[str]:
    """The metric names a notebook records (record("name", ...) in its code cells)."""
    return {m for c in nb.cells if c.cell_type == "code" for m in re.findall(r'record\(\s*"([^"]+)"', c.source)}


def exercise_titles(root: Path, number: str) -> dict[str, str]:
    """{"1": "Exercise 1: ...", ...} from the chapter's solution notebook."""
    found = sorted((root / "solutions").glob(f"{number}_*.ipynb"))
    titles = {}
    for cell in nbformat.read(found[0], as_version=4).cells if found else []:
        if cell.cell_type == "markdown":
            for m in re.finditer(r"^#+\s*(Exercise\s+(\w+)\b.*?)\s*$", cell.source, re.MULTILINE):
                titles.setdefault(m.group(2), m.group(1))
    return titles


def _answers(node: ast.AST) -> list[tuple[str, str]]:
    """(name, kind) of every Answer("name", "kind", ...) call in a literal list."""
    found = []
    for call in ast.walk(node):
        if (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Answer" and len(call.args) >= 2
                and all(isinstance(a, ast.Constant) for a in call.args[:2])):
            found.append((call.args[0].value, call.args[1].value))
    return found


def planted_mistakes(root: Path, number: str) -> dict[str, list[tuple[str, str]]]:
    """{exercise number: [(wrong answer, kind)]} from tests/test_mutants_labNN.py: each judge("lab NN exercise K",
    checker, ANSWERS) call names the list of answers planted for exercise K."""
    path = root / "tests" / f"test_mutants_lab{number}.py"
    if not path.exists():
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lists = {t.id: _answers(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    found: dict[str, list[tuple[str, str]]] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "judge" and len(call.args) >= 3):
            continue
        label, answers = call.args[0], call.args[2]
        match = re.search(r"exercise\s+(\w+)", label.value) if isinstance(label, ast.Constant) else None
        if match and isinstance(answers, ast.Name):
            wrong = [(n, k) for n, k in lists.get(answers.id, []) if k != "right"]
            found.setdefault(match.group(1), []).extend(w for w in wrong if w not in found.get(match.group(1), []))
    return found


def page(root: Path, number: str, data: dict, cols: list[figures.Column]) -> str:
    """The markdown of one chapter's guide."""
    title = next((c.title for c in CHAPTERS if c.number == number), "")
    path = lecture(root, number)
    nb = nbformat.read(path, as_version=4)
    ids = {c.get("id"): c for c in nb.cells}
    metrics = recorded(nb)
    lines = [f"# {number} · {title}: instructor's guide", "",
             f"For the lecture `{path.relative_to(root).as_posix()}` and its lab. Figures below come from the "
             "course's reference runs (`reports/gpu/`); mistakes from the lab's mutation suite.", "",
             "## Learning goals", ""]
    lines += [f"- {g}" for g in data["goals"]]
    lines += ["", f"## A {PLAN_MINUTES}-minute session", "", "| from | minutes | what |", "| ---: | ---: | --- |"]
    start = 0
    for minutes, what in data["plan"]:
        lines.append(f"| {start} | {minutes} | {what} |")
        start += int(minutes)
    lines += ["", "## Live demos", ""]
    for demo in data["demos"]:
        cell = ids.get(demo["cell"])
        if cell is None or cell.cell_type != "code":
            raise ValueError(f"guides/{number}.yml: demo {demo['title']!r} names cell {demo['cell']!r}, which is no "
                             f"code cell of {path.name}")
        unknown = [f for f in demo.get("figures", []) if f not in metrics]
        if unknown:
            raise ValueError(f"guides/{number}.yml: demo {demo['title']!r} names {', '.join(unknown)}, which "
                             f"{path.name} does not record")
        first_line = cell.source.strip().splitlines()[0][:80]
        lines += [f"### {demo['title']}", "", f"Run cell `{demo['cell']}` (it starts `{first_line}`). "
                  f"{demo['say']}", ""]
        if demo.get("figures"):
            lines += ["What to expect, from the reference runs:", "", figures.table(demo["figures"], cols), ""]
    lines += ["## When a claim does not hold on your GPU", "", data["when_a_claim_fails"].strip(), "",
              "## Mistakes learners make", ""]
    titles, planted = exercise_titles(root, number), planted_mistakes(root, number)
    if not planted:
        lines += ["(This lab has no mutation suite.)", ""]
    for exercise, wrong in sorted(planted.items()):
        lines += [f"**{titles.get(exercise, 'Exercise ' + exercise)}**: the checker catches", ""]
        lines += [f"- {name} ({KIND_WORDS.get(kind, kind)})" for name, kind in wrong]
        lines.append("")
    lines += ["## Discussion questions", ""]
    lines += [f"{i}. {q}" for i, q in enumerate(data["questions"], 1)]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Every chapter's guide page into out_dir, with an index; the pages written."""
    root = root or repo_root()
    cols = figures.columns(root, [])           # the reference runs only: a guide quotes no learner's run
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("[0-9][0-9].md"):   # a guide removed from guides/ must not keep its page
        stale.unlink()
    written = []
    for source in sources(root):
        number = source.stem
        target = out_dir / f"{number}.md"
        target.write_text(page(root, number, load(source), cols), encoding="utf-8")
        written.append(target)
    index = ["# For instructors", "",
             "A guide per chapter: goals, a 50-minute plan, the live demos with the figures to expect on each GPU "
             "the course has reference runs for, what to say when a claim does not hold, the mistakes learners "
             "make in each exercise, and questions for discussion. Grading a class: `make grade` (README). Slides: "
             "`make slides`.", ""]
    index += [f"- [{p.stem}]({p.name})" for p in written]
    (out_dir / "index.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: python -m launchlab.guide OUT_DIR."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launchlab.guide OUT_DIR", file=sys.stderr)
        return 2
    try:
        pages = write(Path(args[0]))
    except ValueError as exc:
        print(f"guide: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(pages)} chapter guides into {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
