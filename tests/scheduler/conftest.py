"""DB helpers for the scheduler's cycle tests."""

import pytest

from jobs.actions.submit import JobSpec, create_job
from jobs.models import Job, Pod
from policy.statuses import ACTIVE_POD_STATUSES, PodStatus


@pytest.fixture
def submit(researcher, workspace, quota):
    """submit(gpus=4, workers=1, quota=…, **spec) -> Job (Pending; no cycle has run)."""

    def _submit(*, name: str = "train", target=None, **spec) -> Job:
        spec.setdefault("gpus_per_worker", spec.pop("gpus", 1))
        return create_job(
            user=researcher,
            workspace=workspace,
            quota=target or quota,
            spec=JobSpec(name=name, image="pytorch:2", command="python train.py", **spec),
        )

    return _submit


def finish_pods(job: Job, status: PodStatus = PodStatus.SUCCEEDED) -> None:
    """Workers exit (what an agent report does to the pods), without touching the job."""
    Pod.objects.filter(job=job, status__in=list(ACTIVE_POD_STATUSES)).update(status=status)


def live_gpus(node) -> list[int]:
    """Every GPU index held by a live worker on the node, with repeats if double-booked."""
    held: list[int] = []
    for indices in Pod.objects.filter(node=node, status__in=list(ACTIVE_POD_STATUSES)).values_list(
        "gpu_indices", flat=True
    ):
        held.extend(indices)
    return sorted(held)
