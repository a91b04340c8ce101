"""launchlab.child: the one way the course runs a child process with a deadline and reads its RESULT lines."""

import os
import subprocess
import time

import pytest

from launchlab import child


def test_a_child_reports_results_and_its_output():
    done = child.run_python("import launchlab\nfrom launchlab.child import result\nprint('child', launchlab.__version__)\n"
                            "result(answer=42, items=[1, 2])", timeout_s=60)
    assert done.ok and not done.timed_out
    assert done.results() == [{"answer": 42, "items": [1, 2]}]
    assert done.output.startswith("child ") and done.last_lines(1).startswith("RESULT ")


def test_a_hung_child_is_stopped_at_its_deadline_keeping_what_it_printed():
    start = time.perf_counter()
    stuck = child.run_python("print('before', flush=True)\nimport time\ntime.sleep(60)", timeout_s=2)
    assert stuck.timed_out and not stuck.ok and "before" in stuck.output
    assert time.perf_counter() - start < 20


def test_a_child_that_reported_but_cannot_exit_is_stopped_soon_after():
    script = "from launchlab.child import result\nimport time\nresult(done=True)\ntime.sleep(60)"
    start = time.perf_counter()
    ran = child.run_python(script, timeout_s=60, exit_after_result_s=1)
    assert ran.results() == [{"done": True}] and not ran.timed_out
    assert time.perf_counter() - start < 20


def test_joined_result_lines_are_split():
    ran = child.ChildRun(0, 0.1, False, ['RESULT {"rank": 0}RESULT {"rank": 1}', "noise"])
    assert ran.results() == [{"rank": 0}, {"rank": 1}]


def test_an_interrupted_wait_stops_the_child_before_the_interrupt_goes_on(monkeypatch, tmp_path):
    pid_file = tmp_path / "pid"
    script = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    real_wait = subprocess.Popen.wait

    def interrupted_wait(self, timeout=None):
        if pid_file.exists() and timeout is not None and timeout <= 0.1:
            raise KeyboardInterrupt        # what a learner's interrupt raises inside the cell's wait
        return real_wait(self, timeout=timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        child.run_python(script, timeout_s=60)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)                    # gone: stopped with its group, not left running
