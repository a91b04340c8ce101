"""JupyterLab server plumbing: saving a course notebook keeps the kernel metadata the repository stores.

Started by `make lab` (ContentsManager.pre_save_hook), so that opening a notebook and letting autosave run leaves
the file as it was: JupyterLab would otherwise write the learner's kernel name and Python version into it.
"""

from __future__ import annotations

COURSE_KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
COURSE_LANGUAGE_INFO = {"name": "python"}


COURSE_FOLDERS = ("notebooks/", "labs/", "solutions/")


def is_course_notebook(path: str) -> bool:
    """Whether an API path (relative to the folder JupyterLab serves, the checkout) is one of the course's own."""
    path = path.lstrip("/")
    return path == "START_HERE.ipynb" or (path.startswith(COURSE_FOLDERS) and path.count("/") == 1)


def keep_course_metadata(model: dict, path: str = "", **_: object) -> None:
    """Put the course's kernelspec and language_info back into one of its Python notebooks about to be saved;
    a learner's own notebook, or one with another language's kernel, is saved as JupyterLab wrote it."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict) or not is_course_notebook(path):
        return
    metadata = model["content"].setdefault("metadata", {})
    if (metadata.get("kernelspec") or {}).get("language", "python") != "python":
        return
    metadata["kernelspec"] = dict(COURSE_KERNELSPEC)
    metadata["language_info"] = dict(COURSE_LANGUAGE_INFO)
