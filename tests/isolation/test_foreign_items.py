"""Only a node's own pods (issue 34, item 2; docs/agent-protocol.md): a node's token may
speak only for the pods placed on it in their current attempt. With node B's token, a
checkpoint, a status, progress or log lines for a pod on node A are refused alone with the
reason and audited once per request; B's own items in the same batch are applied. The old
code stored another node's checkpoint as the job's resume point."""

import pytest

from audit.models import AuditEntry
from jobs.models import Checkpoint, Job, LogChunk, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import facts, heartbeat, post, register
from tests.faulttolerance.conftest import make_ft_job

pytestmark = pytest.mark.django_db

NOT_HERE = "pod is not placed on this node"


def ckpt(job_id: int, step: int) -> dict:
    return {"step": step, "path": f"/ck/{job_id}/step-{step}", "size_bytes": 1, "checksum": "ab"}


@pytest.fixture
def two_nodes(client, researcher, workspace, quota):
    node_a, token_a = register(client, "node-a")
    node_b, token_b = register(client, "node-b")

    def job_on(node):
        return make_ft_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])

    job_a, (pod_a,) = job_on(node_a)
    job_b, (pod_b,) = job_on(node_b)
    return (node_a, token_a, job_a, pod_a), (node_b, token_b, job_b, pod_b)


def lines(pod, *texts) -> dict:
    return {"pod_id": pod.pk, "attempt": pod.attempt, "first_seq": 0, "lines": list(texts)}


def test_another_nodes_pod_is_refused_alone_and_audited_once(client, two_nodes):
    (_, _, job_a, pod_a), (node_b, token_b, job_b, pod_b) = two_nodes
    progress = {"step": 7, "total": 10}
    reports = [
        # B speaks for A's pod: an exit with a checkpoint (the old resume-point hijack).
        {
            "pod_id": pod_a.pk,
            "attempt": 1,
            "state": "exited",
            "exit_code": 1,
            "checkpoints": [ckpt(job_a.pk, 99)],
            "progress": progress,
        },
        # B's own pod, in the same batch: applied.
        {
            "pod_id": pod_b.pk,
            "attempt": 1,
            "state": "running",
            "checkpoints": [ckpt(job_b.pk, 5)],
            "progress": progress,
        },
    ]
    body = {
        "facts": facts(),
        "workers": reports,
        "logs": [lines(pod_a, "forged"), lines(pod_b, "mine")],
    }
    response = post(client, "heartbeat/", body, token_b)
    assert response.status_code == 200, response.content
    reply = response.json()
    assert reply["refused"] == {str(pod_a.pk): NOT_HERE}
    assert reply["logs"]["rejected"] == {str(pod_a.pk): NOT_HERE}
    assert reply["logs"]["acks"] == {str(pod_b.pk): 1}

    # A's job is untouched: no checkpoint, no resume point, no exit, no progress, no lines.
    job_a.refresh_from_db()
    pod_a.refresh_from_db()
    assert (job_a.status, job_a.attempt, job_a.resume_from) == (JobStatus.RUNNING, 1, "")
    assert (pod_a.status, pod_a.progress_step, pod_a.report_refused) == (
        PodStatus.RUNNING,
        None,
        "",
    )
    assert not Checkpoint.objects.filter(job=job_a).exists()
    assert not LogChunk.objects.filter(pod=pod_a).exists()
    # B's own items are stored.
    assert Checkpoint.objects.filter(job=job_b, step=5).exists()
    assert Pod.objects.get(pk=pod_b.pk).progress_step == 7
    assert LogChunk.objects.get(pod=pod_b).text == "mine\n"

    (entry,) = AuditEntry.objects.filter(action="node.foreign_items")
    assert (entry.object_type, entry.object_id, entry.actor_name) == (
        "node",
        str(node_b.pk),
        "node node-b",
    )
    assert entry.detail["endpoint"] == "heartbeat"
    assert entry.detail["refused"] == 1
    assert entry.detail["pods"] == {
        str(pod_a.pk): ["report", "progress and checkpoints", "log lines"]
    }
    assert Job.objects.get(pk=job_b.pk).status == JobStatus.RUNNING


def test_a_running_report_for_another_nodes_pod_is_refused_and_fenced(client, two_nodes):
    (_, _, job_a, pod_a), (_, token_b, _, pod_b) = two_nodes
    reports = [
        {"pod_id": pod_a.pk, "attempt": 1, "state": "running", "checkpoints": [ckpt(job_a.pk, 3)]},
        {"pod_id": pod_b.pk, "attempt": 1, "state": "running"},
    ]
    reply = heartbeat(client, token_b, reports).json()
    assert reply["refused"] == {str(pod_a.pk): NOT_HERE}
    assert [s["pod_id"] for s in reply["stop"]] == [pod_a.pk]  # fenced: B must not run it
    assert not Checkpoint.objects.filter(job=job_a).exists()
    assert AuditEntry.objects.filter(action="node.foreign_items").count() == 1


def test_the_log_endpoint_refuses_and_audits_another_nodes_streams_once(client, two_nodes):
    (_, _, _, pod_a), (_, token_b, _, pod_b) = two_nodes
    many = [lines(pod_a, *(f"forged {i}" for i in range(50))), lines(pod_b, "mine")]
    response = post(client, "logs/", {"batches": many}, token_b)
    assert response.status_code == 200, response.content
    assert response.json()["rejected"] == {str(pod_a.pk): NOT_HERE}
    assert response.json()["acks"] == {str(pod_b.pk): 1}
    assert not LogChunk.objects.filter(pod=pod_a).exists()
    (entry,) = AuditEntry.objects.filter(action="node.foreign_items")
    assert entry.detail == {
        "endpoint": "logs",
        "refused": 1,
        "pods": {str(pod_a.pk): ["log lines"]},
    }


def test_own_pods_and_races_are_not_audited(client, two_nodes):
    (_, token_a, _, pod_a), _ = two_nodes
    stale = {"pod_id": pod_a.pk, "attempt": 2, "state": "exited", "exit_code": 0}
    unknown = {"pod_id": 999999, "attempt": 1, "state": "exited", "exit_code": 0}
    reply = heartbeat(client, token_a, [stale, unknown]).json()
    assert reply["refused"] == {
        str(pod_a.pk): "stale attempt 2; the pod is attempt 1",
        "999999": "unknown pod",
    }
    assert Pod.objects.get(pk=pod_a.pk).status == PodStatus.RUNNING
    assert not AuditEntry.objects.filter(action="node.foreign_items").exists()
