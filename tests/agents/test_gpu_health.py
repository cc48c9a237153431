"""GPU health from NVML events, through a stand-in pynvml module (no NVML runs here): the
agent's code above NVML is the real one, and an unhealthy GPU reaches the console and leaves
the scheduler's free devices."""

import sys
import time

import pytest

from agents.actions import issue_bootstrap_token
from agents.node.agent import Agent, AgentConfig
from agents.node.gpuhealth import APPLICATION_XIDS, DOUBLE_BIT_ECC, XID_CRITICAL, judge_event
from agents.node.gpus import GpuInfo, GpuSource, worker_gpu_usage
from cluster.models import GpuDevice, Node
from jobs.models import Pod, WorkerGpuSample
from jobs.scheduler.cycle import load_snapshot
from tests.agents.test_gpus_protocol import FakeNvml, device


def wait_marks(source: GpuSource, count: int) -> dict[int, str]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        marks = source.health.snapshot()
        if len(marks) >= count:
            return marks
        time.sleep(0.01)
    pytest.fail(f"expected {count} unhealthy GPUs, got {source.health.snapshot()}")


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_application_xids_say_nothing_about_the_device(xid):
    assert judge_event(XID_CRITICAL, xid) is None


def test_critical_xids_and_double_bit_ecc_make_a_device_unhealthy():
    assert judge_event(XID_CRITICAL, 79) == "critical Xid 79"  # fallen off the bus
    assert judge_event(XID_CRITICAL, 48) == "critical Xid 48"  # double-bit ECC (Xid)
    assert judge_event(DOUBLE_BIT_ECC, 0) == "double-bit ECC error"
    assert judge_event(0x1, 0) is None  # single-bit ECC: corrected


@pytest.fixture
def nvml(monkeypatch):
    """A stand-in pynvml module: GpuSource imports it like the real one."""
    fake = FakeNvml([device(uuid=f"GPU-{i}") for i in range(3)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_events_mark_devices_unhealthy_and_application_xids_do_not(nvml):
    source = GpuSource(None, "n1")  # imports "pynvml": the stand-in
    try:
        assert sorted(nvml.registered) == [0, 1, 2]
        nvml.event_queue.put((0, XID_CRITICAL, 13))
        nvml.event_queue.put((1, XID_CRITICAL, 79))
        nvml.event_queue.put((2, DOUBLE_BIT_ECC, 0))
        assert wait_marks(source, 2) == {1: "critical Xid 79", 2: "double-bit ECC error"}
        health = [(g.index, g.healthy, g.health_reason) for g in source.sample()]
        assert health == [
            (0, True, ""),
            (1, False, "critical Xid 79"),
            (2, False, "double-bit ECC error"),
        ]
    finally:
        source.close()
    assert nvml.freed and nvml.shutdowns == 1


def test_an_event_naming_no_device_marks_every_device(nvml):
    source = GpuSource(None, "n1")
    try:
        nvml.event_queue.put((None, XID_CRITICAL, 79))
        assert wait_marks(source, 3) == {i: "critical Xid 79" for i in range(3)}
    finally:
        source.close()


@pytest.mark.django_db(transaction=True)
def test_an_unhealthy_gpu_reaches_the_console_and_the_scheduler_skips_it(
    nvml, live_server, tmp_path, job_factory
):
    _, bootstrap = issue_bootstrap_token(None, "health")
    config = AgentConfig(
        server=live_server.url,
        name="nvml-node",
        state_dir=tmp_path / "s",
        bootstrap_token=bootstrap,
    )
    agent = Agent(config, gpus=GpuSource(None, "nvml-node"))
    try:
        identity = agent.register_or_load()
        agent.client.token = identity["node_token"]
        agent._log_client = agent.client.copy()
        node = Node.objects.get(name="nvml-node")
        assert (node.gpus, node.gpu_type) == (3, "H200")
        nvml.event_queue.put((1, XID_CRITICAL, 79))
        wait_marks(agent.gpus, 1)
        assert agent.heartbeat() is not None
        device_1 = GpuDevice.objects.get(node=node, index=1)
        assert (device_1.healthy, device_1.health_reason) == (False, "critical Xid 79")
        snapshot, _ = load_snapshot()
        (snap,) = [n for n in snapshot.nodes if n.id == node.pk]
        assert snap.free_gpu_indices == (0, 2)

        # A worker on GPUs 0 and 2 gets its GPU use sampled into the console.
        _, (pod,) = job_factory([node], command="sleep 600", gpus=1)
        Pod.objects.filter(pk=pod.pk).update(gpu_indices=[0, 2], gpus=2)
        agent.converge(agent.heartbeat())
        agent.heartbeat()
        agent.heartbeat()  # within GPU_METRICS_EVERY: no second sample
        (sample,) = WorkerGpuSample.objects.filter(pod=pod)
        assert (sample.gpus, sample.utilization, sample.memory_used_mb) == (2, 87, 4096)
        agent.runtime.shutdown(0)
    finally:
        agent.gpus.close()
        agent.client.close()
        agent._log_client.close()
        agent.shipper.close_all()
        agent.store.unlock()


def test_a_workers_gpu_use_is_its_assigned_devices():
    devices = [
        GpuInfo(
            index=i,
            uuid="",
            name="",
            memory_total_mb=80000,
            memory_used_mb=1000 * i,
            utilization=10 * i,
        )
        for i in range(4)
    ]
    assert worker_gpu_usage((1, 3), devices) == {
        "gpus": 2,
        "utilization": 20,
        "memory_used_mb": 4000,
    }
    assert worker_gpu_usage((), devices) is None
    assert worker_gpu_usage((9,), devices) is None
