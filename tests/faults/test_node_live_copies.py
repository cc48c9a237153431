"""One live copy per rank, however a worker's fence wrapper dies (issue 24, finding 1).

A process worker is its wrapper's session. The wrapper can die without its worker: `kill -9`
by an operator or by the job itself (`kill -9 $PPID`), while this agent or a previous one
started it. Before, an adopted worker's processes were never killed at all (the agent
reported "exited with code None" and the console started attempt 2 beside attempt 1), and
an own worker's processes outside its process group survived too. Now, at the moment the
agent reports the end, nothing of the worker is alive: not its session, not what carries
its marker.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.node.runtimes.base import WORKER_MARKER, LaunchSpec
from agents.node.runtimes.processes import HOME_MARKER, ProcessRuntime
from agents.node.runtimes.sessions import marked, members

WAIT = 30.0
ROOT = Path(__file__).resolve().parents[2]

# The first agent: launches one worker, says its wrapper's pid, then waits to be killed.
FIRST_AGENT = """
import os, sys, time
from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.processes import ProcessRuntime
rt = ProcessRuntime(sys.argv[1], lambda *a: None, lambda *a: None,
                    base_env={"PATH": os.environ["PATH"]})
rt.launch(LaunchSpec(pod_id=5, job_id=1, attempt=1, rank=0, world_size=1, image="",
                     command=sys.argv[2]))
print(rt.workers()[0].container_id.split(":")[1], flush=True)
time.sleep(600)
"""


def worker_command(folder: Path, *, kill_wrapper: bool = False) -> str:
    """A worker with a process in a process group of its own (so killing the wrapper's
    group alone misses it), printing until it is killed."""
    background = (
        f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); "
        f'open("{folder}/bg", "w").write(str(os.getpid())); time.sleep(600)\' &'
    )
    suicide = "sleep 0.3; kill -9 $PPID; " if kill_wrapper else ""
    return (
        f"{background} echo $$ > {folder}/main; echo started; {suicide}"
        "while :; do echo tick; sleep 0.05; done"
    )


class Watcher:
    """The runtime's callbacks; at the exit it notes what of the worker is still alive."""

    def __init__(self, runtime_home: Path) -> None:
        self.home = f"{HOME_MARKER}={runtime_home.resolve()}".encode()
        self.session = 0
        self.alive_at_exit: list[int] | None = None
        self.exited = threading.Event()

    def on_line(self, pod_id: int, line: str, source: bool = True) -> None:
        pass

    def on_exit(self, pod_id: int) -> None:
        marker = f"{WORKER_MARKER}=5.1".encode()
        self.alive_at_exit = sorted(
            set(members(self.session, None)) | set(marked(self.home, {marker}))
        )
        self.exited.set()


def wait_file(path: Path) -> int:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    pytest.fail(f"{path} never appeared")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.fixture
def node_first_agent(tmp_path):
    """The agent that launched the worker, run in a process of its own and killed -9."""
    started: list[subprocess.Popen] = []

    def start(command: str) -> int:
        proc = subprocess.Popen(
            [sys.executable, "-c", FIRST_AGENT, str(tmp_path / "work"), command],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        wrapper = int(proc.stdout.readline())
        proc.kill()
        proc.wait()
        proc.stdout.close()
        return wrapper

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_adopted_worker_whose_wrapper_is_killed_is_gone_before_its_end_is_reported(
    tmp_path, node_first_agent, node_figures
):
    wrapper = node_first_agent(worker_command(tmp_path))
    main, background = wait_file(tmp_path / "main"), wait_file(tmp_path / "bg")
    watcher = Watcher(tmp_path / "work")
    watcher.session = wrapper
    runtime = ProcessRuntime(
        tmp_path / "work", watcher.on_line, watcher.on_exit, base_env={"PATH": os.environ["PATH"]}
    )
    try:
        assert runtime.adopt({}) == {5: 1}  # the restarted agent takes the worker over
        node_figures.fault()
        os.kill(wrapper, signal.SIGKILL)
        assert watcher.exited.wait(WAIT)
        assert watcher.alive_at_exit == []  # the end is reported only once all is gone
        assert not alive(main) and not alive(background)
        (state,) = runtime.workers()
        assert state.exit_code is None and "killed" in state.error
        node_figures.live_copies("adopted pod 5 rank 0", 1 + len(watcher.alive_at_exit))
        node_figures.survive()
    finally:
        runtime.shutdown(0)
        for pid in (main, background):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_worker_that_kills_its_own_wrapper_leaves_nothing_running(tmp_path, node_figures):
    watcher = Watcher(tmp_path / "work")
    runtime = ProcessRuntime(
        tmp_path / "work", watcher.on_line, watcher.on_exit, base_env={"PATH": os.environ["PATH"]}
    )
    try:
        node_figures.fault()
        runtime.launch(
            LaunchSpec(
                pod_id=5,
                job_id=1,
                attempt=1,
                rank=0,
                world_size=1,
                image="",
                command=worker_command(tmp_path, kill_wrapper=True),
            )
        )
        watcher.session = int(runtime.workers()[0].container_id.split(":")[1])
        main, background = wait_file(tmp_path / "main"), wait_file(tmp_path / "bg")
        assert watcher.exited.wait(WAIT)
        assert watcher.alive_at_exit == []
        assert not alive(main) and not alive(background)
        node_figures.live_copies("own pod 5 rank 0", 1 + len(watcher.alive_at_exit))
        node_figures.survive()
    finally:
        runtime.shutdown(0)
        for name in ("main", "bg"):
            path = tmp_path / name
            if path.exists() and path.read_text().strip() and alive(int(path.read_text())):
                os.kill(int(path.read_text()), signal.SIGKILL)
