"""The quiet heartbeat (agents.heartbeat): one statement when nothing changed, and a miss (the
full path) as soon as anything it stands for changed: the token, the facts, the pods."""

import pytest
from django.utils import timezone

from cluster.actions import revoke_node_tokens
from cluster.models import Node
from jobs.actions.stop import request_stop
from jobs.models import Job, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import heartbeat, register, running

pytestmark = pytest.mark.django_db


def _steady(client, job_factory, workers: int = 2):
    node, token = register(client)
    job, pods = job_factory([node] * workers)
    reports = [running(p) for p in pods]
    assert heartbeat(client, token, workers=reports).status_code == 200  # → Running
    return node, token, job, pods, reports


def test_a_revoked_token_stops_working_at_once(client, job_factory, django_assert_num_queries):
    node, token, _, _, reports = _steady(client, job_factory)
    with django_assert_num_queries(1):
        assert heartbeat(client, token, workers=reports).status_code == 200
    revoke_node_tokens(Node.objects.filter(pk=node.pk), timezone.now())
    response = heartbeat(client, token, workers=reports)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_revoked"


def test_a_replaced_token_is_unknown_at_once(client, job_factory):
    node, token, _, _, reports = _steady(client, job_factory)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    Node.objects.filter(pk=node.pk).update(token_digest="0" * 64)
    assert heartbeat(client, token, workers=reports).status_code == 401


def test_a_pod_placed_on_the_node_is_in_the_next_reply(client, job_factory):
    node, token, _, _, reports = _steady(client, job_factory, workers=1)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    _, (new,) = job_factory([node])
    reply = heartbeat(client, token, workers=reports).json()
    assert new.pk in {s["pod_id"] for s in reply["run"]}


def test_a_stop_request_is_in_the_next_reply(client, job_factory):
    _, token, job, pods, reports = _steady(client, job_factory)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    request_stop(Job.objects.get(pk=job.pk), user=None)
    reply = heartbeat(client, token, workers=reports).json()
    assert {o["pod_id"] for o in reply["stop"]} == {p.pk for p in pods}


def test_a_pod_ended_elsewhere_is_fenced_in_the_next_reply(client, job_factory):
    _, token, _, pods, reports = _steady(client, job_factory)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    Pod.objects.filter(pk=pods[0].pk).update(status=PodStatus.LOST)
    reply = heartbeat(client, token, workers=reports).json()
    assert pods[0].pk in {o["pod_id"] for o in reply["stop"]}


def test_other_facts_and_an_exit_take_the_full_path(client, job_factory):
    node, token, job, _, reports = _steady(client, job_factory, workers=1)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    assert heartbeat(client, token, workers=reports, cpus=64).status_code == 200
    assert Node.objects.get(pk=node.pk).cpus == 64
    done = {**reports[0], "state": "exited", "exit_code": 0}
    assert heartbeat(client, token, workers=[done]).status_code == 200
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED


def test_the_quiet_path_still_brings_a_not_ready_node_back(client, job_factory):
    node, token, _, _, reports = _steady(client, job_factory)
    assert heartbeat(client, token, workers=reports).status_code == 200
    Node.objects.filter(pk=node.pk).update(state="NotReady")
    assert heartbeat(client, token, workers=reports).status_code == 200
    assert Node.objects.get(pk=node.pk).state == "Ready"


@pytest.mark.parametrize("state", ["NotReady", "Lost"])
def test_only_a_lost_node_back_tells_admission(
    client, job_factory, state, django_capture_on_commit_callbacks
):
    """Admission counts Ready and NotReady nodes, not Lost ones (jobs.admission.cache): a
    Lost node's heartbeat misses the quiet UPDATE, and the full path announces its return;
    a NotReady node's comes back quietly, announcing nothing."""
    from cluster.actions import pool_changed

    node, token, _, _, reports = _steady(client, job_factory)
    assert heartbeat(client, token, workers=reports).status_code == 200  # quiet
    Node.objects.filter(pk=node.pk).update(state=state)
    heard = []

    def hear(**kwargs) -> None:
        heard.append(kwargs["sender"])

    pool_changed.connect(hear, weak=False, dispatch_uid="test-pool-changed")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert heartbeat(client, token, workers=reports).status_code == 200
    finally:
        pool_changed.disconnect(dispatch_uid="test-pool-changed")
    assert Node.objects.get(pk=node.pk).state == "Ready"
    assert len(heard) == (1 if state == "Lost" else 0)


# --- an exit's GPUs: the heartbeat asks for a cycle; a task or the loop runs it ---


@pytest.mark.django_db(transaction=True)
def test_an_exit_report_asks_for_a_cycle_after_its_commit_and_runs_none(
    client, settings, job_factory, monkeypatch
):
    """The freed GPUs' next job is placed by the cycle the exit's commit asks for
    (jobs.triggers: a Celery task, or the woken scheduler loop), never inside the agent's
    request; the node's next heartbeat (or its wait, agents.wake) carries it."""
    from django.db import connection

    from jobs import triggers
    from jobs.scheduler.cycle import run_cycle
    from tests.web.conftest import submit

    node, token = register(client, gpus=2)
    job, pods = job_factory([node], gpus=2, status=JobStatus.RUNNING, pod_status=PodStatus.RUNNING)
    waiting = submit(job.owner, job.workspace, job.quota, gpus_per_worker=2)
    run_cycle()  # nothing free: it waits
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.INQUEUE
    sent = []  # for each trigger: whether a transaction was still open when it was sent
    monkeypatch.setitem(
        triggers._senders, triggers.SCHEDULER, lambda: sent.append(connection.in_atomic_block)
    )
    done = {**running(pods[0]), "state": "exited", "exit_code": 0}
    reply = heartbeat(client, token, workers=[done], gpus=2).json()
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    assert waiting.pk not in {s["job_id"] for s in reply["run"]}
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.INQUEUE  # no cycle ran here
    assert sent and not any(sent)  # asked for, once committed
    run_cycle()  # the cycle asked for
    reply = heartbeat(client, token, gpus=2).json()
    assert waiting.pk in {s["job_id"] for s in reply["run"]}


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_ends_before_its_job_asks_for_a_cycle_itself(
    client, job_factory, monkeypatch
):
    """GPUs freed without a status change of the job (one worker of two done): no job
    transition asks for a cycle, the heartbeat does."""
    from jobs import triggers

    node, token = register(client, gpus=2)
    job, pods = job_factory(
        [node, node], gpus=1, status=JobStatus.RUNNING, pod_status=PodStatus.RUNNING
    )
    sent = []
    monkeypatch.setitem(triggers._senders, triggers.SCHEDULER, lambda: sent.append(1))
    done = {**running(pods[1]), "state": "exited", "exit_code": 0}
    assert heartbeat(client, token, workers=[done, running(pods[0])], gpus=2).status_code == 200
    assert Pod.objects.get(pk=pods[1].pk).status == PodStatus.SUCCEEDED
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert sent == [1]
    assert heartbeat(client, token, workers=[running(pods[0])], gpus=2).status_code == 200
    assert sent == [1]  # nothing freed, nothing asked


@pytest.mark.django_db(transaction=True)
def test_no_exit_report_places_a_job_once_the_scheduler_loop_is_stopped(
    client, settings, job_factory
):
    """The embedded console stopping stops its scheduler loop first so nothing lands on the
    node that is going away: an exit report's trigger then wakes no loop, and the request
    runs no cycle of its own."""
    from console.loops import stop_loops
    from jobs.scheduler.cycle import run_cycle
    from tests.web.conftest import submit

    settings.CONSOLE_LOOPS = "inprocess"
    node, token = register(client, gpus=2)
    job, pods = job_factory([node], gpus=2, status=JobStatus.RUNNING, pod_status=PodStatus.RUNNING)
    waiting = submit(job.owner, job.workspace, job.quota, gpus_per_worker=2)
    run_cycle()
    stop_loops(["scheduler"])  # as run_console's shutdown does (no loop was started here)
    done = {**running(pods[0]), "state": "exited", "exit_code": 0}
    reply = heartbeat(client, token, workers=[done], gpus=2).json()
    assert waiting.pk not in {s["job_id"] for s in reply["run"]}
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.INQUEUE


# --- an idle node: quiet without this process having answered it before ---


def _idle(client, name: str = "n1"):
    """A registered node without workers, its facts recorded by one full heartbeat; then
    this process forgets it (as another gunicorn process, or a restarted one, has)."""
    from agents.heartbeat import quiet

    node, token = register(client, name)
    full = heartbeat(client, token)
    assert full.status_code == 200
    quiet.forget_all()
    return node, token, full


def test_an_idle_nodes_first_heartbeat_in_a_process_is_one_statement(
    client, django_assert_num_queries
):
    node, token, full = _idle(client)
    before = Node.objects.get(pk=node.pk).last_heartbeat_at
    with django_assert_num_queries(1) as queries:
        response = heartbeat(client, token)
    assert response.status_code == 200
    assert response.content == full.content  # the full path's reply, byte for byte
    assert queries.captured_queries[0]["sql"].startswith('UPDATE "cluster_node"')
    assert Node.objects.get(pk=node.pk).last_heartbeat_at > before
    with django_assert_num_queries(1):  # and it is kept: the same bytes are not parsed
        assert heartbeat(client, token).content == full.content


def test_an_idle_node_with_a_revoked_or_replaced_token_misses(client):
    node, token, _ = _idle(client)
    revoke_node_tokens(Node.objects.filter(pk=node.pk), timezone.now())
    response = heartbeat(client, token)
    assert (response.status_code, response.json()["error"]["code"]) == (403, "token_revoked")
    other, other_token, _ = _idle(client, "n2")
    Node.objects.filter(pk=other.pk).update(token_digest="0" * 64)
    assert heartbeat(client, other_token).status_code == 401


def test_an_idle_node_gets_a_pod_placed_on_it_and_other_facts_recorded(client, job_factory):
    node, token, _ = _idle(client)
    _, (pod,) = job_factory([node])
    reply = heartbeat(client, token).json()  # a live pod on the node: the UPDATE misses
    assert [s["pod_id"] for s in reply["run"]] == [pod.pk]
    idle, idle_token, _ = _idle(client, "n2")
    assert heartbeat(client, idle_token, cpus=64).status_code == 200  # another digest
    assert Node.objects.get(pk=idle.pk).cpus == 64


def test_a_lost_idle_node_takes_the_full_path(client, django_capture_on_commit_callbacks):
    from cluster.actions import pool_changed

    node, token, _ = _idle(client)
    Node.objects.filter(pk=node.pk).update(state="Lost")
    heard = []
    pool_changed.connect(lambda **kw: heard.append(1), weak=False, dispatch_uid="test-idle-lost")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert heartbeat(client, token).status_code == 200
    finally:
        pool_changed.disconnect(dispatch_uid="test-idle-lost")
    assert Node.objects.get(pk=node.pk).state == "Ready" and heard == [1]
