"""The pytest plugin skips tagged cells it cannot run, and says how many and why."""

import nbformat

from launchlab.env import gpu_count

NOTEBOOK = [
    ("x = 1", []),
    ("y = 2", ["gpu"]),
    ("z = 3", ["multi-gpu"]),
    ("assert x == 1", []),
]


def write_notebook(path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": tags}) for src, tags in NOTEBOOK]
    nbformat.write(nb, path)


def test_tagged_cells_are_skipped_and_counted(pytester):
    write_notebook(pytester.path / "demo.ipynb")
    result = pytester.runpytest_subprocess("-p", "launchlab_tools.pytest_plugin", "--nbval-lax", "demo.ipynb")
    have = gpu_count()
    skipped = (have < 1) + (have < 2)
    result.assert_outcomes(passed=4 - skipped, skipped=skipped)
    if skipped:
        result.stdout.fnmatch_lines([f"launchlab: skipped {int(have < 1)} cells tagged gpu*{int(have < 2)} tagged multi-gpu*"])


def test_an_error_in_an_untagged_cell_still_fails(pytester):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from launchlab import require_gpu\nrequire_gpu()"),
                nbformat.v4.new_code_cell("raise ValueError('a real bug')")]
    nbformat.write(nb, pytester.path / "bug.ipynb")
    result = pytester.runpytest_subprocess("-p", "launchlab_tools.pytest_plugin", "--nbval-lax", "bug.ipynb")
    result.assert_outcomes(passed=1, failed=1)
