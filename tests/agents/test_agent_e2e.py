"""The real agent (`python -m agents.node`) as a subprocess against a live console.

The console runs in pytest-django's live server thread; jobs and pods are created directly
in the database, as the scheduler would leave them (status Starting, placed on the node).
"""

import signal
import stat

import pytest

from cluster.models import GpuDevice, Node, NodeState
from jobs.actions.stop import request_stop
from jobs.models import Job, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import (
    IMAGE_LINE,
    alive,
    pod_status,
    registered,
    stored_lines,
    wait_for,
)
from tests.agents.conftest import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


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
    # The worker's GPUs (0 and 1 here) by UUID, as NVML names them on this node.
    uuids = ",".join(
        GpuDevice.objects.filter(node=node, index__lt=2).values_list("uuid", flat=True)
    )
    gpus_line = f"gpus={uuids} rank=0 of 1"
    expected = [IMAGE_LINE, *(f"line {i}" for i in range(1, 1501)), gpus_line]
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
    # "up" is printed after the trap is set: a SIGTERM before it would kill the shell.
    wait_for(lambda: "up" in stored_lines(pod), "the worker to set its trap")
    assert agent.terminate() == 0, agent.output()
    # Exit code 0 after the agent's own SIGTERM is not success: the work was interrupted,
    # and not by the job: its node left (ended_by), so the job is stopped by the system,
    # not Failed (docs/fault-tolerance.md, "A node leaving").
    pod.refresh_from_db()
    assert (pod.status, pod.ended_by) == (PodStatus.LOST, "agent_shutdown")
    assert pod.error_message == "stopped: the agent shut down (exit code 0)"
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert job.status_reason.startswith("stopped by the system: worker 0 stopped: its node left")
    assert "bye" in stored_lines(pod)


def test_after_kill_9_the_restarted_agent_adopts_the_worker_instead_of_launching_it_again(
    agents, researcher, workspace, quota, tmp_path
):
    first = agents()
    node = registered("e2e-node")
    marker = tmp_path / "starts"
    pidfile = tmp_path / "worker.pid"
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=f"echo started >> {marker}; echo $$ > {pidfile}; echo up; "
        'trap "echo bye; exit 0" TERM; while :; do sleep 0.05; done',
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    wait_for(lambda: "up" in stored_lines(pod), "the first line")
    worker_pid = int(pidfile.read_text())
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    assert alive(worker_pid)  # workers outlive the agent, like containers

    # Restarted with the same state dir and no bootstrap token: it reuses its registration
    # and adopts the running worker instead of launching a second copy.
    second = agents(bootstrap=None)
    wait_for(lambda: "adopted 1 workers" in second.output(), "the adoption")
    request_stop(Job.objects.get(pk=job.pk), reason="stopped by alice", grace=20)
    wait_for(lambda: pod_status(pod) == PodStatus.STOPPED, "the adopted worker to stop")
    assert marker.read_text() == "started\n"
    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    wait_for(lambda: "bye" in stored_lines(pod), "the worker's last line")
    assert stored_lines(pod).count("up") == 1
    assert not alive(worker_pid)
    assert second.terminate() == 0, second.output()


def test_an_unregistered_agent_without_a_token_exits_2(agents):
    agent = agents(name="fresh", bootstrap=None)
    assert agent.wait() == 2
    assert "not registered yet" in agent.output()


def test_a_refused_bootstrap_token_exits_3(agents):
    agent = agents(name="refused", bootstrap="gqb_00000000_not-a-real-token")
    assert agent.wait() == 3
    assert "registration refused" in agent.output()
