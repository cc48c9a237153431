"""The console's side of GPUs by UUID, and the whole path through a real agent on the
stand-in NVML: the scheduler records each pod's GPU UUIDs, the agent launches by UUID and
refuses a launch whose GPU moved, the job's env never chooses devices, MIG GPUs are not
placed and their utilization stays unknown."""

import importlib
import threading
import time

import pytest
from django.apps import apps

from agents.heartbeat.actions import worker_spec
from agents.node.gpus import GpuInfo, worker_gpu_usage
from cluster.models import GpuDevice, Node
from jobs.actions.submit import JobSpec, create_job
from jobs.models import LogChunk, Pod, WorkerGpuSample
from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.admission.env import EnvProblems, parse_env
from policy.faulttolerance import hang
from policy.statuses import PodStatus
from tests.agents.conftest import make_job
from tests.conftest import make_node

WAIT = 20.0


def wait_until(predicate, what: str):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def submit(researcher, workspace, quota, gpus: int, command: str = "true"):
    return create_job(
        user=researcher,
        workspace=workspace,
        quota=quota,
        spec=JobSpec(name="t", image="img", command=command, gpus_per_worker=gpus),
    )


# --- the console ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_scheduler_records_each_pods_gpus_by_uuid(researcher, workspace, quota):
    node = make_node(gpus=8)
    job = submit(researcher, workspace, quota, gpus=3)
    run_cycle()
    (pod,) = Pod.objects.filter(job=job)
    assert len(pod.gpu_indices) == 3
    assert pod.gpu_uuids == [f"GPU-{node.name}-{i}" for i in pod.gpu_indices]
    spec = worker_spec(pod)
    assert (spec.gpu_indices, spec.gpu_uuids) == (pod.gpu_indices, pod.gpu_uuids)


@pytest.mark.django_db
def test_a_pod_without_uuids_is_sent_by_index_for_the_agent_to_map(researcher, workspace, quota):
    node = make_node()
    _, (pod,) = make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])
    assert worker_spec(pod).gpu_uuids == []


@pytest.mark.django_db
def test_gpus_in_mig_mode_are_not_placed(researcher, workspace, quota):
    node = make_node(gpus=4)
    GpuDevice.objects.filter(node=node, index__in=[0, 1]).update(mig_enabled=True)
    (snap,) = [n for n in load_snapshot()[0].nodes if n.id == node.pk]
    assert snap.free_gpu_indices == (2, 3)
    job = submit(researcher, workspace, quota, gpus=2)
    run_cycle()
    assert Pod.objects.get(job=job).gpu_indices == [2, 3]


@pytest.mark.django_db
def test_live_pods_placed_before_uuids_get_them_from_their_node(researcher, workspace, quota):
    node = make_node(gpus=4)
    _, (live,) = make_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node], gpus=2)
    _, (done,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        gpus=1,
        pod_status=PodStatus.SUCCEEDED,
    )
    migration = importlib.import_module("jobs.migrations.0005_pod_gpu_uuids")
    migration.record_uuids_of_live_pods(apps, None)
    live.refresh_from_db()
    done.refresh_from_db()
    assert live.gpu_uuids == [f"GPU-{node.name}-0", f"GPU-{node.name}-1"]
    assert done.gpu_uuids == []


@pytest.mark.parametrize(
    "line", ["CUDA_VISIBLE_DEVICES=0,1", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_DEVICE_ORDER=x"]
)
def test_a_job_cannot_choose_its_devices(line):
    with pytest.raises(EnvProblems) as caught:
        parse_env(f"LR=0.1\n{line}")
    name = line.split("=")[0]
    assert caught.value.messages == [
        f"{name} cannot be set: each worker sees exactly the GPUs it was given "
        "(the agent sets the device variables)"
    ]
    assert parse_env("cuda_visible_devices=1") == {"cuda_visible_devices": "1"}  # not CUDA's


def test_unknown_utilization_is_neither_idle_nor_busy():
    from datetime import UTC, datetime

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    late = datetime(2026, 1, 1, 1, tzinfo=UTC)
    state = hang.HangInput(600, t0, t0, None, gpu_utilization=[], gpu_utilization_unknown=2)
    assert hang.hang_reason(state, late).endswith("; utilization of 2 GPUs unknown")
    mixed = hang.HangInput(600, t0, t0, None, gpu_utilization=[0], gpu_utilization_unknown=1)
    assert "its 1 GPU is idle" in hang.hang_reason(mixed, late)


def test_a_workers_gpu_use_is_its_assigned_devices():
    devices = [
        GpuInfo(
            index=i,
            uuid=f"GPU-{i}",
            name="",
            memory_total_mb=80000,
            memory_used_mb=1000 * i,
            utilization=None if i == 2 else 10 * i,
        )
        for i in range(4)
    ]
    assert worker_gpu_usage(("GPU-1", "GPU-3"), devices) == {
        "gpus": 2,
        "utilization": 20,
        "memory_used_mb": 4000,
    }
    assert worker_gpu_usage(("GPU-2",), devices)["utilization"] is None  # unknown, not 0
    assert worker_gpu_usage((1, 3), devices)["gpus"] == 2  # workers launched before UUIDs
    assert worker_gpu_usage((), devices) is None
    assert worker_gpu_usage(("GPU-9",), devices) is None


# --- through a real agent ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_on_exactly_the_gpu_the_console_placed(
    live_agent, world, researcher, workspace, quota
):
    """Placed by the scheduler, launched by UUID with PCI bus order, whatever the job's env
    says; the agent notes what it ignored."""
    agent = live_agent
    blocker = submit(researcher, workspace, quota, gpus=2)
    command = 'echo "seen=$CUDA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER|$NVIDIA_VISIBLE_DEVICES"'
    job = submit(researcher, workspace, quota, gpus=1, command=command)
    # An old job's stored env (from before submissions refused these) changes nothing.
    type(job).objects.filter(pk=job.pk).update(
        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3", "NVIDIA_VISIBLE_DEVICES": "all"}
    )
    run_cycle()
    assert Pod.objects.get(job=blocker).gpu_indices == [0, 1]
    pod = Pod.objects.get(job=job)
    assert (pod.gpu_indices, pod.gpu_uuids) == ([2], [world.gpus[2].uuid])

    shipping = threading.Thread(target=agent.shipper.run, args=(agent._ship_stop,), daemon=True)
    shipping.start()
    try:
        agent.step()
        wait_until(lambda: agent.runtime.wait(pod.pk, 0.1) and agent.step() is None, "the exit")
        wait_until(lambda: Pod.objects.get(pk=pod.pk).status == PodStatus.SUCCEEDED, "success")
        text = wait_until(lambda: _log_text(pod) if "seen=" in _log_text(pod) else "", "logs")
    finally:
        agent._ship_stop.set()
        shipping.join(10)
    uuid = world.gpus[2].uuid
    assert f"seen={uuid}|PCI_BUS_ID|{uuid}" in text
    assert (
        "[agent] ignored CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES from the job's "
        "environment: the agent sets which GPUs a worker sees" in text
    )


def _log_text(pod) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(pod=pod).order_by("seq_start"))


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_gpu_moved_is_not_launched_on_another(
    live_agent, world, researcher, workspace, quota
):
    """Placed on GPU 1; before the agent launches it the node comes back with its GPUs
    numbered differently: the pod fails with the reason instead of running on whatever GPU
    is now number 1."""
    agent = live_agent
    submit(researcher, workspace, quota, gpus=1)  # takes GPU 0
    job = submit(researcher, workspace, quota, gpus=1, command="sleep 600")
    run_cycle()
    pod = Pod.objects.get(job=job)
    assert pod.gpu_indices == [1]
    placed = pod.gpu_uuids[0]
    world.order = [3, 2, 1, 0]  # "reboot": NVML enumerates the GPUs in another order
    agent.step()  # samples the new order, refuses the launch
    agent.step()  # reports it
    pod.refresh_from_db()
    assert pod.status == PodStatus.FAILED
    assert f"GPU {placed} is now GPU 2, not GPU 1 (the GPU order changed" in pod.error_message
    assert agent.runtime.workers() == []
    device = GpuDevice.objects.get(node__name="nvml-node", index=2)
    assert device.uuid == placed  # the console's inventory follows the new numbering


@pytest.mark.django_db(transaction=True)
def test_gpu_use_is_sampled_by_uuid_and_mig_stays_unknown(
    live_agent, world, researcher, workspace, quota
):
    agent = live_agent
    world.gpus[1].utilization, world.gpus[1].memory_used_mb = 87, 2048
    world.gpus[3].mig = "enabled"  # unknown utilization; memory from its (no) MIG devices
    node = Node.objects.get(name="nvml-node")
    _, (pod,) = make_job(
        owner=researcher, workspace=workspace, quota=quota, nodes=[node], command="sleep 600"
    )
    uuids = [world.gpus[1].uuid, world.gpus[3].uuid]
    Pod.objects.filter(pk=pod.pk).update(gpu_indices=[1, 3], gpu_uuids=uuids, gpus=2)
    agent.step()  # launches
    agent.heartbeat()  # reports it running with its first sample
    agent.heartbeat()  # within GPU_METRICS_EVERY: no second sample
    (sample,) = WorkerGpuSample.objects.filter(pod=pod)
    assert (sample.gpus, sample.utilization, sample.memory_used_mb) == (2, 87, 2048)
    mig = GpuDevice.objects.get(node=node, index=3)
    assert (mig.mig_enabled, mig.utilization, mig.healthy) == (True, None, True)
