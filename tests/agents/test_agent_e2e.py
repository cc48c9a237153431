"""The real agent (`python -m agents`) as a subprocess against a live console.

The console runs in pytest-django's live server thread; jobs and pods are created directly
in the database, as the scheduler would leave them (status Starting, placed on the node).
"""

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from agents.models import GpuDevice, Node, NodeState
from agents.tokens import issue_bootstrap_token
from jobs.models import Job, LogChunk, Pod
from jobs.services import request_stop
from jobs.statuses import JobStatus, PodStatus
from tests.agents.conftest import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WAIT = 30.0
IMAGE_LINE = (
    "[agent] process runtime: image 'pytorch:2.4' is ignored; the command runs directly on "
    "this host"
)


def wait_for(fn, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


class AgentProcess:
    def __init__(self, url: str, name: str, state_dir: Path, bootstrap: str | None) -> None:
        self.log_path = state_dir.parent / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        if bootstrap:
            env["GPU_AGENT_BOOTSTRAP_TOKEN"] = bootstrap
        command = [
            sys.executable,
            "-m",
            "agents",
            "--server",
            url,
            "--name",
            name,
            "--state-dir",
            str(state_dir),
            "--runtime",
            "process",
            "--fake-gpus",
            "8xH200",
            "--heartbeat-interval",
            "0.2",
            "--shutdown-grace",
            "5",
        ]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


@pytest.fixture
def agents(live_server, tmp_path):
    started: list[AgentProcess] = []

    def start(name: str = "e2e-node", bootstrap: str | None = "issue") -> AgentProcess:
        if bootstrap == "issue":
            _, bootstrap = issue_bootstrap_token(None, f"e2e {name}")
        agent = AgentProcess(live_server.url, name, tmp_path / name, bootstrap)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.proc.poll() is None:
            agent.kill()
        elif not agent._log.closed:
            agent._log.close()


def registered(name: str) -> Node:
    return wait_for(
        lambda: Node.objects.filter(name=name, token_prefix__isnull=False).first(),
        f"node {name} to register",
    )


def stored_lines(pod: Pod) -> list[str]:
    chunks = list(LogChunk.objects.filter(pod=pod).order_by("seq_start"))
    expected = 0
    for chunk in chunks:  # contiguous, no overlap: each sequence stored exactly once
        assert chunk.seq_start == expected
        expected = chunk.seq_end + 1
    return "".join(c.text for c in chunks).split("\n")[:-1]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pod_status(pod: Pod) -> str:
    return Pod.objects.get(pk=pod.pk).status


def test_a_worker_runs_to_success_with_its_logs_stored_once_in_order(
    agents, researcher, workspace, quota, tmp_path
):
    agent = agents()
    node = registered("e2e-node")
    assert (node.gpus, node.gpu_type, node.runtime) == (8, "H200", "process")
    assert GpuDevice.objects.filter(node=node).count() == 8
    identity = tmp_path / "e2e-node" / "node.json"
    wait_for(identity.exists, "the agent to save its registration")
    assert stat.S_IMODE(identity.stat().st_mode) == 0o600

    command = (
        'for i in $(seq 1 1500); do echo "line $i"; done; '
        'echo "gpus=$CUDA_VISIBLE_DEVICES rank=$RANK of $WORLD_SIZE" >&2'
    )
    job, (pod,) = make_job(
        owner=researcher, workspace=workspace, quota=quota, nodes=[node], command=command, gpus=2
    )
    wait_for(lambda: pod_status(pod) == PodStatus.SUCCEEDED, "the pod to succeed")
    expected = [IMAGE_LINE, *(f"line {i}" for i in range(1, 1501)), "gpus=0,1 rank=0 of 1"]
    wait_for(lambda: Pod.objects.get(pk=pod.pk).log_next_seq == len(expected), "all log lines")
    assert stored_lines(pod) == expected
    pod.refresh_from_db()
    assert (pod.exit_code, pod.container_id[:8]) == (0, "process:")
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED

    assert agent.terminate() == 0, agent.output()
    assert "Traceback" not in agent.output()


def test_stop_sends_sigterm_and_the_job_ends_stopped(agents, researcher, workspace, quota):
    agent = agents()
    node = registered("e2e-node")
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command='trap "echo checkpoint saved; exit 0" TERM; echo training; '
        "while :; do sleep 0.05; done",
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    wait_for(lambda: "training" in stored_lines(pod), "the first log line")
    request_stop(Job.objects.get(pk=job.pk), reason="stopped by alice", grace=20)
    wait_for(lambda: pod_status(pod) == PodStatus.STOPPED, "the pod to stop")
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (JobStatus.STOPPED, "stopped by alice")
    wait_for(lambda: "checkpoint saved" in stored_lines(pod), "the worker's last line")
    assert agent.terminate() == 0, agent.output()


def test_agent_shutdown_stops_workers_and_reports_them_honestly(
    agents, researcher, workspace, quota
):
    agent = agents()
    node = registered("e2e-node")
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command='trap "echo bye; exit 0" TERM; echo up; while :; do sleep 0.05; done',
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    assert agent.terminate() == 0, agent.output()
    # Exit code 0 after the agent's own SIGTERM is not success: the work was interrupted.
    pod.refresh_from_db()
    assert pod.status == PodStatus.FAILED
    assert pod.error_message == "stopped: the agent shut down (exit code 0)"
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    assert "bye" in stored_lines(pod)


def test_after_kill_9_the_restarted_agent_never_launches_a_pod_twice(
    agents, researcher, workspace, quota, tmp_path
):
    first = agents()
    node = registered("e2e-node")
    marker = tmp_path / "starts"
    pidfile = tmp_path / "worker.pid"
    _job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=f"echo started >> {marker}; echo $$ > {pidfile}; sleep 600",
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    first.proc.send_signal(signal.SIGKILL)
    first.wait()

    # Restarted with the same state dir and no bootstrap token: it reuses its registration,
    # kills the orphaned worker and reports it gone instead of launching a second copy.
    second = agents(bootstrap=None)
    wait_for(lambda: pod_status(pod) == PodStatus.FAILED, "the pod to be reported gone")
    pod.refresh_from_db()
    assert pod.error_message == "worker process disappeared"
    assert marker.read_text() == "started\n"
    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    assert re.search(r"killed [12] leftover processes", second.output()), second.output()
    wait_for(lambda: not alive(int(pidfile.read_text())), "the orphaned worker to die")
    assert second.terminate() == 0, second.output()


def test_an_unregistered_agent_without_a_token_exits_2(agents):
    agent = agents(name="fresh", bootstrap=None)
    assert agent.wait() == 2
    assert "not registered yet" in agent.output()


def test_a_refused_bootstrap_token_exits_3(agents):
    agent = agents(name="refused", bootstrap="gqb_00000000_not-a-real-token")
    assert agent.wait() == 3
    assert "registration refused" in agent.output()
