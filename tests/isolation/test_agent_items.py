"""Per-item isolation in the agent API (issue 9, second bullet), on the real endpoints.

A heartbeat or a log request is a batch of independent items: text is repaired (NUL → ␀,
lone surrogates → U+FFFD, too long → cut with "…"), an item that still cannot be read or
applied is refused alone with a reason (in the reply and on its pod), and the node is Ready
only while its heartbeats are actually applied. The old code answered 500 to the whole
request on PostgreSQL (NUL), or 400 to the whole heartbeat (one bad item), so one job froze
every job of its node.
"""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.node_monitor import run_node_monitor
from cluster.models import GpuDevice, Node, NodeState
from jobs.models import Job, LogChunk, Pod
from policy.statuses import JobStatus, PodStatus
from protocol import limits
from protocol.text import NUL_MARK
from tests.agents.conftest import exited, facts, gpu, heartbeat, post, register, running

pytestmark = pytest.mark.django_db


def placed(job_factory, node, **kwargs) -> Pod:
    return job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING, **kwargs)[1][
        0
    ]


def test_nul_in_every_text_of_a_heartbeat_is_repaired_and_applied(client, job_factory):
    node, token = register(client)
    failing, phased, other = (placed(job_factory, node) for _ in range(3))
    reports = [
        {
            **exited(failing, 3, "Traceback\nValueError: bad\x00byte\x00"),
            "container_id": "process:1\x00",
        },
        {**running(phased), "progress": {"step": 5, "total": 10, "phase": "tr\x00ain"}},
        running(other),
    ]
    response = heartbeat(client, token, reports)
    assert response.status_code == 200, response.content
    assert response.json()["refused"] == {}
    failing.refresh_from_db()
    assert failing.status == PodStatus.FAILED
    assert failing.status_reason == f"ValueError: bad{NUL_MARK}byte{NUL_MARK}"
    assert failing.container_id == f"process:1{NUL_MARK}"
    assert Job.objects.get(pk=failing.job_id).status == JobStatus.FAILED
    phased.refresh_from_db()
    assert (phased.progress_step, phased.progress_phase) == (5, f"tr{NUL_MARK}ain")
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_lone_surrogates_in_a_heartbeat_are_repaired_not_refused(client, job_factory):
    node, token = register(client)
    pod = placed(job_factory, node)
    body = json.dumps(
        {"facts": facts(hostname="host-\ud800"), "workers": [exited(pod, 1, "why \udfff")]}
    )
    assert "\\ud800" in body  # escaped, as a hostile agent would send it
    response = post(client, "heartbeat/", body, token)
    assert response.status_code == 200, response.content
    pod.refresh_from_db()
    assert pod.status_reason == "why \ufffd"


def test_one_bad_worker_report_is_refused_alone_and_noted_on_its_pod(client, job_factory):
    node, token = register(client)
    good, bad, extras = (placed(job_factory, node) for _ in range(3))
    reports = [
        exited(good, 0),
        {**exited(bad, 0), "exit_code": "zero"},
        {**exited(extras, 0), "progress": {"step": -1}, "gpu": {"gpus": 0}},
        {"pod_id": "x", "state": "exited"},  # names no pod: logged, nothing else
    ]
    response = heartbeat(client, token, reports)
    assert response.status_code == 200, response.content
    refused = response.json()["refused"]
    assert set(refused) == {str(bad.pk), str(extras.pk)}
    assert refused[str(bad.pk)].startswith("exit_code: Input should be a valid integer")
    # A bad detail is dropped with its reason; the report itself (the exit) still counts.
    assert "progress dropped" in refused[str(extras.pk)]
    assert "gpu dropped" in refused[str(extras.pk)]
    statuses = {p.pk: p.status for p in Pod.objects.all()}
    assert statuses == {
        good.pk: PodStatus.SUCCEEDED,
        bad.pk: PodStatus.RUNNING,
        extras.pk: PodStatus.SUCCEEDED,
    }
    bad.refresh_from_db()
    assert bad.report_refused.startswith("report refused: exit_code: Input should be")
    assert bad.report_refused_at is not None


def test_a_stored_spec_the_agent_would_refuse_fails_its_worker_alone(client, job_factory):
    """A job stored before submission checked it (or by another path) whose env name the
    agent protocol refuses: its worker fails with a reason that fits, the others start."""
    node, token = register(client)
    broken = placed(job_factory, node, env={"A" * 280: "1"})
    Pod.objects.filter(pk=broken.pk).update(status=PodStatus.STARTING)
    fine = job_factory([node])[1][0]
    response = heartbeat(client, token)
    assert response.status_code == 200, response.content
    assert [spec["pod_id"] for spec in response.json()["run"]] == [fine.pk]
    broken.refresh_from_db()
    assert broken.status == PodStatus.FAILED
    assert broken.status_reason.startswith("invalid worker spec: env.AAAA")
    assert len(broken.status_reason) <= limits.REASON
    assert Job.objects.get(pk=broken.job_id).status == JobStatus.FAILED


def test_a_log_line_with_nul_is_stored_visibly(client, job_factory):
    node, token = register(client)
    pod = placed(job_factory, node)
    batch = {"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["a\x00b", "next"]}
    response = post(client, "logs/", {"batches": [batch]}, token)
    assert response.status_code == 200, response.content
    assert response.json()["acks"] == {str(pod.pk): 2}
    assert LogChunk.objects.get().text == f"a{NUL_MARK}b\nnext\n"


# --- the console itself failing on one item (PostgreSQL triggers) --------------------------


def test_a_report_the_console_cannot_apply_is_refused_alone(client, job_factory, trigger):
    node, token = register(client)
    doomed, fine = placed(job_factory, node), placed(job_factory, node)
    trigger.refuse(
        "jobs_pod", f"NEW.id = {doomed.pk} AND NEW.status <> OLD.status", events="UPDATE"
    )
    response = heartbeat(client, token, [exited(doomed, 1, "x"), exited(fine, 0)])
    assert response.status_code == 200, response.content
    reason = response.json()["refused"][str(doomed.pk)]
    assert reason.startswith("the console could not apply the worker report")
    assert Pod.objects.get(pk=fine.pk).status == PodStatus.SUCCEEDED
    assert Pod.objects.get(pk=doomed.pk).status == PodStatus.RUNNING  # rolled back alone
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_progress_the_console_cannot_store_is_refused_alone(client, job_factory, trigger):
    """The workers' progress is stored together; when that fails, each is stored alone and
    only the bad one is refused (nothing of it kept), the others' steps and samples stored."""
    from jobs.models import ProgressSample

    node, token = register(client)
    doomed, fine, other = (placed(job_factory, node) for _ in range(3))
    trigger.refuse(
        "jobs_pod",
        f"NEW.id = {doomed.pk} AND NEW.progress_step IS DISTINCT FROM OLD.progress_step",
        events="UPDATE",
    )
    reports = [{**running(p), "progress": {"step": 5}} for p in (doomed, fine, other)]
    response = heartbeat(client, token, reports)
    assert response.status_code == 200, response.content
    refused = response.json()["refused"]
    assert list(refused) == [str(doomed.pk)]
    assert refused[str(doomed.pk)].startswith("the console could not apply the progress")
    steps = dict(Pod.objects.values_list("pk", "progress_step"))
    assert (steps[doomed.pk], steps[fine.pk], steps[other.pk]) == (None, 5, 5)
    assert sorted(ProgressSample.objects.values_list("pod_id", flat=True)) == sorted(
        [fine.pk, other.pk]
    )
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_lines_the_console_cannot_store_are_refused_alone(client, job_factory, trigger):
    node, token = register(client)
    doomed, fine = placed(job_factory, node), placed(job_factory, node)
    trigger.refuse("jobs_logchunk", f"NEW.pod_id = {doomed.pk}", events="INSERT")
    batches = [
        {"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["hello"]}
        for pod in (doomed, fine)
    ]
    response = post(client, "logs/", {"batches": batches}, token)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["acks"] == {str(fine.pk): 1}
    assert body["refused"][str(doomed.pk)].startswith("the console could not apply the log")
    assert Pod.objects.get(pk=doomed.pk).log_next_seq == 0  # nothing half-written
    assert [c.pod_id for c in LogChunk.objects.all()] == [fine.pk]


@pytest.mark.django_db(transaction=True)  # the failed request aborts its transaction
def test_the_node_is_ready_only_while_its_heartbeats_are_applied(job_factory, trigger):
    """A heartbeat the console fails on does not count as a sign of life: the node goes
    NotReady (no new placements), its workers Unknown, then back once heartbeats apply."""
    client = Client(raise_request_exception=False)
    node, token = register(client)
    pod = placed(job_factory, node)
    assert heartbeat(client, token, [running(pod)]).status_code == 200
    seen = Node.objects.get(pk=node.pk).last_heartbeat_at
    trigger.refuse("cluster_gpudevice", f"NEW.node_id = {node.pk}", events="UPDATE")
    # New GPU readings (the same facts would be one UPDATE of the node, nothing to fail).
    busy = [gpu(i, utilization=50) for i in range(8)]
    assert heartbeat(client, token, [running(pod)], gpus=busy).status_code == 500
    assert Node.objects.get(pk=node.pk).last_heartbeat_at == seen
    late = timezone.now() + timedelta(seconds=31)
    assert run_node_monitor(now=late).not_ready == [node.name]
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.UNKNOWN

    trigger.drop_all()
    assert heartbeat(client, token, [running(pod)]).status_code == 200
    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.RUNNING
    assert GpuDevice.objects.filter(node=node, healthy=True).count() == 8
