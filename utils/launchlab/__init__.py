"""launchlab: the helpers every LaunchLab notebook imports.

The code that is the lesson stays in the notebooks; this package holds what two notebooks share and the
plumbing (environment, timing harness, results, claims, plots, labs and checkers).
"""

from . import plots, timing
from .claims import claim
from .env import environment, require_gpu, show_environment
from .results import record, reference
from .timing import Timing

__all__ = ["Timing", "claim", "environment", "plots", "record", "reference", "require_gpu",
           "show_environment", "timing"]
__version__ = "0.1.0"
