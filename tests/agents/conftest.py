"""Helpers for the agent API tests: register nodes through the real endpoint, build jobs."""

import json
import threading
from collections.abc import Callable

import pytest
from django.db import connections

from agents.actions import issue_bootstrap_token
from cluster.models import Node
from jobs.models import HeldGpu, Job, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import agents  # noqa: F401 - the fixture, for every test here

API = "/api/v1/agent/"


def post(client, endpoint: str, body, token: str | None = None, **extra):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(
        API + endpoint, data=data, content_type="application/json", headers=headers, **extra
    )


def gpu(index: int, **extra) -> dict:
    return {
        "index": index,
        "uuid": f"GPU-{index:04d}",
        "name": "NVIDIA H200",
        "memory_total_mb": 143771,
        **extra,
    }


def facts(gpus: int | list[dict] = 8, **extra) -> dict:
    """Node facts with `gpus` healthy H200s (a count) or exactly the given GPU dicts."""
    return {
        "hostname": "host-a",
        "agent_version": "0.1.0",
        "runtime": "process",
        "resource_type": "Lingjun",
        "gpu_type": "H200",
        "cpus": 96,
        "memory_gb": 1024,
        "gpus": [gpu(i) for i in range(gpus)] if isinstance(gpus, int) else gpus,
        **extra,
    }


def register(client, name: str = "n1", **fact_overrides) -> tuple[Node, str]:
    _, bootstrap = issue_bootstrap_token(None, "test")
    response = post(
        client, "register/", {"name": name, "facts": facts(**fact_overrides)}, bootstrap
    )
    assert response.status_code == 200, response.content
    body = response.json()
    return Node.objects.get(pk=body["node_id"]), body["node_token"]


def heartbeat(client, token: str, workers=(), **fact_overrides):
    return post(
        client, "heartbeat/", {"facts": facts(**fact_overrides), "workers": list(workers)}, token
    )


def running(pod: Pod) -> dict:
    return {"pod_id": pod.pk, "attempt": pod.attempt, "state": "running"}


def exited(pod: Pod, code: int | None, error: str = "") -> dict:
    return {
        "pod_id": pod.pk,
        "attempt": pod.attempt,
        "state": "exited",
        "exit_code": code,
        "error": error,
    }


def make_job(
    *,
    owner,
    workspace,
    quota,
    nodes,
    command: str = "echo hello",
    status: JobStatus = JobStatus.STARTING,
    pod_status: PodStatus = PodStatus.STARTING,
    gpus: int = 1,
    env: dict | None = None,
    image: str = "pytorch:2.4",
    **fields,
) -> tuple[Job, list[Pod]]:
    """A placed job with one worker per entry of `nodes`, as the scheduler would leave it.
    Every field is written here, with the job: an agent may launch a Starting pod before
    a later update reaches the row."""
    job = Job.objects.create(
        workspace=workspace,
        quota=quota,
        owner=owner,
        name="train",
        image=image,
        command=command,
        env=env or {},
        workers=len(nodes),
        gpus_per_worker=gpus,
        status=status,
        **fields,
    )
    pods = [
        Pod.objects.create(
            job=job,
            attempt=1,
            rank=rank,
            node=node,
            gpu_indices=free_gpus(node, gpus),
            gpus=gpus,
            cpus=4,
            memory_gb=16,
            charged_quota=quota,
            status=pod_status,
        )
        for rank, node in enumerate(nodes)
    ]
    return job, pods


def free_gpus(node, count: int) -> list[int]:
    """The node's lowest `count` GPUs no live pod holds (the database refuses a second
    holder of a GPU); count them from 0 if the node has no GPU count (a bare test node)."""
    held = set(HeldGpu.objects.filter(node=node).values_list("gpu_index", flat=True))
    free = [i for i in range(max(node.gpus, count + len(held))) if i not in held]
    return free[:count]


@pytest.fixture
def job_factory(researcher, workspace, quota):
    def build(nodes, **kwargs):
        return make_job(owner=researcher, workspace=workspace, quota=quota, nodes=nodes, **kwargs)

    return build


def run_together(*calls: Callable[[], object], timeout: float = 60) -> list[tuple[str, object]]:
    """Start every call at the same moment, each in its own thread and DB connection."""
    barrier = threading.Barrier(len(calls))
    results: list[tuple[str, object]] = [("error", TimeoutError("did not finish"))] * len(calls)

    def worker(i: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[i] = ("ok", call())
        except Exception as exc:
            results[i] = ("error", exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


# --- a Docker-API engine (podman's service) for the docker runtime tests ---

TEST_IMAGE = "localhost/busybox:test"


@pytest.fixture(scope="session")
def docker_url() -> str:
    """Start (once) podman's Docker-compatible service with a local busybox image;
    scripts/podman-service is idempotent. Skipped only where podman is not installed
    (`make test` and `.ci/run` install it: scripts/test-tools)."""
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make test installs it: scripts/test-tools)")
    script = Path(__file__).resolve().parents[2] / "scripts" / "podman-service"
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def remove_node_containers(docker_url: str, node: str) -> None:
    import docker

    client = docker.DockerClient(base_url=docker_url)
    try:
        for c in client.containers.list(all=True, filters={"label": f"io.gpu-console.node={node}"}):
            c.remove(force=True)
    finally:
        client.close()
