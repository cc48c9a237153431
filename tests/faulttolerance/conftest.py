"""Fixtures: placed jobs with fault tolerance, as the scheduler would leave them."""

import pytest

from jobs.models import Job, Pod
from policy.faulttolerance.policy import FtConfig
from policy.statuses import JobStatus, PodStatus
from tests.conftest import make_node


def make_ft_job(
    *,
    owner,
    workspace,
    quota,
    nodes,
    ft: FtConfig | None = None,
    status: JobStatus = JobStatus.RUNNING,
    pod_status: PodStatus = PodStatus.RUNNING,
    command: str = "python train.py",
    first_gpu: int = 0,
    **fields,
) -> tuple[Job, list[Pod]]:
    """A placed job, worker `rank` on `nodes[rank]` holding GPU `first_gpu + rank`."""
    ft = ft if ft is not None else FtConfig(enabled=True)
    job = Job.objects.create(
        workspace=workspace,
        quota=quota,
        owner=owner,
        name="train",
        image="pytorch:2.4",
        command=command,
        workers=len(nodes),
        gpus_per_worker=1,
        status=status,
        fault_tolerance=ft.enabled,
        ft_config=ft.to_dict(),
        **fields,
    )
    pods = [
        Pod.objects.create(
            job=job,
            attempt=job.attempt,
            rank=rank,
            node=node,
            gpu_indices=[first_gpu + rank],
            gpus=1,
            cpus=4,
            memory_gb=16,
            charged_quota=quota,
            status=pod_status,
        )
        for rank, node in enumerate(nodes)
    ]
    return job, pods


@pytest.fixture
def ft_job(researcher, workspace, quota):
    def build(nodes=None, **kwargs):
        nodes = nodes if nodes is not None else [make_node("n-a")]
        return make_ft_job(
            owner=researcher, workspace=workspace, quota=quota, nodes=nodes, **kwargs
        )

    return build
