"""Every notebook follows the course's anatomy, and every CUDA source it ships compiles."""

import hashlib
import json
from pathlib import Path

import nbformat
import pytest

from launchlab_tools.notebooks import (
    course_notebooks,
    cuda_sources,
    source_sha256,
    untagged_reads_of_tagged_names,
)

ALL = course_notebooks(dirs=("notebooks", "solutions", "labs"))
IDS = [p.relative_to(p.parents[1]).as_posix() for p in ALL]


def test_course_has_notebooks_with_a_lab_and_solution_each(root):
    lectures = {p.name for p in (root / "notebooks").glob("*.ipynb")}
    solutions = {p.name for p in (root / "solutions").glob("*.ipynb")}
    assert lectures, "no notebooks"
    assert solutions <= lectures, f"solutions without a lecture: {solutions - lectures}"
    assert {p.name for p in (root / "labs").glob("*.ipynb")} == solutions


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_first_code_cell_imports_launchlab_and_shows_the_environment(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "from launchlab import" in first.source and "show_environment()" in first.source
    tags = {tag for cell in nb.cells for tag in cell.metadata.get("tags", [])}
    if "gpu" in tags:  # multi-gpu cells check for their two GPUs themselves (ranks.require_gpus)
        assert "require_gpu()" in first.source
    assert not first.metadata.get("tags"), "the first cell must run everywhere"


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_untagged_cells_never_read_names_only_gpu_cells_define(path):
    assert untagged_reads_of_tagged_names(nbformat.read(path, as_version=4)) == []


def test_dependency_check_catches_a_cpu_cell_reading_a_gpu_name():
    nb = nbformat.v4.new_notebook()
    gpu = nbformat.v4.new_code_cell("import cupy as cp\nx = cp.ones(3)", metadata={"tags": ["gpu"]})
    nb.cells = [gpu, nbformat.v4.new_code_cell("print(x.sum())")]
    assert untagged_reads_of_tagged_names(nb) == [(1, "x")]


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_source_hash_is_the_guide_format(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in nb["cells"] if c["cell_type"] == "code"]
    assert source_sha256(path) == hashlib.sha256(json.dumps(sources).encode("utf-8")).hexdigest()


def shipped_cuda_sources(root):
    found = []
    for path in sorted((root / "utils" / "launchlab").rglob("*.py")):
        found += [(path.relative_to(root).as_posix(), s) for s in cuda_sources(path.read_text())]
    for path in course_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                found += [(f"{path.relative_to(root).as_posix()} cell {i}", s) for s in cuda_sources(cell.source)]
    return found


def test_course_ships_cuda_sources(root):
    assert len(shipped_cuda_sources(root)) >= 3


DEVICE_RUNTIME_CALLS = ("cudaGraphLaunch", "cudaGetCurrentGraphExec", "cudaGraphSetConditional")


def wheel_cuda_headers() -> list[str]:
    """The CUDA headers the dev extra installs (nvidia-cuda-runtime, nvidia-cuda-cccl), as include folders."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = [Path(p) / "cu13" / "include" for p in (spec.submodule_search_locations or [])] if spec else []
    return [str(d) for root in roots for d in (root, root / "cccl") if d.is_dir()]


def compile_for_hopper(source: str) -> None:
    from cuda.core import Program, ProgramOptions

    from launchlab import devicegraphs
    from launchlab.chapters.ch06 import checkers as ch06
    from launchlab.chapters.ch09 import checkers as ch09

    options = {}
    if any(call in source for call in DEVICE_RUNTIME_CALLS):
        # kernels that call the device runtime compile as relocatable code against the toolkit's headers
        options = {"relocatable_device_code": True, "include_path": [devicegraphs.CUDA_INCLUDE]}
    if "bisect_step(" in source and "void bisect_step" not in source:
        source = ch06.BISECTION_PRELUDE + source  # lab 06's exercise 3 is compiled after the checker's prelude
    if "<cooperative_groups.h>" in source:
        headers = wheel_cuda_headers()
        assert any(Path(d, "cooperative_groups.h").is_file() for d in headers), (
            "cooperative_groups.h not found: install the dev extra (pip install -e '.[dev]'), which brings the "
            "CUDA runtime and CCCL headers")
        options = {**options, "include_path": [*options.get("include_path", []), *headers]}
    if "pdl_wait()" in source and "void pdl_wait" not in source:
        source = ch09.PDL_PRELUDE + source  # lab 09's exercise 1 is compiled after the checker's prelude
    if "grid_barrier(count, generation)" in source and "void grid_barrier" not in source:
        # lab 09's persistent kernel is compiled after the learner's barrier: a stand-in that compiles
        source = "__device__ void grid_barrier(unsigned int* count, volatile unsigned int* generation) {}\n" + source
    Program(source, "c++", ProgramOptions(arch="sm_90", std="c++17", **options)).compile("cubin")


def test_every_cuda_source_compiles_for_a_recent_architecture(root):
    failures = []
    for where, source in shipped_cuda_sources(root):
        try:
            compile_for_hopper(source)
        except Exception as exc:  # NVRTC's log says what is wrong; collect them all
            failures.append(f"{where}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_a_typo_in_a_kernel_fails_the_compile_check():
    with pytest.raises(Exception, match="(?i)error|undefined"):
        compile_for_hopper('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }')
