"""The course model: every chapter's facts, declared once in `launchlab/chapters/chNN/chapter.toml`.

A chapter declares its number, title, the file name of its three notebooks, what it needs, the figures it
records (name, unit, which way is better, a one-line description), its claims, its exercises and each
exercise's planted mistakes. Everything else reads them from here: `record` and `claim` refuse names no chapter
declares, the checkers take their exercise titles from here, and the maintainers' tools (start page, README
table, site, figures page, guide, grader, reference run) and the mutation suites read the same objects.

Adding a chapter is adding its folder under `launchlab/chapters/` (chapter.toml, checkers.py, guide.yml) and its
three notebooks; `chapters()` finds it. The declaration is data, read into the types below and validated.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import pkgutil
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# The kinds of wrong answer every exercise is tried with (GUIDE section 6).
MISTAKE_KINDS = ("classic", "unit", "method", "hard-coded", "bad value", "structure")
BETTER = ("lower", "higher", "neither")
RUNS_ON = ("gpu", "cpu", "cpu-partial")


class ModelError(ValueError):
    """A chapter's declaration is inconsistent (a duplicate name, a missing field, a bad value)."""


@dataclass(frozen=True)
class Figure:
    """A figure a chapter records: its name in `record`, unit, which way is better, and what it is."""

    name: str
    unit: str
    better: Literal["lower", "higher", "neither"]
    description: str
    # Host-side figures (enqueue, dispatch, sync cost) belong to the host CPU as much as to the GPU.
    host_bound: bool = False
    # Recorded only when the run shows it (a crossover that may not exist on a GPU): a report may lack it.
    optional: bool = False


@dataclass(frozen=True)
class Claim:
    """A teaching claim a chapter checks on the learner's GPU; its name is the sentence it states, as `claim` prints it."""

    name: str


@dataclass(frozen=True)
class Mistake:
    """A wrong answer planted in an exercise's mutation suite: the name its Answer carries, its kind, what it does."""

    name: str
    kind: str
    what: str
    # "author" when the course's authors planted it; "learner read" when someone who had not read the checker found it.
    found_by: str = "author"


@dataclass(frozen=True)
class Exercise:
    """One exercise of a chapter's lab."""

    number: int
    title: str
    checker: str                 # the check_* function of the chapter's checkers module
    answer: str                  # the function the learner writes, as its signature: "bucket_for(batch, buckets)"
    runs_on: Literal["gpu", "cpu", "cpu-partial"] = "gpu"   # cpu-partial: a CPU judges part, a GPU the rest
    mistakes: tuple[Mistake, ...] = ()
    # Whether the checker times anything: an untimed one may share the GPU with other work (the GPU tier runs
    # the solutions whose exercises are all untimed side by side, before the timed notebooks).
    timed: bool = True

    @property
    def heading(self) -> str:
        """'Exercise 2: choose a bucket', as the solution's heading and every verdict name it."""
        return f"Exercise {self.number}: {self.title}"

    @property
    def answer_params(self) -> tuple[str, ...]:
        """The positional parameters of the learner's function ('batch', 'buckets'), defaults dropped."""
        inside = self.answer[self.answer.index("(") + 1: self.answer.rindex(")")]
        params = [p.split(":")[0].split("=")[0].strip() for p in inside.split(",") if p.strip()]
        return tuple(p for p in params if p and "=" not in p)

    @property
    def required_params(self) -> int:
        """How many arguments the checker passes to the learner's function (parameters without a default)."""
        inside = self.answer[self.answer.index("(") + 1: self.answer.rindex(")")]
        return sum(1 for p in inside.split(",") if p.strip() and "=" not in p)


@dataclass(frozen=True)
class Source:
    """A published figure a chapter quotes: what, where measured, and a link."""

    what: str
    hardware: str
    url: str


@dataclass(frozen=True)
class Needs:
    """What a chapter needs to run its GPU cells."""

    gpus: int = 1
    compute_capability: str | None = None   # the oldest it runs on, "9.0"; None: any CUDA GPU
    cuda_driver: str | None = None          # the oldest CUDA driver version its newest cells need, "12.4"
    text: str = ""                          # the same, as the syllabus says it to a learner


@dataclass(frozen=True)
class Chapter:
    """One chapter: a lecture, a lab and its solution sharing `stem`, and the facts every tool reads."""

    number: str
    stem: str
    title: str
    leaves_able_to: str          # the README syllabus: what a learner leaves able to do
    measures: str                # the start page: what you measure
    needs: Needs
    minutes: int                 # study time: the lecture read and run, the lab done, for a first-time learner
    figures: tuple[Figure, ...] = ()
    claims: tuple[Claim, ...] = ()
    exercises: tuple[Exercise, ...] = ()
    sources: tuple[Source, ...] = ()

    def lecture(self) -> str:
        """'notebooks/04_cuda_graphs_stream_capture.ipynb'."""
        return f"notebooks/{self.stem}.ipynb"

    def lab(self) -> str:
        return f"labs/{self.stem}.ipynb"

    def solution(self) -> str:
        return f"solutions/{self.stem}.ipynb"

    @property
    def solution_timed(self) -> bool:
        """Whether any of the lab's checkers times anything."""
        return not self.exercises or any(ex.timed for ex in self.exercises)

    def notebook_paths(self) -> tuple[str, str, str]:
        """The lecture, lab and solution, relative to the course root."""
        return self.lecture(), self.lab(), self.solution()

    def exercise(self, number: int) -> Exercise:
        """Exercise `number` of this chapter's lab."""
        for ex in self.exercises:
            if ex.number == number:
                return ex
        raise ModelError(f"chapter {self.number} declares no exercise {number} "
                         f"(it has {[e.number for e in self.exercises]})")

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    def claim(self, name: str) -> Claim | None:
        return next((c for c in self.claims if c.name == name), None)

    @property
    def checkers_module(self) -> str:
        return f"launchlab.chapters.ch{self.number}.checkers"


_NUMBER = re.compile(r"^\d\d$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def validate(ch: Chapter) -> Chapter:
    """The chapter, or ModelError naming what is inconsistent in its declaration."""
    where = f"launchlab/chapters/ch{ch.number}/chapter.toml"
    if not _NUMBER.match(ch.number) or not ch.stem.startswith(f"{ch.number}_"):
        raise ModelError(f"{where}: number {ch.number!r} and stem {ch.stem!r} must be 'NN' and 'NN_topic'")
    for kind, names in (("figure", [f.name for f in ch.figures]), ("claim", [c.name for c in ch.claims])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ModelError(f"{where}: {kind} names declared twice: {', '.join(dupes)}")
    bad = [f.name for f in ch.figures if not _NAME.match(f.name)]
    if bad:
        raise ModelError(f"{where}: figure names must be snake_case: {', '.join(bad)}")
    for f in ch.figures:
        if f.better not in BETTER or not f.unit or not f.description.strip():
            raise ModelError(f"{where}: figure {f.name!r} needs a unit, better in {BETTER} and a description")
    if [e.number for e in ch.exercises] != list(range(1, len(ch.exercises) + 1)):
        raise ModelError(f"{where}: exercises must be numbered 1, 2, ... in order")
    for ex in ch.exercises:
        if ex.runs_on not in RUNS_ON or "(" not in ex.answer or not ex.checker.startswith("check_"):
            raise ModelError(f"{where}: exercise {ex.number} needs runs_on in {RUNS_ON}, an answer signature "
                             "'name(params)' and a check_* checker")
        names = [m.name for m in ex.mistakes]
        if len(set(names)) != len(names):
            raise ModelError(f"{where}: exercise {ex.number} names a mistake twice")
        for m in ex.mistakes:
            if m.kind not in MISTAKE_KINDS or not m.what.strip():
                raise ModelError(f"{where}: exercise {ex.number} mistake {m.name!r}: kind in {MISTAKE_KINDS} "
                                 "and a one-line description are required")
    return ch


def _build(cls, data: dict, where: str):
    """`cls(**data)`, or ModelError naming the keys that are not fields of `cls`."""
    import dataclasses as _dc

    names = {f.name for f in _dc.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ModelError(f"{where}: unknown key(s) {', '.join(unknown)} for {cls.__name__} (known: {', '.join(sorted(names))})")
    simple = {"str": str, "int": int, "bool": bool, "str | None": (str, type(None))}
    for f in _dc.fields(cls):
        wanted = simple.get(str(f.type))
        value = data.get(f.name)
        # a TOML "false" is a string, which would read as true: every plain field must have its declared type
        if f.name in data and wanted and (not isinstance(value, wanted) or (wanted is int and isinstance(value, bool))):
            raise ModelError(f"{where}: {f.name} = {value!r} should be {str(f.type)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ModelError(f"{where}: {exc}") from None


def read_chapter(text: str, where: str) -> Chapter:
    """The Chapter a chapter.toml declares."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"{where}: not valid TOML ({exc})") from None
    exercises = []
    for i, ex in enumerate(data.pop("exercises", []), 1):
        mistakes = tuple(_build(Mistake, m, f"{where}, exercise {i}") for m in ex.pop("mistakes", []))
        exercises.append(_build(Exercise, {**ex, "mistakes": mistakes}, f"{where}, exercise {i}"))
    return _build(Chapter, {
        **data,
        "needs": _build(Needs, data.pop("needs", {}), f"{where} [needs]"),
        "figures": tuple(_build(Figure, f, f"{where} [[figures]]") for f in data.pop("figures", [])),
        "claims": tuple(_build(Claim, c, f"{where} [[claims]]") for c in data.pop("claims", [])),
        "sources": tuple(_build(Source, s, f"{where} [[sources]]") for s in data.pop("sources", [])),
        "exercises": tuple(exercises),
    }, where)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Chapter, ...]:
    from . import chapters as package

    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg and re.fullmatch(r"ch\d\d", info.name):
            where = f"launchlab/chapters/{info.name}/chapter.toml"
            folder = importlib.resources.files(f"{package.__name__}.{info.name}")
            chapter = read_chapter((folder / "chapter.toml").read_text(encoding="utf-8"), where)
            if f"ch{chapter.number}" != info.name:
                raise ModelError(f"{where}: number = {chapter.number!r} in the folder of chapter {info.name[2:]}")
            found.append(validate(chapter))
    _check_unique(found)
    return tuple(found)


def _check_unique(found: Sequence[Chapter]) -> None:
    """A figure or claim name is the course's, not only its chapter's (the reports are flat): no two may share one."""
    seen: dict[str, str] = {}
    for ch in found:
        for name in [f.name for f in ch.figures] + [c.name for c in ch.claims]:
            if name in seen:
                raise ModelError(f"{name!r} is declared by chapters {seen[name]} and {ch.number}; names are "
                                 "unique across the course")
            seen[name] = ch.number


def reload() -> None:
    """Forget the chapters read so far (a test that adds a chapter folder calls this)."""
    _load.cache_clear()


def chapters() -> list[Chapter]:
    """Every chapter in number order."""
    return list(_load())


def chapter(number: str) -> Chapter:
    """The chapter numbered `number` ('04')."""
    for ch in _load():
        if ch.number == number:
            return ch
    raise ModelError(f"no chapter {number!r}: the course has {', '.join(c.number for c in _load())}")


def figure(name: str) -> tuple[Chapter, Figure] | None:
    """(chapter, figure) that declares `name`, or None."""
    return next(((ch, f) for ch in _load() if (f := ch.figure(name)) is not None), None)


def declared_claim(name: str) -> tuple[Chapter, Claim] | None:
    """(chapter, claim) that declares `name`, or None."""
    return next(((ch, c) for ch in _load() if (c := ch.claim(name)) is not None), None)


def chapter_of_module(module: str) -> Chapter | None:
    """The chapter whose checkers module is `module` ('launchlab.chapters.ch04.checkers'), or None."""
    match = re.match(r"launchlab\.chapters\.ch(\d\d)\.", module)
    if not match:
        return None
    try:
        return chapter(match.group(1))
    except ModelError:
        return None


def chapter_of_path(path: str) -> Chapter | None:
    """The chapter a notebook path belongs to ('solutions/09_past_graphs.ipynb'), by its stem."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".ipynb")
    return next((ch for ch in _load() if ch.stem == stem), None)


__all__ = ["Chapter", "Claim", "Exercise", "Figure", "Mistake", "ModelError", "Needs", "Source", "chapter",
           "chapter_of_module", "chapter_of_path", "chapters", "declared_claim", "figure", "reload"]
