"""Finding 1 as it was found: the real console (`run_console`), a fault-tolerant job, its
agent killed -9 and started again (it adopts the worker), then the worker's fence wrapper
killed -9. Before, the agent reported "exited with code None", attempt 2 started on the
same node and GPU, and attempt 1 ran on unfenced beside it. The worker holds an exclusive
lock (flock) while it runs, so a second live copy would find it taken and say so.
"""

import os
import signal
from pathlib import Path

import pytest

from agents.node.state import lock_holder
from tests.e2e.conftest import RunningConsole, start_console, wait_for

pytestmark = pytest.mark.e2e

NODE = "local-gpu-0"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def locked_worker(folder: Path) -> str:
    lock, busy = folder / "worker.lock", folder / "busy"
    return (
        f"flock -n {lock} sh -c 'echo $$ > {folder}/pid-$ATTEMPT; "
        f'while :; do echo "attempt $ATTEMPT"; sleep 0.1; done\' '
        f'|| echo "BUSY attempt $ATTEMPT" >> {busy}'
    )


def wrapper_of(pid: int) -> int:
    """The fence wrapper above a worker's process."""
    while pid > 1:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if argv[0].endswith(b"fencewrap"):
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("no fence wrapper above the worker")


def api(console: RunningConsole, method: str, path: str, **kwargs) -> dict:
    response = console.api().request(method, f"{console.url}/api/v1/{path}", timeout=10, **kwargs)
    assert response.status_code in (200, 201), response.text
    return response.json()


def test_a_killed_wrapper_of_an_adopted_worker_never_leaves_two_copies_of_its_rank(
    tmp_path, node_figures
):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    with start_console(var_dir) as console:
        job = api(
            console,
            "POST",
            "jobs",
            json={
                "quota": "vision-h200",
                "image": "busybox",
                "command": locked_worker(tmp_path),
                "gpus_per_worker": 1,
                "cpus_per_worker": 1,
                "memory_gb_per_worker": 1,
                "fault_tolerance": True,
            },
        )
        first = wait_for(
            lambda: (tmp_path / "pid-1").exists() and int((tmp_path / "pid-1").read_text()),
            90,
            message="attempt 1 to hold its lock",
        )
        # Killed -9; the console's supervisor starts it again (docs/processes.md). A second
        # agent started here by hand raced that restart: the console's new agent stopped it
        # as a leftover, and the job's attempts moved on under the test.
        os.kill(lock_holder(var_dir / "agent" / NODE), signal.SIGKILL)
        try:
            wait_for(
                lambda: "adopted 1 workers" in console.output(),
                60,
                message="the restarted agent to adopt the worker",
            )
            node_figures.fault()
            os.kill(wrapper_of(first), signal.SIGKILL)
            wait_for(
                lambda: (tmp_path / "pid-2").exists() or (tmp_path / "busy").exists(),
                120,
                message="attempt 2 to start",
            )
            copies = 1 + alive(first)
            node_figures.live_copies(f"job {job['id']} rank 0", copies)
            assert not (tmp_path / "busy").exists(), (tmp_path / "busy").read_text()
            assert copies == 1
            body = api(console, "GET", f"jobs/{job['id']}")
            assert body["attempt"] == 2
            node_figures.survive()
            api(console, "POST", f"jobs/{job['id']}/stop")
            wait_for(
                lambda: api(console, "GET", f"jobs/{job['id']}")["status"] == "Stopped",
                60,
                message="the job to stop",
            )
        finally:
            if alive(first):
                os.kill(first, signal.SIGKILL)
