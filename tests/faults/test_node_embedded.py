"""The embedded agent dies with its console, or is replaced by the next one (issue 24,
finding 7).

`make run` started its local agent in a session of its own, so a `kill -9` of the console
left the agent running: the restarted console's agent then exited 2 ("another agent is
running with state dir …"), and a later clean stop left the old agent behind. Now the agent
watches the console that started it (`--parent-pid`), and a console that finds an agent of
a previous one on its state dir (frozen here, so it cannot notice) stops it first.
"""

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from agents.node.state import lock_holder
from tests.e2e.conftest import RunningConsole, console_database, start_console, wait_for

pytestmark = pytest.mark.e2e

NODE = "local-gpu-0"


def agent_of(console: RunningConsole, *, other_than: int = 0) -> int:
    """The pid of the agent holding the console's local node state dir (the console
    answers while it is still replacing a leftover agent: wait for its own)."""
    state_dir = console.var_dir / "agent" / NODE

    def holder() -> int | None:
        pid = lock_holder(state_dir)
        return pid if pid != other_than else None

    return wait_for(holder, 90, message="the local agent to hold its lock")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def kill_console(console: RunningConsole) -> None:
    """`kill -9` of `make run`: its whole session (the agent has one of its own)."""
    os.killpg(console.process.pid, signal.SIGKILL)
    console.process.wait()


def test_the_local_agent_goes_with_its_console_and_a_leftover_is_replaced(tmp_path, node_figures):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    state_dir = var_dir / "agent" / NODE
    with console_database() as database:
        # A leftover: the agent of a console killed while the agent could not notice.
        with start_console(var_dir, database) as console:
            first = agent_of(console)
            os.kill(first, signal.SIGSTOP)
            node_figures.fault()
            kill_console(console)
        thaw = threading.Thread(target=thaw_once_told_to_stop, args=(first,), daemon=True)
        thaw.start()
        try:
            with start_console(var_dir, database) as console:
                second = agent_of(console, other_than=first)
                assert second != first and alive(second)
                wait_for(lambda: not alive(first), 30, message="the leftover agent to exit")
                assert "another agent is running" not in console.output()
                node_figures.survive()
                # Killed -9 again, with an agent awake this time: it goes by itself.
                node_figures.fault()
                kill_console(console)
                wait_for(lambda: not alive(second), 60, message="the agent to follow its console")
                assert lock_holder(state_dir) is None
                node_figures.survive()
        finally:
            if alive(first):
                os.kill(first, signal.SIGCONT)
        with start_console(var_dir, database) as console:
            third = agent_of(console, other_than=second)
            assert "another agent is running" not in console.output()
        assert not alive(third)  # a clean stop leaves no agent behind
        assert lock_holder(state_dir) is None
        assert _agents_on(state_dir) == []


def _agents_on(state_dir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agents.node" in argv and str(state_dir).encode() in argv and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def thaw_once_told_to_stop(pid: int, timeout: float = 180.0) -> None:
    """Let the frozen agent run once the next console has sent it SIGTERM (pending)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        pending = next(line for line in status.splitlines() if line.startswith("ShdPnd:"))
        if int(pending.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def test_a_killed_local_agent_is_started_again(tmp_path, node_figures):
    """Supervision (console.supervise): `kill -9` of the embedded agent while its console
    runs; the console starts a new one after its back-off, which takes the state dir."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    with start_console(var_dir) as console:
        first = agent_of(console)
        node_figures.fault()
        os.kill(first, signal.SIGKILL)
        second = agent_of(console, other_than=first)
        assert second != first and alive(second)
        assert "local agent exited with -9; starting it again in 1 s" in console.output()
        node_figures.survive()
    assert not alive(second)  # a clean stop stops the restarted one too
