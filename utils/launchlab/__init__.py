"""launchlab: the helpers every LaunchLab notebook imports, and nothing else (learners install it).

The code that is the lesson stays in the notebooks; this package holds what two notebooks share and the
plumbing: env (the machine, strict mode, skipping a cell), timing, results (your run, your figure beside the
reference), report (the GPU report type), course (the course model: every chapter's declared facts), claims,
plots, trace, graphs, kernels, compat, child (child processes with a deadline), checking (the checker framework)
and checkers (`for_lab`). Each chapter's folder, chapters/chNN, holds its declaration (chapter.toml), its lab's
checkers and its instructor's guide. Chapter kits serve one chapter each and say so in their first line:
devicegraphs (06), decoder (07), ranks (08). The maintainers' tools are the separate package launchlab_tools.
"""

from . import plots, timing
from .claims import agrees, claim, higher, lower
from .env import environment, require_gpu, show_environment
from .results import compare, record, reference, reference_series
from .timing import Timing

__all__ = ["Timing", "agrees", "claim", "compare", "environment", "higher", "lower", "plots", "record", "reference",
           "reference_series", "require_gpu", "show_environment", "timing"]
__version__ = "0.1.0"
