"""The fence wrapper (agents/node/fence/fencewrap.c), every worker's parent (issue 9, fifth
bullet): it stops the worker when the node's lease runs out, whatever its agent is doing, for
the process runtime (on the host) and the docker runtime (inside the container) alike; and it
costs well under 2 MB per worker (issue 12: the Python wrapper it replaces took about 13 MB).
"""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from agents.node import fence
from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.containers import DockerOptions, DockerRuntime
from agents.node.runtimes.processes import FENCED, ProcessRuntime
from tests.agents.agentproc import alive
from tests.agents.conftest import TEST_IMAGE, docker_url, remove_node_containers  # noqa: F401
from tests.agents.test_runtime_process import Recorder

WAIT = 20.0


@pytest.fixture
def fence_dir(tmp_path) -> Path:
    folder = tmp_path / "fence"
    fence.install(folder)
    return folder


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_until(predicate, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def run_wrapped(fence_dir: Path, tmp_path: Path, command: str, *extra: str) -> subprocess.Popen:
    with open(tmp_path / "out", "wb") as out:
        return subprocess.Popen(
            [
                str(fence_dir / "fencewrap"),
                *extra,
                str(fence_dir / "lease"),
                str(tmp_path / "exit_code"),
                "--",
                "/bin/sh",
                "-c",
                command,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_the_wrapper_is_small(fence_dir, tmp_path):
    proc = run_wrapped(fence_dir, tmp_path, "echo up; sleep 30")
    try:
        wait_until(lambda: (tmp_path / "out").read_text() == "up\n", "the worker")
        kib = rss_kib(proc.pid)
        print(f"fencewrap RSS: {kib} KiB")
        assert kib <= 2048
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_an_expired_lease_stops_the_whole_worker_even_with_its_agent_frozen(fence_dir, tmp_path):
    """The agent (here: a process that started the wrapper) is SIGSTOPped; the wrapper still
    sends SIGTERM when the lease runs out, then SIGKILL to what ignores it, grandchildren
    included, and records that it fenced the worker."""
    lease = fence.Lease(fence_dir)
    lease.renew(fence.boottime() + 2.0, 1.0)
    command = (
        "trap 'echo got TERM' TERM; (trap '' TERM; sleep 600) & echo $! > grandchild; "
        "echo started; while :; do sleep 0.1; done"
    )
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen(sys.argv[1:], start_new_session=True, "
            f"stdout=open({str(tmp_path / 'out')!r}, 'wb'), cwd={str(tmp_path)!r}); "
            "time.sleep(600)",
            str(fence_dir / "fencewrap"),
            str(lease.path),
            str(tmp_path / "exit_code"),
            "--",
            "/bin/sh",
            "-c",
            command,
        ]
    )
    try:
        wait_until(lambda: (tmp_path / "grandchild").exists(), "the worker to start")
        grandchild = int((tmp_path / "grandchild").read_text())
        os.kill(starter.pid, signal.SIGSTOP)  # the "agent" is frozen
        wait_until(lambda: (tmp_path / "exit_code").exists(), "the fence")
        assert (tmp_path / "exit_code").read_text() == "137 fenced\n"
        wait_until(lambda: not alive(grandchild), "the grandchild to be killed")
        out = (tmp_path / "out").read_text()
        assert "[agent] fence: the node's lease with the console ran out" in out
        assert "got TERM" in out  # SIGTERM first, SIGKILL after the grace
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()


def test_a_renewed_lease_keeps_the_worker_and_no_lease_means_no_fence(fence_dir, tmp_path):
    lease = fence.Lease(fence_dir)
    lease.renew(fence.boottime() + 1.0, 0.5)
    proc = run_wrapped(fence_dir, tmp_path, "sleep 3; echo finished")
    stop = threading.Event()

    def renew():
        while not stop.wait(0.2):
            lease.renew(fence.boottime() + 1.0, 0.5)

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        assert proc.wait(timeout=WAIT) != 0  # killed by its own group kill, as procwrap did
    finally:
        stop.set()
        renewer.join()
    assert (tmp_path / "exit_code").read_text() == "0\n"
    assert (tmp_path / "out").read_text() == "finished\n"

    lease.unlimited()
    (tmp_path / "exit_code").unlink()
    proc = run_wrapped(fence_dir, tmp_path, "sleep 1.5; exit 3")
    proc.wait(timeout=WAIT)
    assert (tmp_path / "exit_code").read_text() == "3\n"


def test_container_mode_forwards_signals_and_exits_with_the_commands_status(fence_dir, tmp_path):
    proc = run_wrapped(
        fence_dir,
        tmp_path,
        "trap 'echo bye; exit 7' TERM; echo up; while :; do sleep 0.1; done",
        "--container",
    )
    wait_until(lambda: "up" in (tmp_path / "out").read_text(), "the worker")
    proc.send_signal(signal.SIGTERM)  # what the engine's init forwards on `docker stop`
    assert proc.wait(timeout=WAIT) == 7
    assert "bye" in (tmp_path / "out").read_text()


def spec(pod_id: int, command: str, **extra) -> LaunchSpec:
    fields = {"job_id": 1, "attempt": 1, "rank": 0, "world_size": 1, "image": "", **extra}
    return LaunchSpec(pod_id=pod_id, command=command, **fields)


def test_the_process_runtime_reports_a_fenced_worker(tmp_path):
    rec = Recorder()
    runtime = ProcessRuntime(tmp_path / "work", rec.on_line, rec.on_exit, base_env=dict(os.environ))
    try:
        fence.Lease(tmp_path / "fence").renew(fence.boottime() + 1.0, 0.5)
        runtime.launch(spec(1, "echo up; sleep 600"))
        rec.wait_exit(1)
        (state,) = runtime.workers()
        assert state.exit_code == 143  # the shell obeyed the fence's SIGTERM
        assert state.error.endswith(FENCED)
        assert any("lease with the console ran out" in line for line in rec.lines[1])
    finally:
        runtime.shutdown(0)


@pytest.mark.e2e
def test_a_container_is_fenced_by_its_own_wrapper(docker_url, fence_dir, tmp_path):  # noqa: F811
    node = f"f{uuid.uuid4().hex[:10]}"
    rec = Recorder()
    (tmp_path / "ckpt").mkdir()
    opts = DockerOptions(
        node=node, checkpoint_root=tmp_path / "ckpt", gpus="off", fence_dir=fence_dir
    )
    runtime = DockerRuntime(opts, rec.on_line, rec.on_exit, base_url=docker_url)
    client = docker.DockerClient(base_url=docker_url)
    lease = fence.Lease(fence_dir)
    lease.renew(fence.boottime() + 600, 1.0)
    try:
        runtime.launch(spec(1, "echo ready; while :; do sleep 0.1; done", image=TEST_IMAGE))
        rec.wait_line(1, "ready")
        (container,) = client.containers.list(filters={"label": f"io.gpu-console.node={node}"})
        mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
        assert mounts["/.gpu-fence"]["RW"] is False
        assert container.attrs["Config"]["Cmd"][:2] == ["/.gpu-fence/fencewrap", "--container"]
        lease.renew(fence.boottime() + 0.5, 1.0)  # the agent stopped renewing it
        rec.wait_exit(1)
        (state,) = runtime.workers()
        assert state.exit_code == 143  # the shell obeyed the fence's SIGTERM
        assert any("lease with the console ran out" in line for line in rec.lines[1])
    finally:
        runtime.shutdown(0)
        remove_node_containers(docker_url, node)
        client.close()
