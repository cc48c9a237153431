"""Fake GPUs (the embedded default) and the protocol's bounds. NVML itself is tested through
the stand-in NVML in tests/gpus."""

import pytest
from pydantic import ValidationError

from agents.node.gpus import GpuSpecError, fake_gpus, gpu_type_from_name, parse_fake_spec
from protocol import limits
from protocol.agent import (
    GpuReport,
    Heartbeat,
    HeartbeatReply,
    LogBatch,
    NodeFacts,
    WorkerReport,
)
from protocol.base import ResourceTypeName
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
    assert len(report.error) == limits.ERROR_TAIL and report.error.endswith("why\u2400")
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
