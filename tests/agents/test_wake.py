"""Waking agents (agents.wake): the desired-state token, the `wait/` long-poll, and a real
agent that starts a submitted job and stops it long before its next heartbeat."""

import threading
import time

import psycopg
import pytest
from django.db import connection, transaction
from django.test import Client

from accounts.actions import issue_api_token
from agents import wake
from agents.decisions import desired_version_of
from jobs import triggers
from jobs.actions.stop import request_stop
from jobs.models import Job, Pod, PodDesired
from policy.statuses import PodStatus
from tests.agents.agentproc import pod_status, registered, wait_for
from tests.agents.conftest import facts, make_job, post, register

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh_watcher(settings):
    """A watcher of this test's settings (the process-wide one is made on first use)."""
    wake._watcher = None
    yield
    if wake._watcher is not None:
        wake._watcher.close()  # before the database goes: a wait may still be held
    wake._watcher = None


def heartbeat(client, token) -> dict:
    response = post(client, "heartbeat/", {"facts": facts(), "workers": []}, token)
    assert response.status_code == 200, response.content
    return response.json()


def test_the_token_changes_when_a_pod_is_placed_stopped_or_ends(
    client, researcher, workspace, quota
):
    node, _ = register(client)
    tokens = [wake.versions_of([node.pk])[node.pk]]
    _, (pod,) = make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
    tokens.append(wake.versions_of([node.pk])[node.pk])
    Pod.objects.filter(pk=pod.pk).update(desired=PodDesired.STOP)
    tokens.append(wake.versions_of([node.pk])[node.pk])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.STOPPED)
    tokens.append(wake.versions_of([node.pk])[node.pk])
    assert tokens[0] == tokens[3] and len(set(tokens[:3])) == 3


def test_the_aggregate_query_and_the_heartbeat_agree(
    client, researcher, workspace, quota, django_assert_num_queries
):
    node, token = register(client)
    other, _ = register(client, "n2")
    make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node, node, other])
    stopping, _ = make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
    Pod.objects.filter(job=stopping).update(desired=PodDesired.STOP)
    with django_assert_num_queries(1):  # one query for every waiting node
        versions = wake.versions_of([node.pk, other.pk])
    pods = Pod.objects.filter(node__in=[node, other])
    assert versions == {
        node.pk: desired_version_of(node.pk, pods),
        other.pk: desired_version_of(other.pk, pods),
    }
    assert heartbeat(client, token)["desired_version"] == versions[node.pk]


def test_a_wait_answers_when_the_desired_state_changes(
    client, researcher, workspace, quota, fresh_watcher
):
    node, token = register(client)
    known = heartbeat(client, token)["desired_version"]
    response = post(client, "wait/", {"known": known, "timeout": 0.3}, token)
    assert response.json() == {"changed": False, "retry_after": None, "desired_version": None}

    def place() -> None:
        time.sleep(0.3)
        try:
            make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
        finally:
            connection.close()  # this thread's own connection

    placer = threading.Thread(target=place)
    placer.start()
    # Held well past the placement: it answers "changed" only because the pod was placed.
    response = post(client, "wait/", {"known": known, "timeout": 20}, token)
    placer.join()
    assert response.json()["changed"] is True
    # It names the token that differed: the one the agent's next heartbeat reply carries.
    assert response.json()["desired_version"] == heartbeat(client, token)["desired_version"]
    # A token that is already stale answers at once.
    assert post(client, "wait/", {"known": "stale", "timeout": 20}, token).json()["changed"]


def _own_connection() -> psycopg.Connection:
    """A PostgreSQL connection of the test's own, outside Django (another process's)."""
    return psycopg.connect(**connection.get_connection_params(), autocommit=True)


def _listening_backend(other: psycopg.Connection) -> int | None:
    """The process id of this test database's listening backend (agents.wake's listener,
    which runs while a wait is held), if it listens."""
    row = other.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query = %s AND pid <> pg_backend_pid()",
        [f"LISTEN {wake.CHANNEL}"],
    ).fetchone()
    return row[0] if row else None


def _held_wait(client, token, known: str) -> tuple[dict, float]:
    """A wait held for up to 20 s: its answer and how long it took."""
    started = time.monotonic()
    response = post(client, "wait/", {"known": known, "timeout": 20}, token)
    assert response.status_code == 200, response.content
    return response.json(), time.monotonic() - started


def _in_a_thread(act, delay: float = 0.3) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)  # the wait is held by then
        try:
            act()
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_placement_wakes_the_wait_at_once_not_at_the_next_poll(
    client, settings, researcher, quota, fresh_watcher
):
    """A submission the cycle places (the user's path: the API, the trigger, the cycle's
    `insert_pods`) nudges the watcher after the commit: the wait answers long before the
    poll, here 30 s, would have looked again."""
    settings.AGENT_WAIT_POLL = 30
    node, token = register(client)
    known = heartbeat(client, token)["desired_version"]
    _, plain = issue_api_token(researcher)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")
    submitted = []

    def submit() -> None:
        body = {"quota": quota.name, "image": "busybox", "command": "sleep 1"}
        submitted.append(
            api.post("/api/v1/jobs", {**body, "gpus_per_worker": 1}, "application/json")
        )

    submitter = _in_a_thread(submit)
    answer, took = _held_wait(client, token, known)
    submitter.join()
    assert submitted[0].status_code == 201, submitted[0].content
    assert Pod.objects.filter(node=node).count() == 1  # placed on the waiting node
    assert answer["changed"] is True and took < 10, (answer, took)


def test_a_stop_order_wakes_the_wait_at_once(
    client, settings, researcher, workspace, quota, fresh_watcher
):
    settings.AGENT_WAIT_POLL = 30
    node, token = register(client)
    job, _ = make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
    known = heartbeat(client, token)["desired_version"]
    stopper = _in_a_thread(lambda: request_stop(Job.objects.get(pk=job.pk), reason="by alice"))
    answer, took = _held_wait(client, token, known)
    stopper.join()
    assert answer["changed"] is True and took < 10, (answer, took)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="NOTIFY is PostgreSQL's")
def test_another_process_wakes_the_wait_through_postgresql(
    client, settings, researcher, workspace, quota, fresh_watcher
):
    """The Celery worker's cycle runs in another process: its nudge is `NOTIFY agent_wake`,
    which this process's listener turns into a tick. Here the pod is written with no nudge
    at all and the NOTIFY is sent on a connection of its own, as another process would,
    once the listener listens and the wait has had its first look: only the NOTIFY can
    answer it before the 30 s poll."""
    settings.AGENT_WAIT_POLL = 30
    node, token = register(client)
    known = heartbeat(client, token)["desired_version"]

    def place_elsewhere() -> None:
        with _own_connection() as other:  # as another process would
            wait_for(lambda: _listening_backend(other), "the listener to listen")
            wait_for(lambda: node.pk in wake._watcher._seen, "the wait's first look")
            make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
            other.execute(f"NOTIFY {wake.CHANNEL}")

    placer = _in_a_thread(place_elsewhere, delay=0)
    answer, took = _held_wait(client, token, known)
    placer.join()
    assert answer["changed"] is True and took < 10, (answer, took)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="NOTIFY is PostgreSQL's")
def test_the_listener_listens_again_after_its_connection_is_killed(
    client, settings, researcher, workspace, quota, fresh_watcher
):
    """A database restart (here: its backend terminated) ends the listening connection;
    the listener opens another, and a later NOTIFY still wakes the wait."""
    settings.AGENT_WAIT_POLL = 30
    node, token = register(client)
    known = heartbeat(client, token)["desired_version"]

    def kill_then_place() -> None:
        with _own_connection() as other:
            first = wait_for(lambda: _listening_backend(other), "the listener to listen")
            other.execute("SELECT pg_terminate_backend(%s)", [first])
            wait_for(
                lambda: _listening_backend(other) not in (None, first),
                "the listener to listen again",
            )
            make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
            other.execute(f"NOTIFY {wake.CHANNEL}")

    placer = _in_a_thread(kill_then_place, delay=0)
    answer, took = _held_wait(client, token, known)
    placer.join()
    assert answer["changed"] is True and took < 10, (answer, took)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="NOTIFY is PostgreSQL's")
def test_a_nudge_is_a_notify_that_other_processes_hear(db_listener):
    with transaction.atomic():
        triggers.wake_agents()
        assert not db_listener(0.2)  # nothing before the commit
    assert db_listener(5)


@pytest.fixture
def db_listener():
    """A connection of its own LISTENing on the wake channel; calling it waits for one
    notification (True) or the timeout (False)."""
    own = _own_connection()
    own.execute(f"LISTEN {wake.CHANNEL}")

    def heard(timeout: float) -> bool:
        return any(True for _ in own.notifies(timeout=timeout, stop_after=1))

    yield heard
    own.close()


def test_a_wait_without_a_free_slot_is_answered_at_once(client, settings, fresh_watcher):
    settings.AGENT_WAIT_SLOTS = 0
    _, token = register(client)
    response = post(client, "wait/", {"known": "0.0.0", "timeout": 20}, token)
    # Six heartbeat intervals: a refused agent does not ask at every heartbeat.
    assert response.json() == {"changed": False, "retry_after": 30.0, "desired_version": None}


def test_a_wait_needs_a_node_token_and_a_valid_body(client):
    _, token = register(client)
    assert post(client, "wait/", {"known": "x"}).status_code == 401
    response = post(client, "wait/", {"known": "x", "timeout": 61}, token)
    assert (response.status_code, response.json()["error"]["field"]) == (400, "timeout")


@pytest.mark.e2e
def test_a_real_agent_starts_and_stops_a_job_long_before_its_next_heartbeat(
    agents, researcher, quota, fresh_watcher
):
    # Heartbeats every 30 s: the pod can only start (and stop) in time if the agent is woken.
    agent = agents(extra=("--heartbeat-interval", "30", "--cpus", "64", "--memory-gb", "512"))
    node = registered("e2e-node")
    wait_for(lambda: node.pk in wake.watcher()._waiting, "the agent to wait for work")
    _, plain = issue_api_token(researcher)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")

    submitted = time.monotonic()
    response = api.post(
        "/api/v1/jobs",
        {"quota": "team-a", "image": "busybox", "command": "sleep 600", "gpus_per_worker": 1},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    pod = wait_for(lambda: Pod.objects.filter(job_id=response.json()["id"]).first(), "a pod")
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run", timeout=10)
    started = time.monotonic() - submitted
    request_stop(Job.objects.get(pk=pod.job_id), reason="stopped by alice", grace=5)
    asked = time.monotonic()
    wait_for(lambda: pod_status(pod) == PodStatus.STOPPED, "the pod to stop", timeout=10)
    stopped = time.monotonic() - asked
    print(f"submit → Running {started:.2f}s, stop → Stopped {stopped:.2f}s")
    assert agent.terminate() == 0, agent.output()
    assert "Traceback" not in agent.output()
