"""Teaching claims, checked on the learner's GPU: each names its two measured sides and the rule between them.

    claim("a graph cuts the per-kernel cost at least 3x",
          lower(ours=("graph replay", replay_us), baseline=("eager launches", eager_us), by=3,
                config="the same 100 CuPy RawKernels launched back to back, warm"),
          why=f"...")

`lower` (ours is lower by at least `by`), `higher` (ours is higher by at least `by`) and `agrees` (the two
agree within a tolerance) build a Comparison of two figures measured side by side in one run. A rule that would
also hold with its two sides swapped cannot fail, and is refused: `by` must be 1 or more. A claim with no two
sides (an exact count, equal outputs, a refused call) passes `holds=` with a one-line `reason=` saying why.
The report keeps both sides, the rule, the baseline's configuration and the margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .env import strict
from .results import record_claim

# A timing claim that holds by less than this is named in the output: nobody should teach a coin flip.
NARROW_MARGIN = 0.10
# An agreement wider than this says little: two figures within 50% of each other may still differ 1.5x.
WIDEST_AGREEMENT = 0.5


class ClaimFailed(AssertionError):
    """A teaching claim did not hold under LAUNCHLAB_STRICT=1."""


class ClaimRefused(ValueError):
    """A claim that cannot fail, or that does not say what it compares: a mistake in the course, not a measurement."""


@dataclass(frozen=True)
class Side:
    """One measured side of a claim: what it is, its value, and (for a baseline) its configuration in one line."""

    label: str
    value: float
    config: str = ""

    def as_dict(self) -> dict:
        value = float(self.value)
        entry = {"label": self.label, "value": round(value, 6) if math.isfinite(value) else None}
        return {**entry, "config": self.config} if self.config else entry


@dataclass(frozen=True)
class Comparison:
    """Two figures measured side by side, a rule between them, and whether and by how much it held."""

    ours: Side
    baseline: Side
    rule: str
    held: bool
    margin: float          # 0.25: held with 25% to spare; -0.1: missed by 10%
    swapped_held: bool     # whether the rule would hold with the two sides swapped
    symmetric: bool = False   # an agreement: the same either way round by nature

    def __bool__(self) -> bool:
        return self.held

    def line(self) -> str:
        """'graph replay 1.2 against eager launches 7.0 (rule: ours < baseline / 3)'."""
        config = f"; baseline: {self.baseline.config}" if self.baseline.config else ""
        return (f"{self.ours.label} {_fmt(self.ours.value)} against {self.baseline.label} "
                f"{_fmt(self.baseline.value)} (rule: {self.rule}{config})")


def _fmt(value: float) -> str:
    return f"{value:,.4g}" if math.isfinite(value) else str(value)


def _side(side: tuple, config: str = "") -> Side:
    if not (isinstance(side, tuple) and len(side) == 2 and isinstance(side[0], str)):
        raise ClaimRefused(f"a side is (label, value), not {side!r}")
    return Side(side[0], float(side[1]), config)


def _by(by: float) -> float:
    by = float(by)
    if not by >= 1:
        raise ClaimRefused(f"by={by:g}: a factor under 1 lets the rule hold with the two sides swapped, so the claim "
                           "cannot fail; compare the other way round, or use agrees() for two figures that agree")
    return by


def _order(ours: Side, baseline: Side, rule: str, holds_fn, margin_fn, by: float) -> Comparison:
    """The rule evaluated as written on the two values; a non-finite side (a measurement that went wrong) fails."""
    a, b = ours.value, baseline.value
    if not (math.isfinite(a) and math.isfinite(b)):
        return Comparison(ours, baseline, rule, False, float("nan"), False)
    held = holds_fn(a, b, by)
    margin = margin_fn(a, b, by)
    if not held and not margin < 0:   # a side at or below zero: the ratio says nothing, the rule failed
        margin = -1.0
    return Comparison(ours, baseline, rule, held, margin, holds_fn(b, a, by))


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, infinite when the denominator is 0 or below (the rule then holds by any factor)."""
    return numerator / denominator if denominator > 0 else math.inf


def lower(ours: tuple[str, float], baseline: tuple[str, float], by: float = 1.0, config: str = "") -> Comparison:
    """Ours is lower than the baseline by at least `by` (ours x by < baseline): a time, a cost, a count."""
    by = _by(by)
    rule = "ours < baseline" + (f" / {by:g}" if by != 1 else "")
    return _order(_side(ours), _side(baseline, config), rule, lambda a, b, f: a * f < b,
                  lambda a, b, f: _ratio(b, a * f) - 1, by)


def higher(ours: tuple[str, float], baseline: tuple[str, float], by: float = 1.0, config: str = "") -> Comparison:
    """Ours is higher than the baseline by at least `by` (ours > by x baseline): a rate, a speed-up, a fraction."""
    by = _by(by)
    rule = "ours > " + (f"{by:g} x " if by != 1 else "") + "baseline"
    return _order(_side(ours), _side(baseline, config), rule, lambda a, b, f: a > f * b,
                  lambda a, b, f: _ratio(a, b * f) - 1, by)


def agrees(ours: tuple[str, float], baseline: tuple[str, float], within: float, config: str = "") -> Comparison:
    """The two figures agree within a fraction `within` of the baseline (an agreement is the same either way
    round; it fails when they differ by more)."""
    if not 0 < within <= WIDEST_AGREEMENT:
        raise ClaimRefused(f"within={within:g}: an agreement must be tighter than {WIDEST_AGREEMENT:.0%}")
    a, b = _side(ours), _side(baseline, config)
    rule = f"|ours / baseline - 1| <= {within:g}"
    if not (math.isfinite(a.value) and math.isfinite(b.value) and b.value != 0):
        return Comparison(a, b, rule, False, float("nan"), False, symmetric=True)
    error = abs(a.value / b.value - 1)
    margin = (within / error - 1) if error > 0 else math.inf
    return Comparison(a, b, rule, error <= within, margin, False, symmetric=True)


def claim(name: str, *comparisons: Comparison, holds: bool | None = None, reason: str = "", why: str = "") -> bool:
    """Check a teaching claim on this GPU, print the verdict with both sides and the margin, and store it.

    Give one or more Comparisons (all must hold; the margin is the narrowest). `holds=` adds an exact condition
    (equal outputs, a count); without comparisons it is the whole claim, and `reason=` must say in one line why
    the claim has no two measured sides.
    """
    if any(not isinstance(c, Comparison) for c in comparisons):
        raise ClaimRefused(f"claim({name!r}): pass comparisons from lower(), higher() or agrees(), then holds=... "
                           "for an exact condition; the old claim(name, holds, why) form names no sides")
    if not comparisons and (holds is None or not reason.strip()):
        raise ClaimRefused(f"claim({name!r}): a claim with no two measured sides needs holds=... and a one-line "
                           "reason=... saying why it has none")
    for c in comparisons:
        if c.held and c.swapped_held and not c.symmetric:
            raise ClaimRefused(f"claim({name!r}): its rule '{c.rule}' also holds with the sides swapped "
                               f"({c.line()}), so it cannot fail; tighten it")
    held = all(c.held for c in comparisons) and (holds is None or bool(holds))
    margins = [c.margin for c in comparisons]
    margin = min(margins) if margins and all(not math.isnan(m) for m in margins) else (
        float("nan") if margins else None)
    sides = "; ".join(c.line() for c in comparisons)
    detail = "; ".join(part for part in (sides, why, reason and f"no two sides: {reason}") if part)
    record_claim(name, held, detail, margin if margin is None or math.isfinite(margin) else None,
                 comparisons=[{"ours": c.ours.as_dict(), "baseline": c.baseline.as_dict(), "rule": c.rule}
                              for c in comparisons])
    shown = f" (margin {margin:.0%})" if margin is not None and math.isfinite(margin) else ""
    if held:
        if margin is not None and math.isfinite(margin) and margin < NARROW_MARGIN:
            print(f"CLAIM HELD NARROWLY  {name}: {detail} (margin {margin:.0%}, under {NARROW_MARGIN:.0%}: another "
                  "run may not agree)")
        else:
            print(f"CLAIM HELD  {name}: {detail}{shown}")
        return True
    missed = f" (missed by {-margin:.0%})" if margin is not None and math.isfinite(margin) and margin < 0 else ""
    message = (f"CLAIM DID NOT HOLD  {name}: {detail}{missed}\n"
               "Your GPU disagrees with the course here. That is worth understanding, not an error in your "
               "work: compare your figures with the reference run, and note your GPU, driver and what else "
               "was running.")
    if strict():
        raise ClaimFailed(message)
    print(message)
    return False
