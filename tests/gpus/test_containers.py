"""What a container worker is given, against a real Docker-API engine (podman's service):
the exact device request on the wire, and the environment the engine created the container
with and the worker itself sees, for 0, 1 and 2 GPUs in both request styles."""

import uuid

import docker
import pytest

from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.container_config import container_name
from agents.node.runtimes.containers import DockerOptions, DockerRuntime
from tests.agents.conftest import TEST_IMAGE, remove_node_containers
from tests.agents.test_runtime_process import Recorder
from tests.gpus.fakenvml import fake_uuid
from tests.gpus.wiretap import Wiretap

UUIDS = (fake_uuid("node-a-4"), fake_uuid("node-a-7"))
INDICES = (4, 7)
DEVICE_VARS = (
    "CUDA_DEVICE_ORDER",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_VISIBLE_DEVICES",
)
# What a job may try (a CUDA image sets NVIDIA_VISIBLE_DEVICES=all itself): never obeyed.
GREEDY_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "LR": "0.1"}


@pytest.fixture
def engine(docker_url, tmp_path):
    """A runtime talking to podman through a wiretap; yields a factory for a style."""
    node = f"g{uuid.uuid4().hex[:10]}"
    tap = Wiretap(docker_url.removeprefix("unix://"), tmp_path / "tap.sock")
    rec = Recorder()
    client = docker.DockerClient(base_url=docker_url)
    made = []

    def make(style: str, cdi_names: str = "uuid") -> DockerRuntime:
        opts = DockerOptions(node=node, gpus=style, cdi_names=cdi_names)
        runtime = DockerRuntime(opts, rec.on_line, rec.on_exit, base_url=tap.url)
        made.append(runtime)
        return runtime

    yield make, rec, tap, client, node
    for runtime in made:
        runtime.shutdown(0)
        runtime.close()
    remove_node_containers(docker_url, node)
    client.close()
    tap.close()


def run_env_worker(make, rec, client, node, style, count, cdi_names="uuid"):
    """Launch `env` with `count` GPUs; returns (create body, engine's env, worker's env)."""
    runtime = make(style, cdi_names)
    spec = LaunchSpec(
        pod_id=21,
        job_id=9,
        attempt=1,
        rank=0,
        world_size=1,
        image=TEST_IMAGE,
        command="env",
        env=GREEDY_ENV,
        gpu_indices=INDICES[:count],
        gpu_uuids=UUIDS[:count],
        node=node,
    )
    runtime.launch(spec)
    rec.wait_exit(21)
    seen = dict(line.split("=", 1) for line in rec.lines[21] if "=" in line and " " not in line)
    container = client.containers.get(container_name(node, 21, 1))
    created = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    return container, created, seen


def expected(style: str, count: int, cdi_names: str = "uuid"):
    """(device requests, device env) a worker with `count` GPUs must get."""
    uuids, indices = UUIDS[:count], INDICES[:count]
    if count == 0 or style == "off":
        request = None
        visible, cuda = "void", ""
    elif style == "nvidia":
        request = [
            {
                "Driver": "nvidia",
                "Count": 0,
                "DeviceIDs": list(uuids),
                "Capabilities": [["gpu", "compute", "utility"]],
                "Options": {},
            }
        ]
        visible, cuda = ",".join(uuids), ",".join(uuids)
    else:
        names = uuids if cdi_names == "uuid" else indices
        request = [
            {
                "Driver": "cdi",
                "Count": 0,
                "DeviceIDs": [f"nvidia.com/gpu={n}" for n in names],
                "Capabilities": [],
                "Options": {},
            }
        ]
        visible, cuda = "void", ",".join(uuids)
    env = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": cuda,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "NVIDIA_VISIBLE_DEVICES": visible,
    }
    return request, env


@pytest.mark.parametrize("count", [0, 1, 2])
@pytest.mark.parametrize("style", ["nvidia", "cdi"])
def test_a_worker_is_given_exactly_its_gpus(engine, style, count):
    make, rec, tap, client, node = engine
    container, created, seen = run_env_worker(make, rec, client, node, style, count)
    want_request, want_env = expected(style, count)
    (body,) = tap.creates()
    assert body["HostConfig"].get("DeviceRequests") == want_request
    sent = dict(e.split("=", 1) for e in body["Env"])
    for env in (sent, created, seen):  # on the wire, as created, as the worker sees it
        assert {k: env.get(k) for k in DEVICE_VARS} == want_env
        assert env["LR"] == "0.1"  # the job's own variables still arrive
    labels = container.labels
    assert labels["io.gpu-console.gpu-uuids"] == ",".join(UUIDS[:count])
    assert labels["io.gpu-console.gpus"] == ",".join(map(str, INDICES[:count]))


def test_cdi_names_by_index_where_the_hosts_spec_has_no_uuid_names(engine):
    make, rec, tap, client, node = engine
    _, created, seen = run_env_worker(make, rec, client, node, "cdi", 2, cdi_names="index")
    want_request, want_env = expected("cdi", 2, "index")
    (body,) = tap.creates()
    assert body["HostConfig"]["DeviceRequests"] == want_request
    for env in (created, seen):
        assert {k: env.get(k) for k in DEVICE_VARS} == want_env


def test_gpus_off_attaches_nothing_and_says_so(engine):
    make, rec, tap, client, node = engine
    _, created, seen = run_env_worker(make, rec, client, node, "off", 2)
    want_request, want_env = expected("off", 2)
    (body,) = tap.creates()
    assert body["HostConfig"].get("DeviceRequests") is want_request is None
    for env in (created, seen):
        assert {k: env.get(k) for k in DEVICE_VARS} == want_env
    assert any("GPUs are not attached" in line for line in rec.lines[21])


def test_an_adopted_container_keeps_its_gpus(engine):
    make, rec, _tap, _client, node = engine
    runtime = make("nvidia")
    runtime.launch(
        LaunchSpec(
            pod_id=22,
            job_id=9,
            attempt=3,
            rank=0,
            world_size=1,
            image=TEST_IMAGE,
            command="echo ready; sleep 600",
            gpu_indices=INDICES,
            gpu_uuids=UUIDS,
            node=node,
        )
    )
    rec.wait_line(22, "ready")
    again = make("nvidia")  # a restarted agent
    assert again.adopt({22: 1}) == {22: 3}
    (state,) = again.workers()
    assert (state.gpu_indices, state.gpu_uuids) == (INDICES, UUIDS)


def test_the_engines_own_info_decides_auto(engine, docker_url):
    """podman here has neither CDI specs for nvidia.com/gpu nor an NVIDIA runtime."""
    from agents.node.runtimes.gpu_attach import choose_gpu_attach

    make, *_ = engine
    info = make("off").engine_info()
    assert info["Runtimes"] and "nvidia" not in info["Runtimes"]
    attach = choose_gpu_attach("auto", info, spec_dirs=[], hook_installed=False)
    assert attach.style == "off"
    assert "nvidia runtime" in attach.why
