"""No two live pods hold the same GPU of a node: a database rule (migration 0008), on
SQLite and PostgreSQL alike, whatever writes the pods."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from cluster.models import GpuDevice, Node
from jobs.actions.workers import apply_worker_state
from jobs.models import HeldGpu, Pod
from jobs.scheduler.cycle import run_cycle
from policy.statuses import JobStatus, PodStatus
from tests.conftest import make_node
from tests.scheduler.conftest import live_gpus

pytestmark = pytest.mark.django_db


def pod_on(job, node, indices, *, rank=0, attempt=1, status=PodStatus.STARTING) -> Pod:
    return Pod.objects.create(
        job=job,
        attempt=attempt,
        rank=rank,
        node=node,
        gpu_indices=list(indices),
        gpus=len(indices),
        charged_quota=job.quota,
        status=status,
    )


def held(node) -> list[tuple[int, int]]:
    return sorted(HeldGpu.objects.filter(node=node).values_list("gpu_index", "pod_id"))


def test_a_second_live_pod_on_a_held_gpu_is_refused(submit, node):
    first = pod_on(submit(name="a", gpus=2), node, [0, 1])
    other = submit(name="b", gpus=2)

    with pytest.raises(IntegrityError), transaction.atomic():
        pod_on(other, node, [1, 2])
    with pytest.raises(IntegrityError), transaction.atomic():
        # Unknown (node unreachable) still holds its GPUs.
        pod_on(other, node, [0], status=PodStatus.UNKNOWN)

    assert held(node) == [(0, first.id), (1, first.id)]
    assert Pod.objects.count() == 1
    # Other GPUs of the node, and the same index on another node, are free.
    pod_on(other, node, [2, 3])
    elsewhere = make_node("node-1")
    pod_on(submit(name="c"), elsewhere, [0])
    assert live_gpus(node) == [0, 1, 2, 3]


def test_one_statement_placing_two_pods_on_one_gpu_is_refused(submit, node):
    job = submit(name="gang", gpus=2, workers=2)
    pods = [
        Pod(job=job, attempt=1, rank=r, node=node, gpu_indices=[r, 2], charged_quota=job.quota)
        for r in (0, 1)
    ]
    with pytest.raises(IntegrityError), transaction.atomic():
        Pod.objects.bulk_create(pods)
    assert not HeldGpu.objects.exists()


def test_moving_a_live_pod_onto_a_held_gpu_is_refused(submit, node):
    pod_on(submit(name="a", gpus=1), node, [0])
    second = pod_on(submit(name="b", gpus=1), node, [1])

    with pytest.raises(IntegrityError), transaction.atomic():
        Pod.objects.filter(pk=second.pk).update(gpu_indices=[0])
    # A final pod coming back to life on a held GPU is refused too.
    Pod.objects.filter(pk=second.pk).update(status=PodStatus.FAILED)
    Pod.objects.filter(pk=second.pk).update(gpu_indices=[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        Pod.objects.filter(pk=second.pk).update(status=PodStatus.RUNNING)
    # Moving to a free GPU is fine, and releases the old one.
    Pod.objects.filter(pk=second.pk).update(gpu_indices=[3], status=PodStatus.RUNNING)
    assert [i for i, _ in held(node)] == [0, 3]


@pytest.mark.parametrize(
    "final", [PodStatus.SUCCEEDED, PodStatus.FAILED, PodStatus.PREEMPTED, PodStatus.LOST]
)
def test_a_final_pod_releases_its_gpus(submit, node, final):
    first = pod_on(submit(name="a", gpus=2), node, [0, 1])
    Pod.objects.filter(pk=first.pk).update(status=PodStatus.RUNNING, last_report_at=None)
    assert len(held(node)) == 2  # a report that changes nothing else keeps the hold

    Pod.objects.filter(pk=first.pk).update(status=final)

    assert held(node) == []
    pod_on(submit(name="b", gpus=2), node, [1, 0])
    assert len(held(node)) == 2


def test_deleting_a_job_releases_its_gpus(submit, node):
    job = submit(name="a", gpus=8)
    pod_on(job, node, range(8))
    job.delete()
    assert not HeldGpu.objects.exists()
    pod_on(submit(name="b", gpus=8), node, range(8))


def test_the_cycle_places_on_gpus_released_by_a_finished_worker(submit, node):
    """End to end: a worker's exit reported by the agent frees its GPUs for the next job."""
    first = submit(name="first", gpus=8)
    assert run_cycle().admitted == (first.id,)
    second = submit(name="second", gpus=8)
    assert run_cycle().admitted == ()
    assert len(held(node)) == 8

    pod = first.pods.get()
    apply_worker_state(pod, running=True)
    apply_worker_state(pod, running=False, exit_code=0)

    assert held(node) == []
    assert run_cycle().admitted == (second.id,)
    second.refresh_from_db()
    assert second.status == JobStatus.STARTING
    assert [i for i, _ in held(node)] == list(range(8))


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


@pytest.mark.django_db(transaction=True)  # a schema change: SQLite's needs no open transaction
def test_the_rule_holds_across_the_rename_of_the_node_tables(submit, node):
    """cluster 0006 renames `agents_node` and `agents_gpudevice` to the cluster app's names:
    the rows, the foreign keys pointing at them and the GPU-holding triggers on `jobs_pod`
    (SQLite keeps trigger bodies as text) all survive it, both ways."""
    first = submit(name="a", gpus=8)  # placed by the cycle its commit triggers
    executor = MigrationExecutor(connection)
    executor.migrate([("cluster", "0005_node_report_digest")])
    assert {"agents_node", "agents_gpudevice"} <= _tables()
    assert not {"cluster_node", "cluster_gpudevice"} & _tables()

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert {"cluster_node", "cluster_gpudevice"} <= _tables()
    assert not {"agents_node", "agents_gpudevice"} & _tables()
    assert (Node._meta.db_table, GpuDevice._meta.db_table) == ("cluster_node", "cluster_gpudevice")
    with connection.cursor() as cursor:
        relations = connection.introspection.get_relations(cursor, Pod._meta.db_table)
    assert relations["node_id"][:2] == ("id", "cluster_node")
    assert GpuDevice.objects.filter(node=node).count() == 8
    pod = first.pods.get()
    assert held(node) == [(i, pod.id) for i in range(8)]
    other = submit(name="b", gpus=1)  # waits: the node is full
    with pytest.raises(IntegrityError), transaction.atomic():
        pod_on(other, node, [3])
    apply_worker_state(pod, running=True)
    apply_worker_state(pod, running=False, exit_code=0)  # frees the node: b is placed
    assert [i for i, _ in held(node)] == [0]
