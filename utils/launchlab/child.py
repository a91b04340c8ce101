"""Child processes with a deadline: run code apart from the notebook and read back the RESULT lines it prints.

The one way the course runs another process: an experiment that may hang or corrupt a CUDA context (chapter
06's broken rules, lab 06's checkers), or the ranks of a distributed program (chapter 08, through torchrun).
The child prints `RESULT {json}` lines with `result(...)`; the parent's `ChildRun.results()` reads them back.
A child that outlives its deadline is stopped with its whole process group, keeping what it printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

RESULT_PREFIX = "RESULT "
# torchrun's banner about OMP_NUM_THREADS: true for every run, so not worth echoing each time.
_QUIET = ("*****", "Setting OMP_NUM_THREADS")


# ---- inside the child ----------------------------------------------------------------------------------------


def say(line: str) -> None:
    """Print a whole line in one write, so lines from different processes never interleave mid-line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def result(**values: object) -> None:
    """Print one RESULT line that ChildRun.results() parses."""
    say(RESULT_PREFIX + json.dumps(values))


# ---- in the parent ------------------------------------------------------------------------------------------


@dataclass
class ChildRun:
    """What a child did: exit code, seconds, whether its deadline stopped it, and every line it printed."""

    returncode: int | None
    seconds: float
    timed_out: bool
    lines: list[str] = field(default_factory=list)
    ended_at: float = 0.0  # time.time() when the child (every process of its group) had stopped

    @property
    def ok(self) -> bool:
        """True when the child exited cleanly within its deadline."""
        return self.returncode == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """Everything it printed (stdout and stderr, in order)."""
        return "\n".join(self.lines)

    def results(self) -> list[dict]:
        """The JSON objects it printed on lines starting with RESULT_PREFIX."""
        # Each process writes whole lines, but torchrun may still join two ranks' lines: split at every prefix.
        found = []
        for line in self.lines:
            for chunk in line.split(RESULT_PREFIX)[1:]:
                found.append(json.JSONDecoder().raw_decode(chunk)[0])
        return found

    def tagged(self, tag: str) -> list[str]:
        """Output lines starting with `tag` (for example "COLLECTIVE" or "WATCHDOG")."""
        return [line for line in self.lines if line.startswith(tag)]

    def last_lines(self, count: int = 3) -> str:
        """The last `count` non-empty lines of its output."""
        return "\n".join([line for line in self.lines if line.strip()][-count:])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, with launchlab importable and output unbuffered."""
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left."""
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


def run(command: Sequence[str], timeout_s: float, echo: bool = False, env: dict[str, str] | None = None,
        cwd: str | Path | None = None, exit_after_result_s: float | None = None) -> ChildRun:
    """Run `command` in its own process group, never past `timeout_s`; with echo, print its lines as they come.

    With `exit_after_result_s`, a child that printed a RESULT line but has not exited that many seconds later
    is stopped (a GPU kernel that never ends keeps its process from exiting); it then counts as finished.
    """
    start = time.perf_counter()
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=child_env(env), cwd=cwd, start_new_session=True)
    lines: list[str] = []
    reported = threading.Event()

    def pump() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            line = line.rstrip("\n")
            lines.append(line)
            if RESULT_PREFIX in line:
                reported.set()
            if echo and line.strip() and not line.startswith(_QUIET):
                print(line, flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    deadline = start + timeout_s
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                timed_out = True
                if echo:
                    print(f"[child] no exit after {timeout_s:.0f} s: stopping it", flush=True)
                _stop(process)
                break
            if exit_after_result_s is not None and reported.is_set():
                try:
                    process.wait(timeout=min(exit_after_result_s, remaining))
                except subprocess.TimeoutExpired:
                    _stop(process)
                break
            try:
                process.wait(timeout=min(0.1, remaining))
                break
            except subprocess.TimeoutExpired:
                continue
    except BaseException:
        _stop(process)   # an interrupted cell must not leave its child on the GPU, past any deadline
        raise
    process.wait()
    ended_at = time.time()
    reader.join(timeout=5)
    return ChildRun(process.returncode, time.perf_counter() - start, timed_out, lines, ended_at)


def run_python(script: str, timeout_s: float = 120.0, echo: bool = False,
               exit_after_result_s: float | None = None) -> ChildRun:
    """Run `script` in a fresh Python process with launchlab importable; never waits past `timeout_s`."""
    return run([sys.executable, "-c", script], timeout_s, echo=echo, exit_after_result_s=exit_after_result_s)
