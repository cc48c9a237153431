"""A frozen agent is the node's silence, not the job's: the hang monitor leaves the job to
the node monitor (NotReady, then Lost: a node_lost restart that spends no budget), and
judges a hang only once the node reported again with nothing new."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from agents.node_monitor import run_node_monitor
from cluster.models import Node, NodeState
from jobs.actions.workers import apply_worker_state
from jobs.job_monitor import run_job_monitor
from jobs.models import Job, Pod, RestartRecord
from policy.faulttolerance import hang
from policy.faulttolerance.policy import FtConfig
from policy.statuses import JobStatus, PodStatus
from tests.conftest import make_node
from tests.faulttolerance.conftest import make_ft_job

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# The probe's settings: hang timeout 30 s below a node-lost timeout of 60 s.
HANG = FtConfig(enabled=True, hang_detection=True, hang_timeout=30)


def _at(seconds: float):
    return time_machine.travel(T0 + timedelta(seconds=seconds), tick=False)


@pytest.fixture
def console_frozen(settings, researcher, workspace, quota):
    """A running job whose node's agent was SIGSTOPped 4 s after the job's last progress."""
    settings.NODE_LOST_TIMEOUT = 60
    settings.NODE_NOT_READY_AFTER = 15
    node = make_node("n-frozen")
    job, pods = make_ft_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        ft=HANG,
        status=JobStatus.STARTING,
        pod_status=PodStatus.STARTING,
    )
    with _at(0):
        apply_worker_state(Pod.objects.get(pk=pods[0].pk), running=True)
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat_at=T0 + timedelta(seconds=4),
        heartbeat_deadline=T0 + timedelta(seconds=4 + 15),
    )
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.hang_deadline == T0 + timedelta(seconds=30)
    return job, node


def test_a_frozen_agent_is_not_judged_a_hang(console_frozen):
    job, _ = console_frozen
    with _at(31):
        result = run_job_monitor()
    assert result.hung == [] and result.node_silent == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.restart_count == 0
    assert not RestartRecord.objects.exists()


def test_the_node_monitor_path_handles_it_without_spending_the_budget(console_frozen):
    job, node = console_frozen
    for second in (20, 31, 45, 65):  # NotReady at 20; Lost 60 s after the last heartbeat
        with _at(second):
            run_node_monitor()
            assert run_job_monitor().hung == []
    job.refresh_from_db()
    assert Node.objects.get(pk=node.pk).state == NodeState.LOST
    assert job.restart_count == 0 and job.node_loss_count == 1
    assert list(RestartRecord.objects.values_list("kind", flat=True)) == ["node_lost"]


def test_a_node_heard_after_the_deadline_with_nothing_new_is_a_hang(console_frozen):
    job, node = console_frozen
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0 + timedelta(seconds=33))
    with _at(34):
        assert run_job_monitor().hung == [job.pk]
    assert Job.objects.get(pk=job.pk).restart_count == 1
    assert list(RestartRecord.objects.values_list("kind", flat=True)) == ["hang"]


@pytest.mark.parametrize(
    ("nodes", "silent"),
    [
        ([(True, 31)], False),
        ([(True, 30)], False),
        ([(True, 29)], True),
        ([(False, 31)], True),  # NotReady
        ([(True, None)], True),
        ([(True, 31), (True, 10)], True),  # one of two nodes silent
        ([], False),
    ],
)
def test_silence_is_the_nodes(nodes, silent):
    deadline = T0 + timedelta(seconds=30)
    heard = [
        hang.NodeHeard(ready, None if at is None else T0 + timedelta(seconds=at))
        for ready, at in nodes
    ]
    assert hang.silence_is_the_nodes(deadline, heard) is silent
