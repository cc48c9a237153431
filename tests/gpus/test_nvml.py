"""GPU discovery on the real GpuSource through the stand-in NVML (tests.gpus.fakenvml): units
and fields, every call failing on its own, MIG, a changed GPU order, and NVML that cannot
even count its devices."""

import dataclasses

import pytest

from agents.node.gpus import GpuMismatch, GpuSource, resolve
from protocol.agent import GpuReport, NodeFacts
from tests.gpus.fakenvml import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeMig,
    FakeNvml,
    World,
    world_of,
)


@pytest.fixture
def source(nvml):
    gpus = GpuSource(None, "n1")  # imports "pynvml": the stand-in
    yield gpus
    gpus.close()


def as_facts(devices) -> NodeFacts:
    """The protocol takes every sample as it is (the heartbeat never fails on a GPU)."""
    return NodeFacts(gpus=[GpuReport(**d.as_report()) for d in devices])


def test_devices_are_read_by_uuid_with_units(source, world, nvml):
    world.gpus[1].ecc_uncorrected = 3
    devices = source.sample()
    as_facts(devices)
    assert [d.uuid for d in devices] == [g.uuid for g in world.gpus]
    first = devices[0]
    assert (first.name, first.memory_total_mb, first.utilization, first.temperature) == (
        "NVIDIA H200",
        143771,
        0,
        40,
    )
    assert (first.power_watts, first.pci_bus_id, first.mig_enabled) == (
        98.8,
        "00000000:18:00.0",
        False,
    )
    assert (devices[1].healthy, devices[1].health_reason) == (
        False,
        "3 uncorrectable ECC errors since boot",
    )
    assert source.gpu_type == "H200"
    # Temperature through the versioned call; the deprecated one is not used.
    assert nvml.calls["nvmlDeviceGetTemperatureV"] >= 4
    assert nvml.calls["nvmlDeviceGetTemperature"] == 0


@pytest.mark.parametrize(
    ("call", "changed"),
    [
        ("nvmlDeviceGetUtilizationRates", {"utilization": None}),
        ("nvmlDeviceGetPowerUsage", {"power_watts": None}),
        ("nvmlDeviceGetTemperatureV", {"temperature": None}),
        ("nvmlDeviceGetPciInfo", {"pci_bus_id": ""}),
        ("nvmlDeviceGetName", {"name": ""}),
        ("nvmlDeviceGetTotalEccErrors", {}),
        ("nvmlDeviceGetMigMode", {}),
        (
            "nvmlDeviceGetMemoryInfo",
            {
                "memory_total_mb": 0,
                "healthy": False,
                "health_reason": "NVML cannot read device memory",
            },
        ),
        (
            "nvmlDeviceGetUUID",
            {"uuid": "", "healthy": False, "health_reason": "NVML cannot read the GPU's UUID"},
        ),
    ],
)
def test_a_failing_call_costs_one_field_of_one_gpu(source, world, call, changed):
    before = source.sample()
    world.fail(call, NVML_ERROR_UNKNOWN, uuid=world.gpus[2].uuid)
    after = source.sample()
    as_facts(after)
    assert after[2] == dataclasses.replace(before[2], **changed)
    assert after[:2] + after[3:] == before[:2] + before[3:]  # the other GPUs: untouched


def test_the_deprecated_temperature_call_is_the_fallback_only(world, nvml):
    world.fail("nvmlDeviceGetTemperatureV", NVML_ERROR_FUNCTION_NOT_FOUND)  # an older driver
    source = GpuSource(None, "n1")
    try:
        assert [d.temperature for d in source.sample()] == [40] * 4
        assert nvml.calls["nvmlDeviceGetTemperature"] > 0
        world.absent.append("nvmlDeviceGetTemperatureV")  # an older nvidia-ml-py
        world.heal("nvmlDeviceGetTemperatureV")
        assert [d.temperature for d in source.sample()] == [40] * 4
        world.absent.append("nvmlDeviceGetTemperature")  # a future one without it
        assert [d.temperature for d in source.sample()] == [None] * 4
    finally:
        source.close()


def test_a_gpu_nvml_cannot_open_is_reported_unhealthy_with_its_identity(source, world):
    before = source.sample()
    lost = world.gpus[1].uuid
    world.fail("nvmlDeviceGetHandleByIndex", NVML_ERROR_GPU_IS_LOST, uuid=lost)
    gone = source.sample()[1]
    assert (gone.uuid, gone.name, gone.memory_total_mb) == (lost, "NVIDIA H200", 143771)
    assert (gone.healthy, gone.health_reason, gone.utilization) == (
        False,
        "NVML error: GPU is lost",
        None,
    )
    world.heal("nvmlDeviceGetHandleByIndex", uuid=lost)
    assert source.sample() == before


def test_a_failing_device_count_degrades_the_gpus_not_the_heartbeat(source, world):
    before = source.sample()
    world.fail("nvmlDeviceGetCount", NVML_ERROR_UNKNOWN)
    during = source.sample()
    as_facts(during)
    assert [d.uuid for d in during] == [d.uuid for d in before]
    assert {(d.healthy, d.health_reason, d.utilization) for d in during} == {
        (False, "NVML cannot count devices: Unknown Error", None)
    }
    world.heal("nvmlDeviceGetCount")
    assert source.sample() == before


def test_the_agent_starts_when_nvml_cannot_count_at_start(world, nvml):
    world.fail("nvmlDeviceGetCount", NVML_ERROR_UNKNOWN)
    source = GpuSource(None, "n1")
    try:
        assert (source.sample(), source.gpu_type) == ([], "")
        world.heal("nvmlDeviceGetCount")
        assert len(source.sample()) == 4 and source.gpu_type == "H200"
        assert source.health is not None  # Xid watching starts once NVML names the GPUs
        assert sorted(source.health.watched) == sorted(g.uuid for g in world.gpus)
    finally:
        source.close()


def test_a_bug_while_reading_costs_one_sample(source, nvml, monkeypatch):
    before = source.sample()
    monkeypatch.setattr(nvml, "nvmlDeviceGetCount", lambda: 1 / 0)
    during = source.sample()
    assert [d.uuid for d in during] == [d.uuid for d in before]
    assert {d.health_reason for d in during} == {"NVML cannot count devices: division by zero"}
    monkeypatch.undo()
    assert source.sample() == before


def test_without_nvml_a_node_has_no_gpus_unless_faked():
    world = World(gpus=world_of(2).gpus, available=False)  # no driver: nvmlInit fails
    assert GpuSource(None, "n1", nvml=FakeNvml(world)).sample() == []
    faked = GpuSource("4xH100", "n1", nvml=FakeNvml(world))
    assert (faked.gpu_type, len(faked.sample())) == ("H100", 4)


def test_the_fake_flag_wins_over_real_gpus(nvml):
    source = GpuSource("2xH200", "n1")
    assert [d.uuid[:9] for d in source.sample()] == ["GPU-fake-"] * 2
    source.close()


def test_mig_is_reported_as_such_and_its_utilization_is_unknown(world, nvml):
    mig = world.gpus[3]
    mig.mig = "enabled"
    mig.mig_devices = [
        FakeMig("MIG-11111111-2222-3333-4444-555555555555", "NVIDIA H200 MIG 3g.71gb", 71680, 1024),
        FakeMig("MIG-66666666-7777-8888-9999-000000000000", "NVIDIA H200 MIG 3g.71gb", 71680, 0),
    ]
    world.gpus[2].mig = "disabled"  # capable, not split
    source = GpuSource(None, "n1")
    try:
        devices = source.sample()
        as_facts(devices)
    finally:
        source.close()
    split = devices[3]
    assert (split.mig_enabled, split.utilization, split.healthy) == (True, None, True)
    assert [
        (m.uuid[:12], m.name, m.memory_total_mb, m.memory_used_mb) for m in split.mig_instances
    ] == [
        ("MIG-11111111", "NVIDIA H200 MIG 3g.71gb", 71680, 1024),
        ("MIG-66666666", "NVIDIA H200 MIG 3g.71gb", 71680, 0),
    ]
    assert (split.memory_total_mb, split.memory_used_mb) == (143360, 1024)  # from its MIG devices
    assert (devices[2].mig_enabled, devices[2].utilization) == (False, 0)


def test_a_changed_gpu_order_is_seen_by_uuid(world, nvml):
    """After a reboot NVML may number the GPUs differently: the agent reports the new
    index of each UUID, and a worker placed by the old numbering is not launched on
    another GPU."""
    source = GpuSource(None, "n1")
    try:
        old = source.sample()
        placed = (old[1].uuid,)
        assert resolve((1,), placed, old) == placed
        world.order = [2, 3, 0, 1]
        new = source.sample()
        assert [d.uuid for d in new] == [world.gpus[i].uuid for i in (2, 3, 0, 1)]
        with pytest.raises(GpuMismatch, match=f"GPU {placed[0]} is now GPU 3, not GPU 1"):
            resolve((1,), placed, new)
        assert resolve((3,), placed, new) == placed
        assert resolve((1,), (), new) == (new[1].uuid,)  # an older console: by index
    finally:
        source.close()


def test_resolve_refuses_what_is_not_there():
    devices = GpuSource("2xH200", "n1").sample()
    with pytest.raises(GpuMismatch, match="GPU 5 does not exist on this node \\(2 GPUs\\)"):
        resolve((5,), (), devices)
    with pytest.raises(GpuMismatch, match="GPU-gone \\(placed as GPU 0\\) is not on this node"):
        resolve((0,), ("GPU-gone",), devices)
    unreadable = [dataclasses.replace(devices[0], uuid="")]
    with pytest.raises(GpuMismatch, match="GPU 0: NVML cannot read its UUID"):
        resolve((0,), (), unreadable)


def test_not_supported_is_not_a_failure(world, nvml):
    world.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED)
    source = GpuSource(None, "n1")
    try:
        assert {(d.power_watts, d.healthy) for d in source.sample()} == {(None, True)}
    finally:
        source.close()
