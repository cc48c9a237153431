"""POST /api/v1/agent/heartbeat/: auth, node facts, GPU upsert, worker reports, desired state."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from agents.heartbeat import quiet
from cluster.actions import MISSING_GPU
from cluster.models import GpuDevice, Node, NodeState
from jobs.actions.stop import request_stop
from jobs.models import Job, JobEvent, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import exited, facts, gpu, heartbeat, post, register, running

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# --- authentication ---


@pytest.mark.parametrize("header", [None, "Bearer nope", "Token abc", "Bearer gqn_abc"])
def test_missing_or_malformed_node_token_is_401(client, header):
    register(client)
    headers = {"Authorization": header} if header else {}
    response = client.post(
        "/api/v1/agent/heartbeat/",
        data={"facts": facts()},
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"code", "message", "field"}


def test_wrong_secret_is_401(client):
    node, _token = register(client)
    forged = f"gqn_{node.token_prefix}_{'x' * 43}"
    assert heartbeat(client, forged).status_code == 401


def test_bootstrap_token_is_not_a_node_token(client):
    from agents.actions import issue_bootstrap_token

    register(client)
    _, bootstrap = issue_bootstrap_token(None, "x")
    response = heartbeat(client, bootstrap)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "malformed_token"


def test_revoked_node_token_is_403(client):
    node, token = register(client)
    Node.objects.filter(pk=node.pk).update(token_revoked_at=timezone.now())
    response = heartbeat(client, token)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_revoked"


def test_auth_is_checked_before_the_body(client):
    response = post(client, "heartbeat/", b"not json", "Bearer-less")
    assert response.status_code == 401


def test_an_invalid_worker_report_is_refused_alone_with_the_field(client):
    _, token = register(client)
    bad = {"pod_id": 1, "attempt": 1, "state": "zombie"}
    response = heartbeat(client, token, workers=[bad])
    assert response.status_code == 200
    assert response.json()["refused"] == {"1": "state: Input should be 'running' or 'exited'"}
    response = heartbeat(client, token, workers=[{**bad, "state": "running", "exit_code": 1}])
    assert response.status_code == 200
    assert "running worker has no exit code" in response.json()["refused"]["1"]


def test_invalid_facts_refuse_the_heartbeat_with_the_field(client):
    _, token = register(client)
    response = heartbeat(client, token, cpus=-1)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "facts"
    assert "cpus" in response.json()["error"]["message"]


def test_get_is_405(client):
    assert client.get("/api/v1/agent/heartbeat/").status_code == 405


# --- node facts and GPUs ---


def test_heartbeat_uses_console_time_and_brings_a_not_ready_node_back(client):
    node, token = register(client)
    Node.objects.filter(pk=node.pk).update(state=NodeState.NOT_READY)
    with time_machine.travel(T0, tick=False):
        response = heartbeat(client, token, cpus=64, memory_gb=512, agent_version="0.2.0")
    assert response.status_code == 200
    node.refresh_from_db()
    assert node.state == NodeState.READY
    assert node.last_heartbeat_at == T0
    assert node.heartbeat_deadline == T0 + timedelta(seconds=30)
    assert (node.cpus, node.memory_gb, node.agent_version) == (64, 512, "0.2.0")


def test_gpus_are_upserted_and_a_vanished_gpu_is_marked_unhealthy(client):
    node, token = register(client)
    gpus = [gpu(i, utilization=50 + i, temperature=60, power_watts=350.5) for i in range(8)]
    gpus[3] = gpu(3, ecc_errors=2, healthy=False, health_reason="2 uncorrectable ECC errors")
    assert heartbeat(client, token, gpus=gpus).status_code == 200
    rows = {d.index: d for d in GpuDevice.objects.filter(node=node)}
    assert len(rows) == 8
    assert (rows[0].utilization, rows[0].temperature, rows[0].power_watts) == (50, 60, 350.5)
    assert (rows[3].healthy, rows[3].ecc_errors) == (False, 2)

    assert heartbeat(client, token, gpus=gpus[:7]).status_code == 200
    node.refresh_from_db()
    assert node.gpus == 7
    gone = GpuDevice.objects.get(node=node, index=7)
    assert (gone.healthy, gone.health_reason) == (False, MISSING_GPU)
    assert GpuDevice.objects.filter(node=node).count() == 8  # kept for the record


def test_a_duplicate_or_invalid_gpu_is_refused_alone_and_marked_unhealthy(client):
    node, token = register(client)
    response = heartbeat(client, token, gpus=[gpu(0), gpu(0), gpu(1, utilization=101), gpu(2)])
    assert response.status_code == 200
    devices = {d.index: d for d in GpuDevice.objects.filter(node=node)}
    assert devices[2].healthy  # the good report counts
    # Two reports of one device contradict each other, and one cannot be read: the
    # scheduler must not place work on either until a clean report comes.
    assert (devices[0].healthy, devices[0].health_reason) == (
        False,
        "report refused: GPU 0 is reported twice",
    )
    assert not devices[1].healthy
    assert devices[1].health_reason.startswith("report refused: gpus.2: utilization")


# --- worker reports ---


def test_running_report_moves_pod_and_job_to_running(client, job_factory):
    node, token = register(client)
    job, (pod,) = job_factory([node])
    with time_machine.travel(T0, tick=False):
        response = heartbeat(client, token, workers=[running(pod) | {"container_id": "c1"}])
    assert response.status_code == 200
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.started_at, pod.container_id) == (PodStatus.RUNNING, T0, "c1")
    assert job.status == JobStatus.RUNNING


def test_exit_zero_completes_the_job(client, job_factory):
    node, token = register(client)
    job, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    assert heartbeat(client, token, workers=[exited(pod, 0)]).status_code == 200
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.exit_code) == (PodStatus.SUCCEEDED, 0)
    assert job.status == JobStatus.COMPLETED


def test_nonzero_exit_fails_the_job_with_the_log_tail(client, job_factory):
    node, token = register(client)
    job, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    tail = "step 10\nTraceback (most recent call last):\nValueError: bad shape"
    assert heartbeat(client, token, workers=[exited(pod, 3, tail)]).status_code == 200
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.exit_code, pod.error_message) == (PodStatus.FAILED, 3, tail)
    assert job.status == JobStatus.FAILED
    assert job.status_reason == "worker 0 exited 3: ValueError: bad shape"


def test_a_resent_exit_report_changes_nothing(client, job_factory):
    node, token = register(client)
    _job, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    heartbeat(client, token, workers=[exited(pod, 0)])
    events = JobEvent.objects.count()
    response = heartbeat(client, token, workers=[exited(pod, 1, "late")])
    assert response.status_code == 200
    pod.refresh_from_db()
    assert (pod.status, pod.exit_code) == (PodStatus.SUCCEEDED, 0)
    assert JobEvent.objects.count() == events
    assert response.json()["run"] == [] and response.json()["stop"] == []


def test_a_node_cannot_report_on_another_nodes_pod(client, job_factory):
    node_a, _ = register(client, "a")
    _, token_b = register(client, "b")
    _job, (pod,) = job_factory([node_a], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)

    response = heartbeat(client, token_b, workers=[exited(pod, 1, "forged")])
    assert response.status_code == 200
    pod.refresh_from_db()
    assert pod.status == PodStatus.RUNNING

    # If node b claims to run it, it is told to stop that worker; the pod is untouched.
    response = heartbeat(client, token_b, workers=[running(pod)])
    (order,) = response.json()["stop"]
    assert order["pod_id"] == pod.pk
    assert order["reason"] == "stale worker: pod is not placed on this node"
    assert response.json()["run"] == []
    pod.refresh_from_db()
    assert (pod.status, pod.node_id) == (PodStatus.RUNNING, node_a.pk)


def test_a_report_for_another_attempt_is_ignored_and_fenced(client, job_factory):
    node, token = register(client)
    _job, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    stale = {**exited(pod, 1, "old attempt"), "attempt": pod.attempt + 1}
    assert heartbeat(client, token, workers=[stale]).status_code == 200
    pod.refresh_from_db()
    assert pod.status == PodStatus.RUNNING

    stale_running = {**running(pod), "attempt": pod.attempt + 1}
    response = heartbeat(client, token, workers=[stale_running])
    assert [o["pod_id"] for o in response.json()["stop"]] == [pod.pk]
    assert response.json()["stop"][0]["attempt"] == pod.attempt + 1


def test_a_worker_still_running_for_a_lost_pod_is_ordered_to_stop(client, job_factory):
    node, token = register(client)
    _job, (pod,) = job_factory([node], pod_status=PodStatus.LOST, status=JobStatus.FAILED)
    response = heartbeat(client, token, workers=[running(pod)])
    (order,) = response.json()["stop"]
    assert order == {
        "pod_id": pod.pk,
        "attempt": 1,
        "grace_seconds": 30.0,
        "reason": "stale worker: the worker is already Lost",
    }
    pod.refresh_from_db()
    assert pod.status == PodStatus.LOST


def test_unknown_pod_reported_running_is_fenced(client):
    _, token = register(client)
    response = heartbeat(client, token, workers=[{"pod_id": 999, "attempt": 1, "state": "running"}])
    assert [o["pod_id"] for o in response.json()["stop"]] == [999]


def test_unknown_pods_go_back_to_running_when_the_agent_still_runs_them(client, job_factory):
    node, token = register(client)
    _job, (pod,) = job_factory([node], pod_status=PodStatus.UNKNOWN, status=JobStatus.RUNNING)
    Node.objects.filter(pk=node.pk).update(state=NodeState.NOT_READY)
    assert heartbeat(client, token, workers=[running(pod)]).status_code == 200
    pod.refresh_from_db()
    assert (pod.status, pod.status_reason) == (PodStatus.RUNNING, "")
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


# --- desired state ---


def test_reply_lists_pods_to_run_and_to_stop(client, job_factory):
    node, token = register(client)
    other, _ = register(client, "other")
    job, (p0, p1) = job_factory([node, node], gpus=2, env={"LR": "0.1"}, command="python train.py")
    Pod.objects.filter(pk=p1.pk).update(
        gpu_indices=[2, 3], gpu_uuids=["GPU-0002", "GPU-0003"], log_next_seq=7
    )
    _, (unknown_pod,) = job_factory([node], pod_status=PodStatus.UNKNOWN)
    _, (finished,) = job_factory([node], pod_status=PodStatus.SUCCEEDED)
    _, (elsewhere,) = job_factory([other])
    stopping_job, (stopping,) = job_factory(
        [node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING
    )
    request_stop(stopping_job, reason="stopped by alice", grace=45)

    reply = heartbeat(client, token).json()
    run = {spec["pod_id"]: spec for spec in reply["run"]}
    assert set(run) == {p0.pk, p1.pk, unknown_pod.pk}
    assert run[p1.pk] == {
        "pod_id": p1.pk,
        "job_id": job.pk,
        "attempt": 1,
        "rank": 1,
        "world_size": 2,
        "image": "pytorch:2.4",
        "command": "python train.py",
        "env": {"LR": "0.1"},
        "gpu_indices": [2, 3],
        "gpu_uuids": ["GPU-0002", "GPU-0003"],
        "cpus": 4,
        "memory_gb": 16,
        "log_next_seq": 7,
        "resume_from": "",
        "checkpoint_subdir": "",
        "workspace_id": job.workspace_id,
        "rendezvous": {},  # placed by hand, not by a cycle: no rendezvous recorded
        "data": {},
        "code_repo": "",
        "code_ref": "",
        "result_validator": "",  # no work contract (docs/results.md)
        "expected_output_gb": None,  # the agent's floor (docs/results.md, "Before a long run")
        "preflight_seconds": None,  # no rehearsal before the run (ibid.)
        "output_subdir": "",  # its result in its checkpoint folder (docs/results.md)
        "hash_inputs": False,  # no content manifest (docs/results.md, "Run identity")
        "resume_identity": None,  # carries no accepted units
    }
    assert reply["stop"] == [
        {"pod_id": stopping.pk, "attempt": 1, "grace_seconds": 45.0, "reason": "stopped by alice"}
    ]
    assert finished.pk not in run and elsewhere.pk not in run
    assert reply["heartbeat_interval"] == 5.0
    assert reply["refused"] == {}
    assert 0 < reply["lease_seconds"] < 300 and reply["fence_grace"] > 0


def test_a_failed_worker_gets_its_gang_stopped_in_the_same_reply(client, job_factory):
    node, token = register(client)
    _job, (p0, p1) = job_factory(
        [node, node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING
    )
    reply = heartbeat(client, token, workers=[exited(p0, 1, "boom"), running(p1)]).json()
    assert reply["run"] == []
    assert [o["pod_id"] for o in reply["stop"]] == [p1.pk]
    assert reply["stop"][0]["reason"].startswith("job failed: worker 0 exited 1")


def test_after_an_exit_the_reply_matches_the_database_for_every_job(client, job_factory):
    """After an exit only the exited job's pods are read again (agents.heartbeat.actions.
    _read_again); the reply still says what the database says: the gang stopped, the other
    job's worker still to run, and the desired version the agent's wait compares."""
    from agents.wake import versions_of

    node, token = register(client)
    _job, (p0, p1) = job_factory(
        [node, node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING
    )
    _other, (q0,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    reply = heartbeat(client, token, workers=[exited(p0, 1, "boom"), running(p1), running(q0)])
    reply = reply.json()
    assert [o["pod_id"] for o in reply["stop"]] == [p1.pk]
    assert [spec["pod_id"] for spec in reply["run"]] == [q0.pk]
    assert reply["desired_version"] == versions_of([node.pk])[node.pk] == f"2.{p1.pk + q0.pk}.1"


def test_a_pod_whose_spec_cannot_be_sent_fails_instead_of_breaking_the_node(client, job_factory):
    node, token = register(client)
    job, (bad,) = job_factory([node], env={"NOT VALID": "x"})
    _, (good,) = job_factory([node])
    response = heartbeat(client, token)
    assert response.status_code == 200
    assert [s["pod_id"] for s in response.json()["run"]] == [good.pk]
    bad.refresh_from_db()
    assert bad.status == PodStatus.FAILED
    assert "invalid worker spec: env.NOT VALID" in bad.error_message
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


# --- query counts ---


@pytest.mark.parametrize(("gpus", "workers"), [(1, 1), (8, 6), (64, 20)])
def test_steady_heartbeat_query_count_does_not_grow_with_gpus_or_workers(
    client, job_factory, django_assert_num_queries, gpus, workers
):
    node, token = register(client, gpus=gpus)
    _, pods = job_factory([node] * workers)
    reports = [running(p) for p in pods]
    heartbeat(client, token, workers=reports, gpus=gpus)  # Starting → Running, once
    # the full path (in a process that has not answered this node yet): auth, pods with
    # their jobs, and ONE write: the node seen (its facts and GPUs as the digest on its row,
    # compared in SQL; no GPU upsert, no timestamps on running workers)
    quiet.forget_all()
    with django_assert_num_queries(3) as queries:
        full = heartbeat(client, token, workers=reports, gpus=gpus)
    writes = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("SELECT")]
    assert len(writes) == 1 and writes[0].startswith('UPDATE "cluster_node"'), writes
    # then the quiet path (agents.heartbeat.quiet): the token, the digest and the pods checked by
    # that one UPDATE, the same reply
    with django_assert_num_queries(1) as queries:
        response = heartbeat(client, token, workers=reports, gpus=gpus)
    assert response.status_code == 200
    assert len(response.json()["run"]) == workers
    assert response.json() == full.json()
    assert queries.captured_queries[0]["sql"].startswith('UPDATE "cluster_node"')


def test_a_heartbeat_with_other_facts_or_gpu_readings_records_them(client, job_factory):
    node, token = register(client)
    heartbeat(client, token)
    heartbeat(client, token)  # the same: only the time seen
    seen = Node.objects.get(pk=node.pk)
    assert seen.report_digest and seen.state == NodeState.READY
    busy = [gpu(i, utilization=90 if i == 3 else 0, memory_used_mb=1000) for i in range(8)]
    assert heartbeat(client, token, gpus=busy, cpus=64).status_code == 200
    device = GpuDevice.objects.get(node=node, index=3)
    assert (device.utilization, device.memory_used_mb) == (90, 1000)
    node = Node.objects.get(pk=node.pk)
    assert node.cpus == 64 and node.report_digest != seen.report_digest
    assert node.last_heartbeat_at > seen.last_heartbeat_at


def test_a_node_marked_not_ready_is_ready_again_on_a_same_facts_heartbeat(client):
    node, token = register(client)
    heartbeat(client, token)
    Node.objects.filter(pk=node.pk).update(state=NodeState.NOT_READY)
    heartbeat(client, token)
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_the_first_heartbeat_after_a_re_registration_writes_the_gpus_whole(client):
    node, token = register(client)
    heartbeat(client, token)
    GpuDevice.objects.filter(node=node).update(utilization=55)
    # Registering again clears the digest: the next heartbeat writes the GPUs whole.
    Node.objects.filter(pk=node.pk).update(token_revoked_at=timezone.now())
    node, token = register(client)
    GpuDevice.objects.filter(node=node).update(utilization=55)
    heartbeat(client, token)
    assert set(GpuDevice.objects.filter(node=node).values_list("utilization", flat=True)) != {55}


@pytest.mark.parametrize("workers", [1, 3])
def test_the_workers_that_started_cost_one_statement_together(
    client, job_factory, django_assert_num_queries, workers
):
    node, token = register(client)
    _, pods = job_factory([node] * workers)
    heartbeat(client, token)
    # auth, node seen (the same facts: no GPU upsert), pods (not read again: workers that
    # started change nothing the reply says; an exit does); once for all the changes (one
    # transaction: jobs.actions.workers.apply_worker_states): a savepoint around the jobs'
    # row locks (jobs before their pods, read as they are locked), then reading their
    # pods; for all the workers at once their compare-and-set Starting → Running (one
    # UPDATE joined on a row source); once for the job: Starting → Running with its
    # event, plus the look-up of notification rules that could want to hear of it.
    with django_assert_num_queries(3 + PER_HEARTBEAT_CHANGES + 1 + 3):
        response = heartbeat(client, token, workers=[running(p) for p in pods])
    assert response.status_code == 200
    assert Pod.objects.filter(status=PodStatus.RUNNING).count() == workers


def test_the_reply_to_workers_that_started_is_the_one_a_fresh_read_gives(client, job_factory):
    """Starting → Running does not read the node's pods again: the reply from the pods read
    before the change is what a heartbeat reading them after it answers."""
    node, token = register(client)
    _, pods = job_factory([node] * 2)
    started = heartbeat(client, token, workers=[running(p) for p in pods])
    assert Pod.objects.filter(status=PodStatus.RUNNING).count() == 2
    quiet.forget_all()  # the full path, reading them now
    again = heartbeat(client, token, workers=[running(p) for p in pods])
    assert started.json() == again.json() and len(started.json()["run"]) == 2


PER_HEARTBEAT_CHANGES = 4  # savepoint, lock and read the jobs, read their pods, release


def test_gpu_samples_are_stored_for_the_nodes_current_workers_only(
    client, job_factory, django_assert_num_queries
):
    from jobs.models import WorkerGpuSample

    node, token = register(client)
    other, _ = register(client, "other")
    _, (mine,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    _, (foreign,) = job_factory([other], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    usage = {"gpus": 1, "utilization": 93, "memory_used_mb": 70000}
    response = heartbeat(
        client, token, [{**running(mine), "gpu": usage}, {**running(foreign), "gpu": usage}]
    )
    assert response.status_code == 200
    assert [(s.pod_id, s.utilization) for s in WorkerGpuSample.objects.all()] == [(mine.pk, 93)]
    bad = heartbeat(client, token, [{**running(mine), "gpu": {**usage, "utilization": 101}}])
    assert bad.status_code == 200  # the sample alone is dropped, with the reason
    assert bad.json()["refused"][str(mine.pk)].startswith("gpu dropped: utilization")


def test_the_exits_of_one_heartbeat_cost_the_statements_of_one(client, job_factory):
    """Four exits (each of its own job) cost what one does: the jobs' locks and reads, the
    pods' compare-and-set (one UPDATE for all), the jobs' moves to Completed (one UPDATE,
    one INSERT of events: jobs.actions.transitions.finish_many) and one look-up of the
    notification rules are shared (jobs.actions.workers.apply_worker_states)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node, token = register(client)
    heartbeat(client, token)  # the first one after registering writes the GPUs
    counts = []
    for jobs in (1, 4):
        pods = [
            job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)[1][0]
            for _ in range(jobs)
        ]
        with CaptureQueriesContext(connection) as queries:
            response = heartbeat(client, token, workers=[exited(p, 0) for p in pods])
        assert response.status_code == 200
        assert Pod.objects.filter(status=PodStatus.SUCCEEDED).count() == sum(
            (1, 4)[: len(counts) + 1]
        )
        counts.append(len(queries))
    assert counts[1] == counts[0]


def test_jobs_that_ran_and_ended_between_two_heartbeats_keep_their_timelines_in_order(
    client, job_factory
):
    """Starting → Running is written at once and the move to Completed with the others of
    the heartbeat (jobs.actions.transitions.finish_many): each timeline still reads in
    order, and a job whose result was refused ends alone, as before."""
    node, token = register(client)
    heartbeat(client, token)
    jobs = [job_factory([node])[0] for _ in range(3)]
    pods = [Pod.objects.get(job=job) for job in jobs]
    response = heartbeat(client, token, workers=[exited(p, 0) for p in pods])
    assert response.status_code == 200 and not response.json()["refused"]
    for job in jobs:
        timeline = list(
            JobEvent.objects.filter(job=job)
            .order_by("created_at", "id")
            .values_list("from_status", "to_status")
        )
        assert timeline == [
            (JobStatus.STARTING, JobStatus.RUNNING),
            (JobStatus.RUNNING, JobStatus.COMPLETED),
        ]
        job.refresh_from_db()
        assert (job.status, job.exit_code) == (JobStatus.COMPLETED, 0)
        assert job.finished_at is not None and job.started_at <= job.finished_at
