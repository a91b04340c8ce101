"""Saving through JupyterLab keeps a course notebook as the repository holds it (launchlab/jupyter_hooks.py)."""

import json

from launchlab.jupyter_hooks import COURSE_KERNELSPEC, COURSE_LANGUAGE_INFO, keep_course_metadata


def test_the_hook_puts_the_course_metadata_back():
    learners = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                "language_info": {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"},
                "rise": {"scroll": True}}
    model = {"type": "notebook", "content": {"metadata": learners, "cells": []}}
    keep_course_metadata(model=model, path="notebooks/07_overhead_ladder.ipynb", contents_manager=None)
    assert model["content"]["metadata"] == {"kernelspec": COURSE_KERNELSPEC, "language_info": COURSE_LANGUAGE_INFO,
                                            "rise": {"scroll": True}}
    text = {"type": "file", "content": "print(1)"}
    keep_course_metadata(model=text, path="x.py", contents_manager=None)
    assert text == {"type": "file", "content": "print(1)"}


def test_every_course_notebook_already_holds_what_the_hook_writes(root):
    paths = [root / "START_HERE.ipynb", *(p for d in ("notebooks", "labs", "solutions") for p in (root / d).glob("*.ipynb"))]
    assert len(paths) > 30
    for path in paths:
        metadata = json.loads(path.read_text())["metadata"]
        assert (metadata.get("kernelspec"), metadata.get("language_info")) == (COURSE_KERNELSPEC, COURSE_LANGUAGE_INFO), path


def test_a_learners_own_notebook_and_another_language_are_saved_as_written():
    for path, kernelspec in (("mine.ipynb", {"name": "python3", "language": "python"}),
                             ("notebooks/drafts/mine.ipynb", {"name": "python3", "language": "python"}),
                             ("notebooks/07_overhead_ladder.ipynb", {"name": "ir", "language": "R"})):
        metadata = {"kernelspec": dict(kernelspec), "language_info": {"name": kernelspec["language"], "version": "9"}}
        model = {"type": "notebook", "content": {"metadata": json.loads(json.dumps(metadata)), "cells": []}}
        keep_course_metadata(model=model, path=path, contents_manager=None)
        assert model["content"]["metadata"] == metadata, path
