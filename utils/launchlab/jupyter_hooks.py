"""JupyterLab server plumbing: saving a course notebook keeps the kernel metadata the repository stores.

Started by `make lab` (ContentsManager.pre_save_hook), so that opening a notebook and letting autosave run leaves
the file as it was: JupyterLab would otherwise write the learner's kernel name and Python version into it.
"""

from __future__ import annotations

COURSE_KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
COURSE_LANGUAGE_INFO = {"name": "python"}


def keep_course_metadata(model: dict, **_: object) -> None:
    """Put the course's kernelspec and language_info back into a notebook about to be saved."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    metadata = model["content"].setdefault("metadata", {})
    metadata["kernelspec"] = dict(COURSE_KERNELSPEC)
    metadata["language_info"] = dict(COURSE_LANGUAGE_INFO)
