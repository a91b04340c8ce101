#!/usr/bin/env bash
# Create the course's virtual environment and install the course into it.
# Usage: utils/bootstrap.sh VENV_DIR
# It installs the versions the reference runs used, read from utils/launchlab/tested_versions.toml (the file
# launchlab.env reads too): with an NVIDIA driver, PyPI's torch (its CUDA build), triton, CuPy for the driver's CUDA
# major and cuda-core; without one, PyTorch's CPU-only build of the same torch release (or, where it cannot be
# installed, PyPI's build of that release), and CuPy and cuda-core still installed so their cells fail with the
# course's clear message. An existing torch in VENV_DIR is kept: for the
# tested versions start from a fresh VENV_DIR.
set -euo pipefail
venv=${1:?usage: utils/bootstrap.sh VENV_DIR}
python=${BOOTSTRAP_PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tested_file="$here/launchlab/tested_versions.toml"

# tomllib (the tested versions' file) and the course need Python 3.11 or newer: say so before building anything.
for candidate in "$python" "$venv/bin/python"; do
  if command -v "$candidate" >/dev/null 2>&1 && ! "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "the course needs Python 3.11 or newer; $candidate is $("$candidate" --version 2>&1)." >&2
    echo "Run with BOOTSTRAP_PYTHON=python3.12 (and delete $venv if it was made with the old one)." >&2
    exit 1
  fi
done
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# tested SECTION KEY: one entry of tested_versions.toml (the course needs Python 3.11+, which has tomllib).
tested() {
  "$venv/bin/python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))[sys.argv[2]][sys.argv[3]])' \
    "$tested_file" "$1" "$2"
}
torch_version=$(tested tested torch)
triton_version=$(tested tested triton)
cupy_version=$(tested tested cupy)
cuda_core_version=$(tested tested cuda-core)
# The CPU-only build is not on PyPI; PyTorch publishes it on its own index. TORCH_CPU_VERSION overrides the pin
# where that index cannot be reached and a mirror or local wheelhouse carries another CPU build.
torch_cpu_version=${TORCH_CPU_VERSION:-$(tested cpu torch)}
torch_cpu_index=${TORCH_CPU_INDEX:-$(tested cpu index)}

cuda_major=""
if command -v nvidia-smi >/dev/null 2>&1; then
  cuda_major=$(timeout 20 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1 || true)
fi

if [ -n "$cuda_major" ]; then
  echo "NVIDIA driver found (CUDA $cuda_major): installing the tested torch $torch_version (CUDA build)," \
    "triton $triton_version, cupy-cuda${cuda_major}x $cupy_version, cuda-core $cuda_core_version"
  "${pip[@]}" "torch==$torch_version" "triton==$triton_version" "cupy-cuda${cuda_major}x==$cupy_version" \
    "cuda-core==$cuda_core_version"
else
  if "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "no NVIDIA driver: keeping the torch already in $venv (a fresh $venv gets the tested release)"
  else
    echo "no NVIDIA driver: installing CPU-only PyTorch $torch_cpu_version"
    # A local wheel or mirror is tried first; PyTorch's CPU index is the public route. Where neither gives the
    # tested release's CPU build and TORCH_CPU_VERSION names no other, PyPI's build of the same release is taken:
    # on Linux x86_64 its CUDA build, which runs on a CPU too, at about 4.6 GB installed against the CPU build's 0.8.
    pip_log=$(mktemp)
    trap 'rm -f "$pip_log"' EXIT
    if ! "${pip[@]}" "torch==$torch_cpu_version" 2>"$pip_log" \
        && ! "${pip[@]}" "torch==$torch_cpu_version" --extra-index-url "$torch_cpu_index" 2>"$pip_log"; then
      echo "could not install torch $torch_cpu_version from a local mirror or $torch_cpu_index; pip said:" >&2
      grep -v "^WARNING: Location" "$pip_log" | tail -n 3 >&2 || true
      if [ -n "${TORCH_CPU_VERSION:-}" ]; then
        echo "TORCH_CPU_VERSION=$TORCH_CPU_VERSION names a build pip cannot install here; name one it can reach" \
          "(a release other than the tested $torch_version may teach differently in places)." >&2
        exit 1
      fi
      echo "installing PyPI's torch $torch_version instead, the tested release (on Linux x86_64 its CUDA build," \
        "which runs on a CPU too: a download of several GB, shown without progress)"
      "${pip[@]}" "torch==$torch_version" || {
        echo "could not install PyPI's torch $torch_version either (see pip's message above); set" \
          "TORCH_CPU_VERSION to a CPU build you can reach, e.g. TORCH_CPU_VERSION=2.13.0+cpu (another release" \
          "than the tested one)." >&2
        exit 1
      }
    fi
  fi
  "${pip[@]}" "cupy-cuda13x==$cupy_version" "cuda-core==$cuda_core_version"
fi
"${pip[@]}" -e ".[dev]"
# The maintainers' tools (utils/launchlab_tools): their own distribution, which learners' notebooks never import.
"${pip[@]}" -e utils
"$venv/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (LaunchLab)" >/dev/null
# JupyterLab's settings for this environment: no news pop-up, no update check (utils/jupyterlab_overrides.json).
mkdir -p "$venv/share/jupyter/lab/settings"
cp "$here/jupyterlab_overrides.json" "$venv/share/jupyter/lab/settings/overrides.json"
# Python prints only the first line: a `| head -n 1` here would close the pipe on a Python still writing.
echo "ready: $("$venv/bin/python" -c 'import launchlab.env as e; print(e.describe().splitlines()[0])')"
