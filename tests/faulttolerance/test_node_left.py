"""A node leaving is the platform's doing, never the job's (issue 34, item 6;
docs/fault-tolerance.md, "A node leaving"). The pure policy: a worker stopped because its
agent shut down restarts a fault-tolerant job like a lost node (never from the restart
budget, even a used-up one; Asynchronous too: the whole job, elsewhere) and stops a job
without fault tolerance (Stopped by the system, with the reason), never Failed. The
console's side, through the real heartbeat endpoint: the report's `ended_by`."""

import pytest

from jobs.models import Job, Pod, RestartKind, RestartRecord
from policy.faulttolerance.policy import (
    Action,
    Counters,
    Failure,
    FailureKind,
    FtConfig,
    RunType,
    decide,
)
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    pod_status,
    registered,
    stored_lines,
    wait_for,
)
from tests.agents.conftest import heartbeat, register
from tests.faulttolerance.conftest import make_ft_job

LEFT = Failure(FailureKind.NODE_LEFT, worker_rank=0, exit_code=None, message="stopped")


@pytest.mark.parametrize(
    ("config", "counters", "reason"),
    [
        (FtConfig(enabled=True), Counters(), "restart after node loss 1: "),
        (FtConfig(enabled=True), Counters(failure_restarts=3, node_losses=2), "node loss 3: "),
        (FtConfig(enabled=True, max_restarts=0), Counters(), "restart after node loss 1: "),
        (FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS), Counters(), "node loss 1: "),
    ],
)
def test_with_fault_tolerance_a_node_leaving_restarts_outside_the_budget(config, counters, reason):
    decision = decide(config, counters, LEFT)
    assert decision.action == Action.RESTART_JOB
    assert not decision.consumes_budget and not decision.exclude_node
    assert decision.backoff_seconds == 0
    assert reason in decision.reason
    assert "its node left (the node's agent shut down)" in decision.reason


def test_without_fault_tolerance_a_node_leaving_stops_the_job_by_the_system():
    decision = decide(FtConfig(enabled=False), Counters(), LEFT)
    assert decision.action == Action.STOP
    assert decision.reason == (
        "stopped by the system: worker 0 stopped: its node left (the node's agent shut down)"
    )
    # A lost node still fails such a job, as before.
    lost = decide(FtConfig(enabled=False), Counters(), Failure(FailureKind.NODE_LOST, 0))
    assert lost.action == Action.FAIL


def test_the_same_exit_without_ended_by_is_a_failure():
    """The report without the field (an older agent): the old reading, budget and all."""
    exit_143 = Failure(FailureKind.EXIT, worker_rank=0, exit_code=143, message="")
    decision = decide(FtConfig(enabled=True), Counters(), exit_143)
    assert decision.consumes_budget


# --- through the heartbeat ----------------------------------------------------------------


def shutdown_exit(pod: Pod) -> dict:
    """What an agent stopping reports (agents.node.agent.Agent.shutdown)."""
    return {
        "pod_id": pod.pk,
        "attempt": pod.attempt,
        "state": "exited",
        "error": "stopped: the agent shut down (exit code 143)",
        "ended_by": "agent_shutdown",
    }


@pytest.mark.django_db
def test_a_fault_tolerant_job_restarts_without_spending_its_budget(
    client, researcher, workspace, quota
):
    node, token = register(client)
    job, (pod,) = make_ft_job(
        owner=researcher, workspace=workspace, quota=quota, nodes=[node], restart_count=3
    )
    assert heartbeat(client, token, [shutdown_exit(pod)]).status_code == 200
    job.refresh_from_db()
    assert (job.status, job.attempt, job.restart_count, job.node_loss_count) == (
        JobStatus.PENDING,
        2,
        3,  # the budget (3 of 3 used) was not touched: a failure would have ended it Failed
        1,
    )
    pod.refresh_from_db()
    assert (pod.status, pod.ended_by) == (PodStatus.LOST, "agent_shutdown")
    record = RestartRecord.objects.get(job=job)
    assert record.kind == RestartKind.NODE_LOST and "its node left" in record.reason


@pytest.mark.django_db
def test_a_job_without_fault_tolerance_ends_stopped_by_the_system(
    client, researcher, workspace, quota
):
    node_a, token_a = register(client, "node-a")
    node_b, _ = register(client, "node-b")
    job, (pod_a, pod_b) = make_ft_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node_a, node_b],
        ft=FtConfig(enabled=False),
    )
    heartbeat(client, token_a, [shutdown_exit(pod_a)])
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert job.status_reason.startswith("stopped by the system: worker 0 stopped: its node left")
    # The rest of the gang is ordered away, as stopped.
    assert Pod.objects.get(pk=pod_b.pk).stop_as == PodStatus.STOPPED
    assert Job.objects.get(pk=job.pk).exit_code is None


# --- a real agent stopped with SIGTERM ----------------------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_sigterm_to_the_agent_restarts_a_fault_tolerant_job_outside_its_budget(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
):
    agent = agents("leaving")
    node = registered("leaving")
    job, (pod,) = make_ft_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        status=JobStatus.STARTING,
        pod_status=PodStatus.STARTING,
        ft=FtConfig(enabled=True, max_restarts=1),
        # Written with the job: an agent may launch a Starting pod before a later update.
        command="echo up; while :; do sleep 0.05; done",
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    wait_for(lambda: "up" in stored_lines(pod), "the worker's first line")
    assert agent.terminate() == 0, agent.output()  # SIGTERM: the worker dies of it (143)
    job.refresh_from_db()
    pod.refresh_from_db()
    assert (pod.status, pod.ended_by) == (PodStatus.LOST, "agent_shutdown")
    assert "exit code 143" in pod.error_message
    # A restart after a node loss, not a failure: the one-restart budget is untouched; the
    # job waits again (Pending, or Inqueue once a cycle saw it).
    assert job.status in (JobStatus.PENDING, JobStatus.INQUEUE)
    assert (job.attempt, job.restart_count, job.node_loss_count) == (2, 0, 1)
    record = RestartRecord.objects.get(job=job)
    assert record.kind == RestartKind.NODE_LOST and not record.restarts_used
    assert record.reason.startswith("restart after node loss 1: worker 0 stopped: its node left")
