"""Fixtures of the Kubernetes backend's tests: a real API server for the session, a fake
kubelet, a namespace and nodes of each test's own, and a controller (docs/kubernetes.md).

Skipped with a reason unless KUBE_APISERVER names a kube-apiserver (plain `make test`);
`make test-k8s` sets it (scripts/kube-build), and then a server that cannot start fails the
tests instead."""

import time
import uuid
from pathlib import Path

import pytest
import yaml

from jobs.scheduler.cycle import run_cycle
from kube.config import KubeConfig
from kube.controller import Controller
from tests.k8s import apiserver
from tests.k8s.kubelet import FakeKubelet

RBAC = Path(__file__).resolve().parents[2] / "deploy/kubernetes/rbac.yaml"


def pytest_collection_modifyitems(config, items):
    if apiserver.binary():
        return
    skip = pytest.mark.skip(
        reason="KUBE_APISERVER is not set: `make test-k8s` runs these (scripts/kube-build)"
    )
    for item in items:
        if "tests/k8s/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory):
    try:
        server = apiserver.start(tmp_path_factory.mktemp("kube"), apiserver.binary())
    except Exception as exc:
        pytest.fail(f"the kube-apiserver did not start: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kubelet(kube_server, tmp_path_factory):
    k = FakeKubelet(kube_server.url, kube_server.ca_file, tmp_path_factory.mktemp("kubelet"))
    for doc in yaml.safe_load_all(RBAC.read_text()):
        _apply(k, doc)
    yield k
    k.close()


_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def _apply(kubelet: FakeKubelet, doc: dict, namespace: str = "") -> None:
    if namespace:
        doc["metadata"]["namespace"] = namespace
    path = _PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    kubelet.api.call("POST", path, doc, ok=(409,))


@pytest.fixture
def kube_ns(kubelet):
    """A namespace of this test's own, with the manifest's Role bound in it."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    kubelet.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc["kind"] in ("Role", "RoleBinding"):
            _apply(kubelet, doc, ns)
    return ns


@pytest.fixture
def kube_config(kube_server, kube_ns, tmp_path, settings):
    settings.DEFAULT_STOP_GRACE = 5
    root = tmp_path / "checkpoints"
    root.mkdir()
    return KubeConfig(
        api_url=kube_server.url,
        token=apiserver.CONSOLE_TOKEN,
        ca_file=kube_server.ca_file,
        namespace=kube_ns,
        node_selector=f"gpu-console-test={kube_ns}",
        sync_interval=0.2,
        checkpoint_hostpath=str(root),
        checkpoint_root=str(root),
        hash_cache=str(tmp_path / "var" / "kube-inputs-sha256.json"),
    )


@pytest.fixture
def controllers(kube_config):
    started: list[Controller] = []

    def start() -> Controller:
        controller = Controller(kube_config, watch_timeout=5)
        controller.start()
        started.append(controller)
        return controller

    yield start
    for c in started:
        c.stop()


def settle(controller: Controller, done, timeout: float = 30.0, what: str = "", also=None) -> None:
    """Scheduler cycles and controller steps (this thread: the test's database) until
    `done()`; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        run_cycle()
        if also is not None:
            also()
        controller.step()
        if done():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout}s: {what or done}\n{_state()}")
        time.sleep(0.05)


def _state() -> str:
    """What the console holds, for a failure's message."""
    from cluster.models import GpuDevice, Node
    from jobs.models import Job, Pod

    lines = [f"job {j.pk} {j.status} a{j.attempt}: {j.status_reason}" for j in Job.objects.all()]
    lines += [f"pod {p.pk} {p.status} {p.desired} {p.status_reason}" for p in Pod.objects.all()]
    for n in Node.objects.all():
        free = GpuDevice.objects.filter(node=n, healthy=True).count()
        lines.append(f"node {n.name} {n.state} {n.runtime} gpus={n.gpus} healthy={free}")
    return "\n".join(lines)
