"""Chapter 08's kit: the ranks of a torch.distributed program run from a notebook, and what every rank starts with.

torchrun runs as a child (launchlab.child: output streamed line by line, a deadline that stops every rank, so a
hung collective never hangs the notebook); inside a rank, `init`, `result`, `Watchdog`, `unrolled`, `shutdown`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import child
from .child import ChildRun, result, say
from .env import CellSkipped, gpu_count

__all__ = ["MULTICAST_OFF", "ChildRun", "NotEnoughGPUs", "RankRun", "Watchdog", "init", "require_gpus", "result",
           "run_ranks", "say", "shutdown", "unrolled"]


class NotEnoughGPUs(CellSkipped):
    """This cell needs more GPUs than the machine has; IPython shows one line, not a traceback."""


def require_gpus(count: int) -> None:
    """Stop the cell with one clear line unless this machine has `count` CUDA GPUs."""
    have = gpu_count()
    if have < count:
        raise NotEnoughGPUs(f"this cell runs {count} ranks, one per GPU, and this machine has {have} CUDA GPU(s); "
                            "its gloo (CPU) counterpart above shows the same idea, and the reference run shows the "
                            "two-GPU figures")


RankRun = ChildRun  # what a torchrun child did: see launchlab.child

# NVLink multicast (NVLS) stays off in every rank, whatever the caller passes, as everywhere in this course: NCCL,
# symmetric memory and NVSHMEM then use their ordinary algorithms on every machine.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def run_ranks(script: str, nprocs: int = 2, args: tuple[str, ...] = (), timeout_s: float = 120.0,
              env: dict[str, str] | None = None, echo: bool = True) -> ChildRun:
    """Run `script` on `nprocs` ranks with torchrun (--standalone), echoing its output as it comes; every rank
    starts with NVLink multicast off (MULTICAST_OFF)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ranks_program.py"
        path.write_text(script, encoding="utf-8")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}",
                   str(path), *args]
        return child.run(command, timeout_s, echo=echo, env={**(env or {}), **MULTICAST_OFF}, cwd=tmp)


# ---- inside a rank: what every program of chapter 08 and its checkers starts with ------------------------------

def init(backend: str):
    """Join the process group torchrun describes; with nccl, bind this rank to its own GPU. -> (rank, world, device)"""
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    return dist.get_rank(), dist.get_world_size(), device


class Watchdog:
    """Stops this rank if it has not finished within `seconds`, saying which collective it was waiting in."""

    def __init__(self, rank: int, seconds: float):
        self.rank, self.seconds, self.log = rank, seconds, []
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def collective(self, op: str, numel: int) -> None:
        """Log a collective as this rank issues it (sequence number, operation, size, wall clock)."""
        self.log.append(op)
        say(f"COLLECTIVE rank={self.rank} seq={len(self.log)} op={op} numel={numel} t={time.time():.3f}")

    def finish(self) -> None:
        """The program completed: stand down."""
        self._done.set()

    def _watch(self) -> None:
        if not self._done.wait(self.seconds):
            last = f"#{len(self.log)} ({self.log[-1]})" if self.log else "none yet"
            say(f"WATCHDOG rank={self.rank} no completion after {self.seconds:.0f} s; last collective issued: "
                f"{last}; stopping this rank t={time.time():.3f}")
            os._exit(3)


def unrolled(all_reduce, layers: int):
    """f(x, w): `layers` times x = all_reduce(tanh(x @ w)), written out straight, as dynamo sees a model's
    forward (it cannot resume a graph inside a loop after a break: the whole frame would run eagerly)."""
    body = "".join("    x = all_reduce(torch.tanh(x @ w))\n" for _ in range(layers))
    import torch

    namespace = {"all_reduce": all_reduce, "torch": torch}
    exec(f"def layers(x, w):\n{body}    return x\n", namespace)  # noqa: S102  (generated from a fixed template)
    return namespace["layers"]


def shutdown(deadline_s: float = 10.0) -> None:
    """Tear the process group down, but exit anyway if that has not finished within `deadline_s` (a group whose
    NCCL communicator a captured CUDA graph used may not tear down cleanly; the results are printed by then)."""
    import torch.distributed as dist

    done = threading.Event()

    def tear_down() -> None:
        dist.destroy_process_group()
        done.set()

    threading.Thread(target=tear_down, daemon=True).start()
    if not done.wait(deadline_s):
        say(f"SHUTDOWN process group teardown took over {deadline_s:.0f} s; exiting without it")
        sys.stdout.flush()
        os._exit(0)
