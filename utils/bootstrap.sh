#!/usr/bin/env bash
# Create the course's virtual environment and install the course into it.
# Usage: utils/bootstrap.sh VENV_DIR
# With an NVIDIA driver: PyTorch's default (CUDA) build and the CuPy wheel for the driver's CUDA major.
# Without one: a CPU-only PyTorch, and CuPy still installed so its cells fail with the course's clear message.
set -euo pipefail
venv=${1:?usage: utils/bootstrap.sh VENV_DIR}
python=${BOOTSTRAP_PYTHON:-python3}
# The CPU-only build is not on PyPI; PyTorch publishes it on its own index.
torch_cpu_version=${TORCH_CPU_VERSION:-2.13.0+cpu}
torch_cpu_index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

cuda_major=""
if command -v nvidia-smi >/dev/null 2>&1; then
  cuda_major=$(timeout 20 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1 || true)
fi

if [ -n "$cuda_major" ]; then
  echo "NVIDIA driver found (CUDA $cuda_major): installing CUDA PyTorch and cupy-cuda${cuda_major}x"
  "${pip[@]}" torch "cupy-cuda${cuda_major}x" triton
else
  echo "no NVIDIA driver: installing CPU-only PyTorch $torch_cpu_version"
  if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    # A local wheel or mirror is tried first; PyTorch's CPU index is the public route.
    "${pip[@]}" "torch==$torch_cpu_version" 2>/dev/null \
      || "${pip[@]}" "torch==$torch_cpu_version" --extra-index-url "$torch_cpu_index"
  fi
  "${pip[@]}" cupy-cuda13x
fi
"${pip[@]}" -e ".[dev]"
# The maintainers' tools (utils/launchlab_tools): their own distribution, which learners' notebooks never import.
"${pip[@]}" -e utils
"$venv/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (LaunchLab)" >/dev/null
echo "ready: $("$venv/bin/python" -c 'import launchlab.env as e; print(e.describe())' | head -n 1)"
