"""Self-fencing, end to end (issue 9, fifth bullet and "done when").

The real console (`manage.py run_console`: web server, scheduler and monitors) with short
timeouts (NotReady after 3 s, Lost after 12 s: the lease is what agents.fencing leaves
before that), its local agent with the process runtime, and workers that hold an exclusive
lock on a file (flock) while they run, so a second copy would find the lock taken.

The agent is frozen with SIGSTOP past the node-lost timeout. Each worker's own wrapper stops
it when the lease runs out; only then does the console declare it lost: the job never shows
Failed while its process still runs (Unknown meanwhile), and with fault tolerance the second
attempt, on another node, starts only once the first copy is gone. The old code showed
Failed while the process ran on, and ran two copies for about 25 s.
"""

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.fencing import plan_fence
from tests.e2e.conftest import ROOT, RunningConsole, start_console, wait_for

pytestmark = pytest.mark.e2e

TIMEOUTS = {"NODE_NOT_READY_AFTER": "3", "NODE_LOST_TIMEOUT": "12"}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    saved = {key: os.environ.get(key) for key in TIMEOUTS}
    os.environ.update(TIMEOUTS)
    try:
        with start_console(tmp_path_factory.mktemp("fence-console")) as running:
            yield running
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def api_get(console: RunningConsole, path: str) -> dict:
    response = console.api().get(f"{console.url}/api/v1/{path}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def submit(console: RunningConsole, command: str, **extra) -> dict:
    body = {
        "quota": "vision-h200",
        "image": "busybox",
        "command": command,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        **extra,
    }
    response = console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def lock_is_free(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def locked_worker(tmp_path: Path) -> str:
    """Holds the lock while it runs; a second copy finds it taken and says so."""
    lock, busy = tmp_path / "worker.lock", tmp_path / "busy"
    return (
        f"flock -n {lock} sh -c 'echo $$ > {tmp_path}/pid-$ATTEMPT; "
        f'echo "holding $ATTEMPT"; while :; do sleep 0.2; done\' '
        f'|| echo "BUSY attempt $ATTEMPT" >> {busy}'
    )


def agent_pid(console: RunningConsole, name: str = "local-gpu-0") -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = str(console.var_dir).encode() in b" ".join(cmdline)
        if b"agents.node" in cmdline and name.encode() in cmdline and ours:
            return int(entry.name)
    raise AssertionError(f"agent {name} not found")


def node_ready(console: RunningConsole, name: str) -> bool:
    nodes = api_get(console, "nodes")["nodes"]
    return any(n["name"] == name and n["state"] == "Ready" for n in nodes)


def test_the_lease_is_shorter_than_the_node_lost_timeout():
    timing = plan_fence(12)
    assert timing.lease_seconds + timing.kill_grace + timing.margin <= 12
    assert plan_fence(300).lease_seconds == pytest.approx(240 - 0.2)


def test_a_frozen_agent_never_lets_the_job_show_failed_while_its_worker_runs(console, tmp_path):
    wait_for(lambda: node_ready(console, "local-gpu-0"), 60, message="the local node")
    job = submit(console, locked_worker(tmp_path))
    wait_for(lambda: (tmp_path / "pid-1").exists(), 60, message="the worker to hold its lock")
    worker = int((tmp_path / "pid-1").read_text())
    agent = agent_pid(console)
    os.kill(agent, signal.SIGSTOP)
    frozen_at = time.monotonic()
    seen: list[tuple[float, str, str, bool]] = []
    try:
        while time.monotonic() - frozen_at < 60:
            body = api_get(console, f"jobs/{job['id']}")
            running = alive(worker)
            seen.append(
                (time.monotonic() - frozen_at, body["status"], body["display_status"], running)
            )
            assert not (body["status"] == "Failed" and running), seen[-5:]
            if body["status"] == "Failed":
                break
            time.sleep(0.2)
    finally:
        os.kill(agent, signal.SIGCONT)
    statuses = [status for _, status, _, _ in seen]
    assert statuses[-1] == "Failed", seen[-5:]
    assert "worker 0 lost: node lost" in body["status_reason"]
    # While nobody could know, it said so; the worker was gone before the job failed.
    assert any(shown == "Unknown (node not reachable)" and running for _, _, shown, running in seen)
    died = next(t for t, _, _, running in seen if not running)
    failed = next(t for t, status, _, _ in seen if status == "Failed")
    assert died < failed
    assert lock_is_free(tmp_path / "worker.lock")
    assert not (tmp_path / "busy").exists()
    # The wrapper's own line says why the worker stopped, once the agent ships it.
    wait_for(
        lambda: any(
            "lease with the console ran out" in line["text"]
            for line in api_get(console, f"jobs/{job['id']}/logs?after=-1")["lines"]
        ),
        30,
        message="the fence line in the worker's log",
    )


def test_with_fault_tolerance_the_next_attempt_starts_only_after_the_first_is_gone(
    console, tmp_path
):
    wait_for(lambda: node_ready(console, "local-gpu-0"), 60, message="the local node")
    job = submit(console, locked_worker(tmp_path), fault_tolerance=True)
    wait_for(lambda: (tmp_path / "pid-1").exists(), 60, message="attempt 1 to hold its lock")
    first = int((tmp_path / "pid-1").read_text())
    assert api_get(console, f"jobs/{job['id']}")["pods"][0]["node"] == "local-gpu-0"

    # A second node, for the restart to go to.
    env = {**os.environ, **_console_env(console)}
    token = subprocess.run(
        [sys.executable, "manage.py", "create_agent_token", "--note", "second node"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    second = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents.node",
            "--server",
            console.url,
            "--name",
            "second-node",
            "--state-dir",
            str(tmp_path / "second"),
            "--runtime",
            "process",
            "--fake-gpus",
            "8xH200",
            "--cpus",
            "112",
            "--memory-gb",
            "2048",
        ],
        cwd=ROOT,
        env={**env, "GPU_AGENT_BOOTSTRAP_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    agent = agent_pid(console)
    try:
        wait_for(lambda: node_ready(console, "second-node"), 60, message="the second node")
        os.kill(agent, signal.SIGSTOP)
        wait_for((tmp_path / "pid-2").exists, 90, message="attempt 2 to hold the lock")
        second_pid = int((tmp_path / "pid-2").read_text())
        assert not alive(first)  # gone before attempt 2 could take the lock
        assert not (tmp_path / "busy").exists(), (tmp_path / "busy").read_text()
        body = api_get(console, f"jobs/{job['id']}")
        assert body["attempt"] == 2 and body["node_loss_count"] == 1
        assert body["pods"][-1]["node"] == "second-node"
        (record,) = body["restarts"]
        assert record["kind"] == "node_lost"
        assert alive(second_pid)
        stop = console.api().post(f"{console.url}/api/v1/jobs/{job['id']}/stop", timeout=10)
        assert stop.status_code == 200, stop.text
    finally:
        os.kill(agent, signal.SIGCONT)
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()
    assert not (tmp_path / "busy").exists()


def _console_env(console: RunningConsole) -> dict[str, str]:
    """The running console's own environment (its database, whichever backend)."""
    raw = Path(f"/proc/{console.process.pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
