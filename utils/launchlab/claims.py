"""Teaching claims, checked on the learner's GPU: `claim(name, holds, why)`."""

from __future__ import annotations

from .env import strict
from .results import record_claim


class ClaimFailed(AssertionError):
    """A teaching claim did not hold under LAUNCHLAB_STRICT=1."""


def claim(name: str, holds: bool, why: str) -> bool:
    """Check a teaching claim on this GPU, print the verdict with the measured figures, and store it."""
    held = bool(holds)
    record_claim(name, held, why)
    if held:
        print(f"CLAIM HELD  {name}: {why}")
        return True
    message = (f"CLAIM DID NOT HOLD  {name}: {why}\n"
               "Your GPU disagrees with the course here. That is worth understanding, not an error in your "
               "work: compare your figures with the reference run, and note your GPU, driver and what else "
               "was running.")
    if strict():
        raise ClaimFailed(message)
    print(message)
    return False
