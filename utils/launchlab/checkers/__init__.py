"""Checkers for each chapter's lab, one module per chapter (ch00, ch01, ...); a lab reaches them by `for_lab`."""

from __future__ import annotations

import importlib
from types import SimpleNamespace


def for_lab(chapter: str) -> SimpleNamespace:
    """What lab `chapter` ('02') may use: its checkers and exercise material, never the checkers' own answers."""
    module = importlib.import_module(f"{__name__}.ch{chapter}")
    return SimpleNamespace(**{name: getattr(module, name) for name in module.__all__})
