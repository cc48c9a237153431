"""GPU health from NVML events on the real HealthWatcher and GpuSource, through the stand-in
NVML: Xid marks by UUID, watching that recovers from a failing event wait (and marks the GPUs
while it cannot), and an operator clearing a mark in the admin, end to end through the
console and the agent's heartbeat."""

import threading
import time

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from agents.node import gpuhealth
from agents.node.gpuhealth import (
    APPLICATION_XIDS,
    DOUBLE_BIT_ECC,
    FAILURES_BEFORE_UNHEALTHY,
    XID_CRITICAL,
    HealthWatcher,
    Mark,
    judge_event,
    retry_delay,
)
from agents.node.gpus import GpuSource
from cluster.models import GpuDevice, Node
from jobs.scheduler.cycle import load_snapshot
from tests.conftest import make_user
from tests.gpus.fakenvml import NVML_ERROR_GPU_IS_LOST, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN

WAIT = 15.0


def wait_until(predicate, what: str):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(gpuhealth, "RETRY_BASE_SECONDS", 0.01)
    monkeypatch.setattr(gpuhealth, "RETRY_MAX_SECONDS", 0.05)


@pytest.fixture
def source(nvml):
    gpus = GpuSource(None, "n1")
    yield gpus
    gpus.close()


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_application_xids_say_nothing_about_the_device(xid):
    assert judge_event(XID_CRITICAL, xid) is None


def test_critical_xids_and_double_bit_ecc_make_a_device_unhealthy():
    assert judge_event(XID_CRITICAL, 79) == "critical Xid 79"  # fallen off the bus
    assert judge_event(XID_CRITICAL, 48) == "critical Xid 48"  # double-bit ECC (Xid)
    assert judge_event(DOUBLE_BIT_ECC, 0) == "double-bit ECC error"
    assert judge_event(0x1, 0) is None  # single-bit ECC: corrected


def health(source) -> list[tuple[bool, str, bool]]:
    return [(d.healthy, d.health_reason, d.health_mark > 0) for d in source.sample()]


def test_events_mark_gpus_by_uuid_and_application_xids_do_not(source, world, nvml):
    gpus = world.gpus
    assert sorted(nvml.registered) == sorted(g.uuid for g in gpus)
    nvml.emit(gpus[0].uuid, XID_CRITICAL, 13)
    nvml.emit(gpus[1].uuid, XID_CRITICAL, 79)
    nvml.emit(gpus[2].uuid, DOUBLE_BIT_ECC)
    wait_until(lambda: len(source.health.snapshot()) == 2, "two marks")
    assert health(source) == [
        (True, "", False),
        (False, "critical Xid 79", True),
        (False, "double-bit ECC error", True),
        (True, "", False),
    ]


def test_an_event_naming_no_device_marks_every_watched_gpu(source, world, nvml):
    world.gpus[3].supported_events = 0  # supports no watched event: not watched
    source.close()
    source.__init__(None, "n1")
    nvml.emit(None, XID_CRITICAL, 79)
    wait_until(lambda: len(source.health.snapshot()) == 3, "three marks")
    assert [h[0] for h in health(source)] == [False, False, False, True]


def test_a_clear_drops_the_mark_it_saw_never_a_newer_one(nvml, world):
    nvml.nvmlInit()
    now = [1000.0]
    watcher = HealthWatcher(nvml, [g.uuid for g in world.gpus], clock=lambda: now[0])
    uuid = world.gpus[0].uuid
    first = _event(watcher, uuid, 79)
    assert first == Mark("critical Xid 79", 1_000_000)
    second = _event(watcher, uuid, 48)  # the same millisecond: still a newer id
    assert second == Mark("critical Xid 48", 1_000_001)
    assert not watcher.clear(uuid, first.mark_id)  # the operator saw the first one only
    assert watcher.snapshot()[uuid] == second
    assert watcher.clear(uuid, second.mark_id)
    assert watcher.snapshot() == {}
    assert not watcher.clear(uuid, second.mark_id)  # repeated: nothing left to clear


def _event(watcher, uuid, xid):
    from tests.gpus.fakenvml import _Handle

    gpu = next(g for g in watcher._nvml.world.gpus if g.uuid == uuid)
    watcher.handle(
        type("E", (), {"device": _Handle(gpu), "eventType": XID_CRITICAL, "eventData": xid})
    )
    return watcher.snapshot()[uuid]


@given(
    st.lists(
        st.tuples(st.sampled_from(["event", "clear"]), st.integers(0, 2), st.integers(0, 3)),
        max_size=40,
    )
)
def test_marks_and_clears_in_any_order(steps):
    """A mark disappears exactly when a clear names its id or a newer one."""
    from tests.gpus.fakenvml import FakeNvml, world_of

    nvml = FakeNvml(world_of(3))
    nvml.nvmlInit()
    uuids = [g.uuid for g in nvml.world.gpus]
    clock = [0.0]
    watcher = HealthWatcher(nvml, uuids, clock=lambda: clock[0])
    model: dict[str, int] = {}
    seen: dict[str, list[int]] = {u: [0] for u in uuids}
    for action, gpu, back in steps:
        uuid = uuids[gpu]
        if action == "event":
            mark = _event(watcher, uuid, 79)
            assert mark.mark_id > max(seen[uuid])  # ids only grow
            seen[uuid].append(mark.mark_id)
            model[uuid] = mark.mark_id
        else:
            cleared = seen[uuid][-1 - min(back, len(seen[uuid]) - 1)]
            dropped = watcher.clear(uuid, cleared)
            assert dropped == (uuid in model and model[uuid] <= cleared)
            if dropped:
                del model[uuid]
        assert {u: m.mark_id for u, m in watcher.snapshot().items()} == model


@given(st.integers(1, 10_000), st.floats(0.001, 10), st.floats(1, 600))
def test_retries_wait_longer_each_time_up_to_a_cap_and_never_zero(failures, base, cap):
    delay = retry_delay(failures, base, cap)
    assert 0 < delay <= max(cap, base)
    assert retry_delay(failures + 1, base, cap) >= delay
    assert retry_delay(0, base, cap) == 0


def test_a_failing_event_wait_is_retried_with_growing_delays(nvml, world, fast_retries):
    nvml.nvmlInit()
    world.fail("nvmlEventSetWait", NVML_ERROR_UNKNOWN, times=5)
    watcher = HealthWatcher(nvml, [g.uuid for g in world.gpus])
    delays = []
    watcher._sleep = lambda seconds: delays.append(seconds) or watcher._stop.wait(0)
    watcher.start()
    try:
        wait_until(lambda: len(delays) >= 5 and watcher.failures == 0, "the watcher to recover")
        assert delays[:5] == [retry_delay(n, 0.01, 0.05) for n in range(1, 6)]
        assert nvml.calls["nvmlEventSetCreate"] == 6  # the set is created again each time
        assert nvml.freed >= 5
        nvml.emit(world.gpus[2].uuid, XID_CRITICAL, 79)  # and it watches again
        wait_until(lambda: world.gpus[2].uuid in watcher.snapshot(), "the mark")
    finally:
        watcher.close()


def test_while_watching_fails_the_gpus_are_unhealthy_and_it_heals_by_itself(
    source, world, nvml, fast_retries
):
    world.fail("nvmlEventSetWait", NVML_ERROR_GPU_IS_LOST)
    wait_until(lambda: source.health.problem, "watching to be declared failing")
    assert source.health.failures >= FAILURES_BEFORE_UNHEALTHY
    reasons = {d.health_reason for d in source.sample()}
    assert reasons == {"GPU health unknown: NVML event watching fails (GPU is lost)"}
    assert {d.health_mark for d in source.sample()} == {0}  # not an operator's to clear
    world.heal("nvmlEventSetWait")
    wait_until(lambda: all(d.healthy for d in source.sample()), "the GPUs to be healthy again")
    nvml.emit(world.gpus[0].uuid, XID_CRITICAL, 79)
    wait_until(lambda: not source.sample()[0].healthy, "events to be watched again")


def test_events_not_supported_at_all_means_not_watched_not_unhealthy(world, nvml):
    world.fail("nvmlEventSetCreate", NVML_ERROR_NOT_SUPPORTED)
    source = GpuSource(None, "n1")
    try:
        assert source.health.unsupported
        assert all(d.healthy for d in source.sample())
    finally:
        source.close()


def test_an_event_set_that_cannot_be_created_at_start_is_retried(world, nvml, fast_retries):
    world.fail("nvmlEventSetCreate", NVML_ERROR_UNKNOWN, times=2)
    source = GpuSource(None, "n1")
    try:
        wait_until(lambda: source.health.watched and source.health.failures == 0, "watching")
        nvml.emit(world.gpus[1].uuid, XID_CRITICAL, 79)
        wait_until(lambda: not source.sample()[1].healthy, "the mark")
    finally:
        source.close()


# --- end to end: the console sees a mark, an operator clears it ---------------------------


def free_gpus(node) -> tuple[int, ...]:
    snapshot, _ = load_snapshot()
    return next(n for n in snapshot.nodes if n.id == node.pk).free_gpu_indices


def admin_clear(client: Client, devices) -> str:
    response = client.post(
        reverse("admin:cluster_gpudevice_changelist"),
        {"action": "clear_health_marks", "_selected_action": [d.pk for d in devices]},
        follow=True,
    )
    assert response.status_code == 200
    return response.text


@pytest.mark.django_db(transaction=True)
def test_an_operator_clears_a_health_mark_in_the_admin(live_agent, world, nvml):
    agent = live_agent
    node = Node.objects.get(name="nvml-node")
    assert (node.gpus, node.gpu_type, free_gpus(node)) == (4, "H200", (0, 1, 2, 3))
    uuid = world.gpus[1].uuid
    nvml.emit(uuid, XID_CRITICAL, 79)
    wait_until(lambda: agent.gpus.health.snapshot(), "the mark")
    reply = agent.heartbeat()
    device = GpuDevice.objects.get(node=node, index=1)
    assert (device.uuid, device.healthy, device.health_reason) == (uuid, False, "critical Xid 79")
    assert device.health_mark > 0 and reply.clear_health_marks == []
    assert free_gpus(node) == (0, 2, 3)

    admin = Client()
    admin.force_login(make_user("root", is_staff=True, is_superuser=True))
    assert "Cleared 1 GPU health mark(s)" in admin_clear(admin, [device])
    agent.step()  # the reply asks the agent to drop the mark it saw
    assert agent.gpus.health.snapshot() == {}
    agent.heartbeat()
    device.refresh_from_db()
    assert (device.healthy, device.health_reason, device.health_mark) == (True, "", 0)
    assert free_gpus(node) == (0, 1, 2, 3)
    assert agent.heartbeat().clear_health_marks == []


@pytest.mark.django_db(transaction=True)
def test_a_newer_event_survives_an_older_clear(live_agent, world, nvml):
    agent = live_agent
    node = Node.objects.get(name="nvml-node")
    uuid = world.gpus[2].uuid
    nvml.emit(uuid, XID_CRITICAL, 79)
    wait_until(lambda: agent.gpus.health.snapshot(), "the first mark")
    agent.heartbeat()
    seen = GpuDevice.objects.get(node=node, index=2)
    admin = Client()
    admin.force_login(make_user("root", is_staff=True, is_superuser=True))
    # The operator clears what was reported; the GPU fails again before the next heartbeat.

    nvml.emit(uuid, XID_CRITICAL, 48)
    wait_until(lambda: agent.gpus.health.snapshot()[uuid].reason.endswith("48"), "the new mark")
    admin_clear(admin, [seen])
    agent.step()
    device = GpuDevice.objects.get(pk=seen.pk)
    assert (device.healthy, device.health_reason) == (False, "critical Xid 48")
    assert device.health_mark > seen.health_mark
    agent.step()
    assert GpuDevice.objects.get(pk=seen.pk).health_reason == "critical Xid 48"
    assert 2 not in free_gpus(node)


@pytest.mark.django_db(transaction=True)
def test_marks_the_agent_reads_each_sample_are_not_cleared(live_agent, world, nvml):
    world.gpus[0].ecc_uncorrected = 2
    agent = live_agent
    agent.heartbeat()
    node = Node.objects.get(name="nvml-node")
    admin = Client()
    admin.force_login(make_user("root", is_staff=True, is_superuser=True))
    text = admin_clear(admin, GpuDevice.objects.filter(node=node))
    assert "Cleared 0 GPU health mark(s)" in text and "uncorrectable ECC" in text
    agent.step()
    assert not GpuDevice.objects.get(node=node, index=0).healthy


def test_a_lock_is_never_held_while_waiting_for_nvml(nvml, world):
    """snapshot() answers at once while the watcher thread waits in nvmlEventSetWait."""
    nvml.nvmlInit()
    watcher = HealthWatcher(nvml, [g.uuid for g in world.gpus]).start()
    try:
        done = threading.Event()
        threading.Thread(target=lambda: (watcher.snapshot(), done.set()), daemon=True).start()
        assert done.wait(WAIT)
    finally:
        watcher.close()
