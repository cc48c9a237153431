"""The container configuration's GPU part (pure): both request styles are accepted exactly
as built, anything else is refused; and how `--docker-gpus auto` picks a style."""

import dataclasses
import json

import pytest

from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.container_config import (
    DockerOptions,
    UnsafeConfig,
    check_config,
    container_config,
)
from agents.node.runtimes.gpu_attach import choose_gpu_attach
from tests.gpus.fakenvml import fake_uuid

A, B = fake_uuid("a"), fake_uuid("b")


def spec(count: int = 2, **extra) -> LaunchSpec:
    return LaunchSpec(
        pod_id=1,
        job_id=1,
        attempt=1,
        rank=0,
        world_size=1,
        image="img",
        command="true",
        gpu_indices=(2, 5)[:count],
        gpu_uuids=(A, B)[:count],
        **extra,
    )


@pytest.mark.parametrize("style", ["nvidia", "cdi", "off"])
@pytest.mark.parametrize("count", [0, 1, 2])
def test_what_the_agent_builds_passes_its_own_check(style, count):
    config = container_config(spec(count), DockerOptions(node="n", gpus=style), None)
    check_config(config, None)
    attached = count and style != "off"
    assert bool(config.get("device_requests")) == bool(attached)


def test_gpus_without_uuids_are_never_attached_by_index():
    by_index = dataclasses.replace(spec(2), gpu_uuids=())
    with pytest.raises(UnsafeConfig, match="by UUID"):
        container_config(by_index, DockerOptions(node="n"), None)


def nvidia_request(**overrides) -> dict:
    return {
        "Driver": "nvidia",
        "Count": 0,
        "DeviceIDs": [A, B],
        "Capabilities": [["gpu", "compute", "utility"]],
        "Options": {},
        **overrides,
    }


def cdi_request(**overrides) -> dict:
    return {
        "Driver": "cdi",
        "Count": 0,
        "DeviceIDs": [f"nvidia.com/gpu={A}", "nvidia.com/gpu=5"],
        "Capabilities": [],
        "Options": {},
        **overrides,
    }


@pytest.mark.parametrize(
    ("requests", "visible", "message"),
    [
        ([], "all", "must have NVIDIA_VISIBLE_DEVICES=void"),
        ([], None, "must have NVIDIA_VISIBLE_DEVICES=void"),
        ([nvidia_request(Count=-1, DeviceIDs=[])], "all", "explicit device IDs only"),
        ([nvidia_request(Count=2, DeviceIDs=[])], "0,1", "explicit device IDs only"),
        ([nvidia_request(Options={"x": "y"})], f"{A},{B}", "no options"),
        ([nvidia_request(DeviceIDs=["0", "1"])], "0,1", "by UUID"),
        ([nvidia_request(DeviceIDs=[A, A])], f"{A},{A}", "requested twice"),
        ([nvidia_request(Capabilities=[["gpu"], ["compute"]])], f"{A},{B}", "ask for"),
        ([nvidia_request()], "all", "exactly the requested GPUs"),
        ([nvidia_request()], "void", "exactly the requested GPUs"),
        ([nvidia_request(DeviceIDs=[A])], f"{A},{B}", "exactly the requested GPUs"),
        ([cdi_request()], f"{A}", "must be void"),
        ([cdi_request(DeviceIDs=["intel.com/gpu=0"])], "void", "nvidia.com/gpu devices only"),
        ([cdi_request(DeviceIDs=["nvidia.com/gpu=all"])], "void", "nvidia.com/gpu devices only"),
        ([cdi_request(Capabilities=[["gpu"]])], "void", "no capabilities"),
        ([cdi_request(Count=-1, DeviceIDs=[])], "void", "explicit device IDs only"),
        ([dict(nvidia_request(), Driver="amd")], f"{A},{B}", "'amd' is not allowed"),
        ([dict(nvidia_request(), Driver="")], f"{A},{B}", "is not allowed"),
        ([nvidia_request(), cdi_request()], "void", "at most one"),
        ([dict(nvidia_request(), Extra=1)], f"{A},{B}", "unknown device request fields"),
    ],
)
def test_anything_but_the_two_styles_is_refused(requests, visible, message):
    config = container_config(spec(0), DockerOptions(node="n"), None)
    env = dict(config["environment"])
    if visible is None:
        env.pop("NVIDIA_VISIBLE_DEVICES")
    else:
        env["NVIDIA_VISIBLE_DEVICES"] = visible
    with pytest.raises(UnsafeConfig, match=message):
        check_config({**config, "device_requests": requests, "environment": env}, None)


# --- --docker-gpus auto ---


def write_spec(folder, name: str, kind: str, devices: list[str], as_json: bool = False) -> None:
    folder.mkdir(exist_ok=True)
    spec = {"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": d} for d in devices]}
    if as_json:
        (folder / f"{name}.json").write_text(json.dumps(spec))
    else:
        lines = ["cdiVersion: 0.5.0", f"kind: {kind}", "devices:"]
        lines += [f"- name: {d!r}\n  containerEdits: {{}}" for d in devices]
        (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n")


CDI_ON = {"CDISpecDirs": ["/etc/cdi", "/var/run/cdi"], "Runtimes": {"runc": {}}}


def test_cdi_with_uuid_names_wins_where_the_engine_has_cdi(tmp_path):
    write_spec(tmp_path / "etc", "nvidia", "nvidia.com/gpu", ["0", "1", A, B, "all"])
    attach = choose_gpu_attach("auto", CDI_ON, spec_dirs=[tmp_path / "etc"], hook_installed=True)
    assert (attach.style, attach.cdi_names) == ("cdi", "uuid")


def test_cdi_index_names_when_the_spec_has_only_those(tmp_path):
    write_spec(tmp_path / "run", "nvidia", "nvidia.com/gpu", ["0", "1", "all"], as_json=True)
    attach = choose_gpu_attach("auto", CDI_ON, spec_dirs=[tmp_path / "run"], hook_installed=False)
    assert (attach.style, attach.cdi_names) == ("cdi", "index")


def test_the_engines_discovered_devices_need_no_spec_files():
    info = {
        **CDI_ON,
        "DiscoveredDevices": [{"Source": "cdi", "ID": f"nvidia.com/gpu={A}"}],
    }
    attach = choose_gpu_attach("auto", info, spec_dirs=[], hook_installed=False)
    assert (attach.style, attach.cdi_names) == ("cdi", "uuid")


def test_other_vendors_and_broken_specs_do_not_count_as_nvidia_cdi(tmp_path):
    folder = tmp_path / "cdi"
    write_spec(folder, "intel", "intel.com/gpu", ["card0"])
    (folder / "broken.yaml").write_text("kind: [unclosed\n")
    (folder / "notes.txt").write_text("kind: nvidia.com/gpu\n")
    attach = choose_gpu_attach("auto", CDI_ON, spec_dirs=[folder], hook_installed=True)
    assert attach.style == "nvidia"


def test_specs_do_not_count_when_the_engine_has_cdi_off(tmp_path):
    write_spec(tmp_path / "etc", "nvidia", "nvidia.com/gpu", [A])
    info = {"CDISpecDirs": [], "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}
    attach = choose_gpu_attach("auto", info, spec_dirs=[tmp_path / "etc"], hook_installed=False)
    assert (attach.style, attach.why) == ("nvidia", "the engine has the nvidia runtime")


@pytest.mark.parametrize(
    ("requested", "style"), [("off", "off"), ("nvidia", "nvidia"), ("on", "nvidia"), ("cdi", "cdi")]
)
def test_an_explicit_choice_is_taken_as_given(requested, style):
    assert choose_gpu_attach(requested, {}, spec_dirs=[], hook_installed=False).style == style


def test_nothing_there_means_off_with_the_reason():
    attach = choose_gpu_attach(
        "auto", {"Runtimes": {"runc": {}}}, spec_dirs=[], hook_installed=False
    )
    assert attach.style == "off"
    assert "CDI is not enabled" in attach.why and "nvidia-container-runtime-hook" in attach.why
