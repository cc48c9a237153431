"""The embedded agent's supervisor (console.supervise): a child that dies is started again
with exponential back-off, bounded; a stop ends the supervision. Real child processes.
docs/processes.md ("The embedded agent")."""

import itertools
import os
import signal
import subprocess
import sys
import time

import pytest

from console.supervise import Supervisor, restart_delay


@pytest.mark.parametrize(
    ("failures", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0)]
)
def test_the_back_off_doubles_up_to_a_cap(failures, expected):
    assert restart_delay(failures) == expected


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _wait(check, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_child_is_started_again_and_a_stop_ends_it():
    lines: list[str] = []
    supervisor = Supervisor(_sleeper, base=0.05, report=lines.append)
    first = supervisor.process
    try:
        os.kill(first.pid, signal.SIGKILL)
        _wait(lambda: supervisor.process.pid != first.pid)
        assert supervisor.process.poll() is None  # the new one runs
        assert supervisor.restarts == 1
        assert lines == ["local agent exited with -9; starting it again in 0.05 s"]
    finally:
        last = supervisor.stop()
        last.terminate()
        last.wait()
    supervisor.join(5)
    assert supervisor.restarts == 1  # the stop's exit is not restarted
    assert last.pid == supervisor.process.pid


def test_restarts_are_bounded_and_back_off():
    starts: list[float] = []

    def failing() -> subprocess.Popen:
        starts.append(time.monotonic())
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    lines: list[str] = []
    supervisor = Supervisor(failing, base=0.05, max_restarts=3, report=lines.append)
    supervisor.join(20)
    assert supervisor.gave_up and supervisor.restarts == 3 and len(starts) == 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[1] >= 0.1 and gaps[2] >= 0.2  # 0.05, 0.1, 0.2 s apart at least
    assert "left stopped" in lines[-1]
