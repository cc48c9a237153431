"""The cycle's bulk writes (jobs.actions.scheduling) give the same rows as the ORM would, on
SQLite and PostgreSQL (where they travel as arrays through `unnest`)."""

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent, Pod
from jobs.scheduler.cycle import run_cycle
from policy.statuses import Actor, JobStatus, PodStatus
from tests.conftest import make_node

pytestmark = pytest.mark.django_db


def test_admitted_pods_hold_the_model_defaults_and_the_placement(submit, quota):
    make_node("node-0")
    make_node("node-1")
    job = submit(name="gang", gpus=8, workers=2, cpus_per_worker=6, memory_gb_per_worker=40)
    before = timezone.now()

    assert run_cycle().admitted == (job.id,)

    pods = list(Pod.objects.filter(job=job).order_by("rank"))
    assert [p.rank for p in pods] == [0, 1]
    assert sorted(p.node.name for p in pods) == ["node-0", "node-1"]
    for pod in pods:
        expected = Pod(
            job_id=job.id,
            attempt=1,
            rank=pod.rank,
            node_id=pod.node_id,
            gpu_indices=list(range(8)),
            gpu_uuids=[f"GPU-{pod.node.name}-{i}" for i in range(8)],
            gpus=8,
            cpus=6,
            memory_gb=40,
            charged_quota_id=quota.id,
            in_quota=True,
            status=PodStatus.STARTING,
        )
        for field in Pod._meta.concrete_fields:
            if field.name not in ("id", "created_at"):
                got, want = getattr(pod, field.attname), getattr(expected, field.attname)
                assert got == want, f"{field.name}: {got!r} != {want!r}"
        assert before <= pod.created_at <= timezone.now()


def test_status_changes_reasons_and_events_are_written(submit):
    make_node("node-0")
    first = submit(name="first", gpus=8)
    second = submit(name="second", gpus=8)
    third = submit(name="third", gpus=8)

    result = run_cycle()

    assert result.admitted == (first.id,)
    assert set(result.newly_queued) == {second.id, third.id}
    rows = {j.id: j for j in Job.objects.all()}
    assert rows[first.id].status == JobStatus.STARTING
    assert rows[first.id].queue_position is None
    assert (rows[second.id].status, rows[second.id].queue_position) == (JobStatus.INQUEUE, 1)
    assert (rows[third.id].status, rows[third.id].queue_position) == (JobStatus.INQUEUE, 2)
    assert rows[second.id].status_reason
    events = JobEvent.objects.filter(actor=Actor.SCHEDULER).order_by("job_id")
    assert [(e.job_id, e.from_status, e.to_status, e.attempt) for e in events] == [
        (first.id, JobStatus.PENDING, JobStatus.STARTING, 1),
        (second.id, JobStatus.PENDING, JobStatus.INQUEUE, 1),
        (third.id, JobStatus.PENDING, JobStatus.INQUEUE, 1),
    ]
    assert all(e.reason for e in events)
