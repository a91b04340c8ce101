"""Run the ranks of a torch.distributed program from a notebook: torchrun as a child process, its output
streamed back line by line, and a timeout that stops every rank, so a hung collective never hangs the notebook.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .env import gpu_count, repo_root

RESULT_PREFIX = "RESULT "
# torchrun's banner about OMP_NUM_THREADS: true for every run, so not worth echoing each time.
_BANNER = ("*****", "Setting OMP_NUM_THREADS")


class NotEnoughGPUs(RuntimeError):
    """This cell needs more GPUs than the machine has; IPython shows one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"[skipped] {self}"]


def require_gpus(count: int) -> None:
    """Stop the cell with one clear line unless this machine has `count` CUDA GPUs."""
    have = gpu_count()
    if have < count:
        raise NotEnoughGPUs(f"this cell runs {count} ranks, one per GPU, and this machine has {have} CUDA GPU(s); "
                            "its gloo (CPU) counterpart above shows the same idea, and the reference run shows the "
                            "two-GPU figures")


@dataclass
class RankRun:
    """What a torchrun child did: exit code, seconds, whether the timeout stopped it, and every output line."""

    returncode: int | None
    seconds: float
    timed_out: bool
    lines: list[str] = field(default_factory=list)
    ended_at: float = 0.0  # time.time() when every rank had stopped

    @property
    def ok(self) -> bool:
        """True when every rank exited cleanly within the timeout."""
        return self.returncode == 0 and not self.timed_out

    def results(self) -> list[dict]:
        """The JSON objects the ranks printed on lines starting with RESULT_PREFIX."""
        # Each rank writes whole lines, but torchrun may still join two ranks' lines: split at every prefix.
        found = []
        for line in self.lines:
            for chunk in line.split(RESULT_PREFIX)[1:]:
                found.append(json.JSONDecoder().raw_decode(chunk)[0])
        return found

    def tagged(self, tag: str) -> list[str]:
        """Output lines starting with `tag` (for example "COLLECTIVE" or "WATCHDOG")."""
        return [line for line in self.lines if line.startswith(tag)]


def _child_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    utils = str(repo_root() / "utils")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (utils, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group (torchrun and its ranks), then SIGKILL what is left."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_ranks(script: str, nprocs: int = 2, args: tuple[str, ...] = (), timeout_s: float = 120.0,
              env: dict[str, str] | None = None, echo: bool = True) -> RankRun:
    """Run `script` on `nprocs` ranks with torchrun (--standalone), echoing its output as it comes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ranks_program.py"
        path.write_text(script, encoding="utf-8")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}",
                   str(path), *args]
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=_child_env(env), cwd=tmp, start_new_session=True)
        lines: list[str] = []

        def pump() -> None:
            for line in process.stdout:  # type: ignore[union-attr]
                line = line.rstrip("\n")
                lines.append(line)
                if echo and not line.startswith(_BANNER) and line.strip():
                    print(line, flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            print(f"[run_ranks] no exit after {timeout_s:.0f} s: stopping every rank", flush=True)
            _stop(process)
        ended_at = time.time()
        reader.join(timeout=5)
        return RankRun(process.returncode, time.perf_counter() - start, timed_out, lines, ended_at)


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


def say(line: str) -> None:
    """Print a whole line in one write, so lines from different ranks never interleave mid-line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def result(**values: object) -> None:
    """Print one RESULT line that RankRun.results() parses."""
    say(RESULT_PREFIX + json.dumps(values))


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
    forward (it cannot resume a graph inside a loop or a nested call after a break)."""
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
