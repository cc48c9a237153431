"""GPU discovery (fake devices; NVML's mapping through a stand-in, as no NVML runs here) and
the protocol's bounds."""

import queue
import types
from collections import namedtuple
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from agents.node.gpus import GpuSource, GpuSpecError, fake_gpus, gpu_type_from_name, parse_fake_spec
from protocol.agent import (
    MAX_ERROR_TAIL,
    GpuReport,
    Heartbeat,
    HeartbeatReply,
    LogBatch,
    NodeFacts,
    ResourceTypeName,
    WorkerReport,
)
from quotas.models import ResourceType


def test_fake_spec():
    assert parse_fake_spec("8xH200") == (8, "H200")
    assert parse_fake_spec(" 2xA100-80GB ") == (2, "A100-80GB")
    for bad in ["8", "xH200", "0xH200", "65xH200", "8xH 200", "8*H200", ""]:
        with pytest.raises(GpuSpecError):
            parse_fake_spec(bad)


def test_fake_gpus_are_stable_per_node_and_distinct_across_nodes():
    a = fake_gpus("8xH200", "node-a")
    assert [g.index for g in a] == list(range(8))
    assert a[0].memory_total_mb == 143771 and a[0].healthy
    assert a == fake_gpus("8xH200", "node-a")
    assert {g.uuid for g in a}.isdisjoint(g.uuid for g in fake_gpus("8xH200", "node-b"))
    # They fit the protocol as they are.
    NodeFacts(gpus=[GpuReport(**g.as_report()) for g in a])


@pytest.mark.parametrize(
    ("name", "gpu_type"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA H200 (fake)", "H200"),
        ("", ""),
    ],
)
def test_gpu_type_from_the_nvml_name(name, gpu_type):
    assert gpu_type_from_name(name) == gpu_type


class FakeNvml(types.SimpleNamespace):
    """The few pynvml calls the agent makes; NVML itself is not installed on this machine."""

    class NVMLError(Exception):
        pass

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_TEMPERATURE_GPU = 0
    Memory = namedtuple("Memory", "total free used")
    Util = namedtuple("Util", "gpu memory")

    def __init__(self, devices, *, available=True):
        super().__init__(devices=devices, available=available, shutdowns=0)

    def nvmlInit(self):
        if not self.available:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.devices[i] is None:
            raise self.NVMLError("GPU is lost")
        return self.devices[i]

    def _get(self, handle, key):
        value = handle[key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._get(h, "memory")

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._get(h, "util")

    def nvmlDeviceGetTemperature(self, h, _sensor):
        return self._get(h, "temp")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetTotalEccErrors(self, h, _kind, _counter):
        return self._get(h, "ecc")

    # NVML events: a queue per event set; a test puts (device index, type, data) in it.
    def nvmlEventSetCreate(self):
        self.event_queue = queue.Queue()
        self.registered = {}
        return self.event_queue

    def nvmlDeviceGetSupportedEventTypes(self, h):
        return h.get("events", 0xF)

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self.registered[self.devices.index(h)] = types

    def nvmlEventSetWait(self, event_set, timeout_ms):
        try:
            index, kind, data = event_set.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            error = self.NVMLError("Timeout")
            error.value = 10
            raise error from None
        handle = self.devices[index] if index is not None else None
        return SimpleNamespace(device=handle, eventType=kind, eventData=data)

    def nvmlDeviceGetIndex(self, h):
        if h is None:
            raise self.NVMLError("Invalid Argument")
        return self.devices.index(h)

    def nvmlEventSetFree(self, event_set):
        self.freed = True


def device(**overrides):
    mib = 1024 * 1024
    return {
        "uuid": "GPU-1234",
        "name": b"NVIDIA H200",
        "memory": FakeNvml.Memory(143771 * mib, 0, 2048 * mib),
        "util": FakeNvml.Util(87, 40),
        "temp": 61,
        "power_mw": 412345,
        "ecc": 0,
        **overrides,
    }


def test_nvml_devices_are_read_with_units_and_health():
    not_supported = FakeNvml.NVMLError("Not Supported")
    nvml = FakeNvml(
        [
            device(),
            device(uuid="GPU-2", ecc=3),
            device(uuid="GPU-3", power_mw=not_supported, ecc=not_supported),
            None,
        ]
    )
    source = GpuSource(None, "n1", nvml=nvml)
    assert source.gpu_type == "H200" and not source.fake
    first, ecc, partial, lost = source.sample()
    assert (first.name, first.memory_total_mb, first.memory_used_mb) == (
        "NVIDIA H200",
        143771,
        2048,
    )
    assert (first.utilization, first.temperature, first.power_watts) == (87, 61, 412.3)
    assert first.healthy
    assert (ecc.healthy, ecc.ecc_errors, ecc.health_reason) == (
        False,
        3,
        "3 uncorrectable ECC errors since boot",
    )
    assert (partial.power_watts, partial.ecc_errors, partial.healthy) == (None, 0, True)
    assert (lost.index, lost.healthy, lost.health_reason) == (3, False, "NVML error: GPU is lost")
    source.close()
    assert nvml.shutdowns == 1


def test_without_nvml_a_node_has_no_gpus_unless_faked():
    assert GpuSource(None, "n1", nvml=FakeNvml([], available=False)).sample() == []
    faked = GpuSource("4xH100", "n1", nvml=FakeNvml([], available=False))
    assert (faked.gpu_type, len(faked.sample())) == ("H100", 4)


def test_fake_flag_wins_over_real_gpus():
    source = GpuSource("2xH200", "n1", nvml=FakeNvml([device()] * 8))
    assert len(source.sample()) == 2 and source.sample()[0].uuid.startswith("GPU-fake-")


# --- protocol ---


def test_resource_types_mirror_the_model():
    assert set(ResourceTypeName.__args__) == set(ResourceType.values)


def test_agent_input_is_strict():
    with pytest.raises(ValidationError):
        Heartbeat.model_validate({"facts": {}, "workers": [], "surprise": 1})
    with pytest.raises(ValidationError):
        Heartbeat.model_validate(
            {
                "facts": {},
                "workers": [
                    {"pod_id": 1, "attempt": 1, "state": "running"},
                    {"pod_id": 1, "attempt": 1, "state": "exited"},
                ],
            }
        )
    # Text is repaired, never refused: cut to its limit (the end of an error tail is kept).
    report = WorkerReport(pod_id=1, attempt=1, state="exited", error="x" * 9000 + "why\x00")
    assert len(report.error) == MAX_ERROR_TAIL and report.error.endswith("why\u2400")
    with pytest.raises(ValidationError):
        NodeFacts(gpus=[GpuReport(index=i) for i in range(65)])
    many = [
        {"pod_id": i + 1, "attempt": 1, "first_seq": 0, "lines": ["x"] * 1000} for i in range(11)
    ]
    with pytest.raises(ValidationError, match="at most 10000 lines"):
        LogBatch.model_validate({"batches": many})


def test_console_replies_tolerate_new_fields():
    reply = HeartbeatReply.model_validate_json(
        '{"heartbeat_interval": 5, "run": [], "stop": [], "added_in_a_later_version": true}'
    )
    assert reply.heartbeat_interval == 5.0


# --- command line ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--name", "n1", "--state-dir", "{tmp}"], "--server (or GPU_AGENT_SERVER) is required"),
        (["--server", "ftp://x", "--state-dir", "{tmp}"], "must be an http(s) URL"),
        (["--server", "http://x", "--name", "bad name", "--state-dir", "{tmp}"], "--name must"),
        (
            ["--server", "http://x", "--name", "n1", "--fake-gpus", "lots", "--state-dir", "{tmp}"],
            "--fake-gpus: expected COUNTxTYPE",
        ),
        (
            [
                *("--server", "http://x", "--name", "n1", "--runtime", "docker"),
                *("--state-dir", "{tmp}", "--docker-url", "unix:///nonexistent/docker.sock"),
            ],
            "cannot reach the Docker engine",
        ),
    ],
)
def test_bad_command_lines_exit_2_with_a_clear_message(
    argv, message, tmp_path, caplog, monkeypatch
):
    from agents.node.__main__ import main

    monkeypatch.delenv("GPU_AGENT_SERVER", raising=False)
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert message in caplog.text
