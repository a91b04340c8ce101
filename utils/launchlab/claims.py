"""Teaching claims, checked on the learner's GPU: `claim(name, holds, why)`, with margins from `exceeds`/`below`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .env import strict
from .results import record_claim

# A timing claim that holds by less than this is named in the output: nobody should teach a coin flip.
NARROW_MARGIN = 0.10


class ClaimFailed(AssertionError):
    """A teaching claim did not hold under LAUNCHLAB_STRICT=1."""


@dataclass(frozen=True)
class Margin:
    """A comparison of two measurements: whether it held and by how much (the ratio over its threshold, minus 1)."""

    held: bool
    margin: float  # 0.25: held with 25% to spare; -0.1: missed by 10%

    def __bool__(self) -> bool:
        return self.held

    def __and__(self, other: Margin | bool) -> Margin:
        """Both must hold; the margin is the narrower one (a plain bool counts as exact)."""
        if not isinstance(other, Margin):
            return Margin(self.held and bool(other), self.margin)
        return Margin(self.held and other.held, min(self.margin, other.margin))


def exceeds(larger: float, smaller: float, factor: float = 1.0) -> Margin:
    """Whether `larger` > `factor` x `smaller`, with the margin larger / (factor x smaller) - 1."""
    threshold = factor * float(smaller)
    if not (math.isfinite(float(larger)) and math.isfinite(threshold)):
        return Margin(False, float("nan"))
    ratio = float(larger) / threshold if threshold > 0 else math.inf
    return Margin(float(larger) > threshold, ratio - 1)


def below(value: float, limit: float) -> Margin:
    """Whether `value` < `limit`, with the margin limit / value - 1."""
    return exceeds(limit, value)


def claim(name: str, holds: bool | Margin, why: str) -> bool:
    """Check a teaching claim on this GPU, print the verdict with the measured figures and margin, and store it.

    `holds` is a Margin (from `exceeds`, `below`, or several joined with &) for a claim that compares
    measurements, or a bool for one that is exact (equal outputs, a count, a refused call).
    """
    held = bool(holds)
    margin = holds.margin if isinstance(holds, Margin) else None
    record_claim(name, held, why, margin)
    if held:
        if margin is not None and margin < NARROW_MARGIN:
            print(f"CLAIM HELD NARROWLY  {name}: {why} (margin {margin:.0%}, under {NARROW_MARGIN:.0%}: another "
                  "run may not agree)")
        else:
            print(f"CLAIM HELD  {name}: {why}" + (f" (margin {margin:.0%})" if margin is not None else ""))
        return True
    message = (f"CLAIM DID NOT HOLD  {name}: {why}" + (f" (missed by {-margin:.0%})" if margin is not None and
                                                        math.isfinite(margin) else "") + "\n"
               "Your GPU disagrees with the course here. That is worth understanding, not an error in your "
               "work: compare your figures with the reference run, and note your GPU, driver and what else "
               "was running.")
    if strict():
        raise ClaimFailed(message)
    print(message)
    return False
