"""A lab's way to its checkers: `check = for_lab("04")` hands out what that chapter's checkers module exports."""

from __future__ import annotations

import importlib
from types import SimpleNamespace


def for_lab(chapter: str) -> SimpleNamespace:
    """What lab `chapter` ('02') may use: its checkers and exercise material, never the checkers' own answers."""
    module = importlib.import_module(f"launchlab.chapters.ch{chapter}.checkers")
    return SimpleNamespace(**{name: getattr(module, name) for name in module.__all__})
