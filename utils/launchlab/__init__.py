"""launchlab: the helpers every LaunchLab notebook imports.

The code that is the lesson stays in the notebooks; this package holds what two notebooks share and the
plumbing: env (the machine, strict mode, skipping a cell), timing, results (runs, reports, yours against the
reference), claims, plots, trace, graphs, kernels, compat, child (child processes with a deadline), checking
(the checker framework) and checkers (one module a lab), labs and syllabus (generated notebooks),
reference_run, notebooks and pytest_plugin (the test tiers). Chapter kits serve one chapter each and say so in
their first line: devicegraphs (06), decoder (07), ranks (08).
"""

from . import plots, timing
from .claims import below, claim, exceeds
from .env import environment, require_gpu, show_environment
from .results import compare, record, reference, reference_series
from .timing import Timing

__all__ = ["Timing", "below", "claim", "compare", "environment", "exceeds", "plots", "record", "reference",
           "reference_series", "require_gpu", "show_environment", "timing"]
__version__ = "0.1.0"
