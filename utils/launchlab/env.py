"""The machine and the mode of this run: GPU, driver, CUDA runtime and libraries; strict mode; skipping a cell."""

from __future__ import annotations

import functools
import importlib
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# The oldest driver the course's CUDA 12/13 wheels run on (CUDA 12.0's minimum Linux driver).
MIN_DRIVER_MAJOR = 525
# The versions the reference runs used, recorded once: utils/bootstrap.sh installs them from this file too.
TESTED_VERSIONS_FILE = Path(__file__).with_name("tested_versions.toml")
# The libraries whose behaviour the chapters teach, as this module's environment() names them, and their
# distributions as tested_versions.toml names them.
_TESTED_LIBRARIES = {"torch": "torch", "triton": "triton", "cupy": "cupy", "cuda.core": "cuda-core"}


@dataclass(frozen=True)
class Environment:
    """The hardware and software a run happened on."""

    gpu_name: str | None
    gpu_count: int
    compute_capability: str | None
    sm_count: int | None
    driver: str | None
    cuda_runtime: str | None
    python: str
    libraries: dict[str, str | None] = field(default_factory=dict)
    problem: str | None = None
    host_cpu: str | None = None   # host-side figures (enqueue, dispatch, sync) belong to it as much as to the GPU

    @property
    def has_gpu(self) -> bool:
        """True when a CUDA GPU is usable from torch."""
        return self.problem is None


def repo_root() -> Path:
    """The course checkout (LAUNCHLAB_ROOT overrides it)."""
    return Path(os.environ.get("LAUNCHLAB_ROOT") or Path(__file__).resolve().parents[2])


def library_version(name: str) -> str | None:
    """The installed version of a module, or None when it does not import."""
    try:
        module = importlib.import_module(name)
    except Exception:  # a broken install is as good as a missing one here
        return None
    return str(getattr(module, "__version__", "installed"))


def nvidia_smi_driver() -> str | None:
    """The driver version nvidia-smi reports, or None without a driver."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()
    return first[0].strip() if first else None


def _torch_gpu() -> tuple[int, str | None, str | None, int | None, str | None]:
    """(count, name, compute capability, SM count, problem) as torch sees them."""
    try:
        import torch
    except Exception as exc:
        return 0, None, None, None, f"PyTorch does not import ({exc})"
    if torch.version.cuda is None:
        return 0, None, None, None, f"your PyTorch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return 0, None, None, None, "PyTorch finds no CUDA GPU (torch.cuda.is_available() is False)"
    props = torch.cuda.get_device_properties(0)
    cc = f"{props.major}.{props.minor}"
    return torch.cuda.device_count(), props.name, cc, props.multi_processor_count, None


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    """Detect the GPU, driver, CUDA runtime and the libraries the course uses (cached)."""
    count, name, cc, sms, problem = _torch_gpu()
    driver = nvidia_smi_driver()
    if problem and driver:
        major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 0
        if major and major < MIN_DRIVER_MAJOR:
            problem = f"the NVIDIA driver {driver} is older than {MIN_DRIVER_MAJOR}, the oldest CUDA 12 supports"
    cuda_runtime = None
    libs = {m: library_version(m) for m in ("torch", "cupy", "triton", "numpy", "matplotlib")}
    libs["cuda.core"] = library_version("cuda.core")
    if libs["torch"]:
        import torch

        cuda_runtime = torch.version.cuda
    if problem is None and libs["cupy"] is None:
        problem = "CuPy is not installed (the course's raw-kernel cells use it)"
    return Environment(
        gpu_name=name, gpu_count=count, compute_capability=cc, sm_count=sms, driver=driver,
        cuda_runtime=cuda_runtime, python=platform.python_version(), libraries=libs, problem=problem,
        host_cpu=host_cpu_model(),
    )


def host_cpu_model() -> str | None:
    """The host CPU's model name (Linux /proc/cpuinfo, else platform's), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_count() -> int:
    """How many CUDA GPUs torch can use (0 without a usable GPU)."""
    env = environment()
    return env.gpu_count if env.gpu_name else 0


def tier_gpus() -> int:
    """GPUs the tests may use: none in the CPU tier (LAUNCHLAB_TIER=cpu, even on a GPU machine), else gpu_count()."""
    return 0 if os.environ.get("LAUNCHLAB_TIER") == "cpu" else gpu_count()


def gpu_slug(name: str | None = None) -> str:
    """A file-name-safe short name for a GPU, e.g. 'nvidia-h100-80gb-hbm3'; 'cpu' without one."""
    name = name if name is not None else environment().gpu_name
    if not name:
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def describe(env: Environment | None = None) -> str:
    """One paragraph naming the hardware and versions of this run."""
    env = env or environment()
    if env.gpu_name:
        gpu = f"{env.gpu_name} x{env.gpu_count} (sm_{env.compute_capability.replace('.', '')}, {env.sm_count} SMs)"
    else:
        gpu = f"no usable CUDA GPU ({env.problem})"
    libs = ", ".join(f"{k} {v}" for k, v in env.libraries.items() if v)
    return (
        f"GPU: {gpu}\n"
        f"host CPU: {env.host_cpu or 'unknown'} (host-side figures such as launch and sync costs depend on it)\n"
        f"driver: {env.driver or 'none'} | CUDA runtime (torch): {env.cuda_runtime or 'none'} | "
        f"Python {env.python} on {platform.system()} {platform.machine()}\n"
        f"libraries: {libs}"
    )


@functools.lru_cache(maxsize=1)
def tested_versions() -> dict[str, str]:
    """The versions of torch, triton, CuPy and cuda-core the reference runs used (tested_versions.toml)."""
    import tomllib

    with TESTED_VERSIONS_FILE.open("rb") as f:
        return dict(tomllib.load(f)["tested"])


def _release(version: str) -> str:
    """A version without its local build label: '2.11.0+cu130' -> '2.11.0'."""
    return version.split("+", 1)[0]


def version_differences(env: Environment) -> list[str]:
    """'torch 2.13.0 (tested: 2.11.0)' for each course library whose installed release is not the tested one."""
    tested = tested_versions()
    out = []
    for module, dist in _TESTED_LIBRARIES.items():
        have = env.libraries.get(module)
        want = tested.get(dist)
        if have and want and _release(have) != _release(want):
            out.append(f"{module} {have} (tested: {want})")
    return out


def version_note(env: Environment) -> str | None:
    """The line a learner reads when their library versions are not the ones the reference runs used, else None."""
    try:
        differ = version_differences(env)
    except (OSError, KeyError):  # an install without the file: the first cell still prints the rest
        return None
    if not differ:
        return None
    return (f"versions: {', '.join(differ)} differ from the course's reference runs. Behaviour the chapters teach "
            "(graph breaks, what reduce-overhead graphs, conditional nodes, Inductor's launchers) can move between "
            "releases, so your run may disagree with the stored one for that reason. For the tested versions: "
            "delete .venv and run `make lab` (it installs them from utils/launchlab/tested_versions.toml).")


def show_environment() -> Environment:
    """Print the hardware and versions of this run, and a line when the versions are not the tested ones; return them."""
    env = environment()
    print(describe(env))
    note = version_note(env)
    if note:
        print(note)
    return env


def what_to_do(env: Environment) -> str:
    """The next step for the learner, given what is missing."""
    if env.driver is None:
        return ("Run the course on a machine with an NVIDIA GPU and its driver (nvidia-smi should list the GPU), "
                "then run `make lab` there.")
    if "CPU-only" in (env.problem or ""):
        return "Delete .venv and run `make lab` again: on a machine with a driver it installs a CUDA build."
    if "older than" in (env.problem or ""):
        return "Update the NVIDIA driver (the README lists the versions the course was run with)."
    if "CuPy" in (env.problem or ""):
        return "Run `make lab` again, or `pip install cupy-cuda13x` (cupy-cuda12x for a CUDA 12 driver)."
    return "Check `nvidia-smi` and `python -c 'import torch; print(torch.cuda.is_available())'`."


def no_gpu_message(env: Environment | None = None, replaying: bool = False) -> str:
    """The paragraph a learner without a usable GPU reads instead of a traceback."""
    env = env or environment()
    cells = ("The cells tagged `gpu` need one: run here, each shows its output from the course's reference GPU "
             "run instead, under a line marked [reference output], and Run All goes on to the next cell"
             if replaying else
             "The cells tagged `gpu` need one; run on this machine, each prints a one-line note instead of a "
             "traceback")
    return (
        f"No usable CUDA GPU here: {env.problem}.\n"
        f"{cells}. What to do: {what_to_do(env)}\n"
        "What these cells print on a GPU is kept from the course's reference GPU run (reports/gpu/) as the stored "
        "outputs of the lectures (notebooks/) and the solutions (solutions/); a lab's are in its solution."
    )


def strict() -> bool:
    """True under LAUNCHLAB_STRICT=1 (the GPU tier), where a failed claim or check raises instead of printing."""
    return os.environ.get("LAUNCHLAB_STRICT", "") not in ("", "0", "false", "no")


class CellSkipped(RuntimeError):
    """This cell cannot run here (no GPU, too few GPUs, an old driver): IPython shows one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"[skipped] {self}"]


def skip_following_cells(reason: str) -> bool:
    """In IPython, turn every later cell error into one line that names `reason`; False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False

    def handler(shell, etype, value, tb, tb_offset=None):
        line = f"{etype.__name__}: {value}".splitlines()[0][:200]
        note = (f"[skipped: {reason}] this cell stopped at: {line}. "
                "The lecture or solution keeps this cell's output from the reference GPU run.")
        # An error output whose "traceback" is this one line: the cell still counts as failed (for nbval and
        # Run All), but the learner reads a sentence instead of a stack.
        shell._showtraceback(etype, value, [note])

    shell.set_custom_exc((Exception,), handler)
    return True


def skip_cell(reason: str, kind: type[CellSkipped] = CellSkipped) -> None:
    """Stop this cell and every later one that fails for the same reason, each with one line instead of a traceback."""
    skip_following_cells(reason)
    raise kind(reason)


def require_gpu() -> bool:
    """True with a usable GPU; otherwise print what is missing and what to do, and return False."""
    from . import stored  # here, not at the top: stored reads repo_root from this module

    env = environment()
    # In JupyterLab, cells this machine cannot run show their stored reference outputs instead (stored.py):
    # Run All goes on, nothing stored is lost, and every other cell's errors show as usual.
    replaying = stored.install(gpu_count() if env.has_gpu else 0, f"no usable CUDA GPU here ({env.problem})")
    if env.has_gpu:
        return True
    print(no_gpu_message(env, replaying))
    if not replaying:  # elsewhere (a plain IPython, another front end) a GPU cell's error becomes one line
        skip_following_cells(f"no usable CUDA GPU ({env.problem})")
    return False
