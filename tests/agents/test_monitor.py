"""The node monitor: NotReady → Unknown workers, Lost → workers lost, stops on dead nodes."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connections

from agents.node_monitor import NOT_REACHABLE, run_node_monitor
from cluster.models import Node, NodeState
from jobs.actions.stop import request_stop
from jobs.actions.workers import NODE_LOST
from jobs.models import Job, JobEvent, Pod, PodDesired
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import heartbeat, make_job, register, run_together, running

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOT_READY_AFTER = timedelta(seconds=30)
LOST_AFTER = timedelta(seconds=300)


@pytest.fixture
def live_node(client):
    """A node that heartbeated at T0 (deadline T0 + 30 s)."""
    with time_machine.travel(T0, tick=False):
        node, token = register(client)
    return node, token


def _running_job(job_factory, nodes):
    return job_factory(nodes, pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)


def test_nothing_happens_before_the_deadline(live_node, job_factory):
    node, _ = live_node
    _running_job(job_factory, [node])
    result = run_node_monitor(T0 + NOT_READY_AFTER)  # deadline < now is strict
    assert result.not_ready == [] and result.lost == []
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_a_late_node_becomes_not_ready_and_its_workers_unknown(live_node, job_factory):
    node, _ = live_node
    job, (pod,) = _running_job(job_factory, [node])
    _, (starting,) = job_factory([node])
    _, (done,) = job_factory([node], pod_status=PodStatus.SUCCEEDED)
    with time_machine.travel(T0 + NOT_READY_AFTER + timedelta(seconds=1), tick=False):
        result = run_node_monitor()
    assert result.not_ready == [node.name] and result.pods_unknown == 2
    assert Node.objects.get(pk=node.pk).state == NodeState.NOT_READY
    for p in (pod, starting):
        p.refresh_from_db()
        assert (p.status, p.status_reason) == (PodStatus.UNKNOWN, NOT_REACHABLE)
    done.refresh_from_db()
    assert done.status == PodStatus.SUCCEEDED
    # A lost connection is not a dead process: the job keeps running.
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING


def test_a_node_without_a_deadline_is_not_judged(client, job_factory):
    from tests.conftest import make_node

    node = make_node("static")  # created by an admin, never heartbeated
    _running_job(job_factory, [node])
    assert run_node_monitor(T0 + LOST_AFTER * 10).not_ready == []
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_the_node_comes_back_and_its_workers_run_again(client, live_node, job_factory):
    node, token = live_node
    _job, (pod,) = _running_job(job_factory, [node])
    run_node_monitor(T0 + timedelta(seconds=31))
    with time_machine.travel(T0 + timedelta(seconds=60), tick=False):
        assert heartbeat(client, token, workers=[running(pod)]).status_code == 200
    pod.refresh_from_db()
    assert pod.status == PodStatus.RUNNING
    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    # And the next cycle leaves it alone (its new deadline is T0 + 90 s).
    assert run_node_monitor(T0 + timedelta(seconds=61)).not_ready == []


def test_a_node_silent_past_the_lost_timeout_is_lost_and_the_job_fails(
    live_node, job_factory, client
):
    node, _ = live_node
    other, _ = register(client, "other")
    job, (pod, survivor) = _running_job(job_factory, [node, other])
    run_node_monitor(T0 + timedelta(seconds=31))
    # Still NotReady, not yet lost.
    assert run_node_monitor(T0 + LOST_AFTER).lost == []
    with time_machine.travel(T0 + LOST_AFTER + timedelta(seconds=1), tick=False):
        result = run_node_monitor()
    assert result.lost == [node.name]
    assert Node.objects.get(pk=node.pk).state == NodeState.LOST
    pod.refresh_from_db()
    assert (pod.status, pod.status_reason) == (PodStatus.LOST, NODE_LOST)
    assert pod.finished_at == T0 + LOST_AFTER + timedelta(seconds=1)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.status_reason == "worker 0 lost: node lost"
    # The rest of the gang is ordered to stop on its (healthy) node.
    survivor.refresh_from_db()
    assert survivor.desired == PodDesired.STOP and survivor.status == PodStatus.RUNNING


def test_one_cycle_after_a_long_silence_goes_straight_to_lost(live_node, job_factory):
    node, _ = live_node
    job, (_pod,) = _running_job(job_factory, [node])
    result = run_node_monitor(T0 + LOST_AFTER + timedelta(seconds=1))
    assert (result.not_ready, result.lost) == ([node.name], [node.name])
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


def test_two_monitor_runs_are_idempotent(live_node, job_factory):
    node, _ = live_node
    _job, (_pod,) = _running_job(job_factory, [node])
    now = T0 + LOST_AFTER + timedelta(seconds=5)
    first = run_node_monitor(now)
    events = list(JobEvent.objects.values_list("id", flat=True))
    second = run_node_monitor(now)
    assert first.lost == [node.name]
    assert (second.not_ready, second.lost, second.pods_unknown, second.pods_ended) == (
        [],
        [],
        0,
        0,
    )
    assert list(JobEvent.objects.values_list("id", flat=True)) == events


def test_a_stop_on_a_dead_node_ends_as_ordered(live_node, job_factory):
    node, _ = live_node
    job, (pod,) = _running_job(job_factory, [node])
    request_stop(job, reason="stopped by alice")
    run_node_monitor(T0 + LOST_AFTER + timedelta(seconds=1))
    pod.refresh_from_db()
    assert (pod.status, pod.status_reason) == (PodStatus.STOPPED, "stopped by alice")
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (JobStatus.STOPPED, "stopped by alice")


def test_a_stop_ordered_after_the_node_was_lost_does_not_hang(live_node, job_factory):
    node, _ = live_node
    job, (pod,) = _running_job(job_factory, [node])
    Node.objects.filter(pk=node.pk).update(state=NodeState.LOST)  # e.g. lost mid-stop
    request_stop(job, reason="stopped by alice")
    result = run_node_monitor(T0 + timedelta(seconds=1))
    assert result.pods_ended == 1
    pod.refresh_from_db()
    assert pod.status == PodStatus.STOPPED
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED


@pytest.mark.django_db(transaction=True)
def test_two_monitors_at_once_act_once(researcher, workspace, quota):
    from django.test import Client

    with time_machine.travel(T0, tick=False):
        node, _ = register(Client())
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        status=JobStatus.RUNNING,
        pod_status=PodStatus.RUNNING,
    )
    now = T0 + LOST_AFTER + timedelta(seconds=1)
    results = run_together(lambda: run_node_monitor(now), lambda: run_node_monitor(now))
    connections.close_all()
    assert [kind for kind, _ in results] == ["ok", "ok"], results
    assert sorted(len(r.lost) for _, r in results) == [0, 1]
    assert sorted(len(r.not_ready) for _, r in results) == [0, 1]
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.LOST
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert JobEvent.objects.filter(job=job, to_status=JobStatus.FAILED).count() == 1
