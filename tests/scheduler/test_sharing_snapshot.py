"""The scheduler's snapshot reads what the sharing rules need (docs/scheduling.md, the
decision table): each quota's options, and per pod whether it is in quota (fair share
counts a job's borrowed pods, not the job)."""

import pytest
from django.utils import timezone

from jobs.models import Job, Pod
from jobs.scheduler.snapshot import load_snapshot
from policy.statuses import JobStatus, PodStatus
from quotas import actions

pytestmark = pytest.mark.django_db


def test_the_options_are_read(quota):
    actions.update_quota(
        quota,
        preemption="LowerOrNewerEqualPriority",
        reclaim_within_tree="LowerPriority",
        borrow_within_tree_max_priority=2,
    )
    [snap] = [q for q in load_snapshot(timezone.now())[0].quotas if q.id == quota.pk]
    assert (snap.preemption, snap.reclaim_within_tree, snap.borrow_within_tree_max_priority) == (
        "LowerOrNewerEqualPriority",
        "LowerPriority",
        2,
    )


def test_a_partly_borrowing_job_counts_only_its_borrowed_pods(submit, node, quota, other_quota):
    job = submit(name="mixed", gpus=2, workers=2)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    for rank, (charged, in_quota, gpus) in enumerate(
        [(quota, True, [0, 1]), (other_quota, False, [2, 3])]
    ):
        Pod.objects.create(
            job=job, attempt=1, rank=rank, node=node, gpu_indices=gpus, gpus=2,
            charged_quota=charged, in_quota=in_quota, status=PodStatus.RUNNING,
        )  # fmt: skip
    [held] = [r for r in load_snapshot(timezone.now())[0].running if r.id == job.pk]
    assert held.pods_in_quota == (True, False)
    assert held.in_quota is False  # partly borrowing: a borrower (reclaimable)
    assert held.borrowed_gpus == 2
