"""The cluster's nodes as the console's inventory; refusals and permissions
(docs/kubernetes.md)."""

import pytest

from cluster.models import GpuDevice, Node
from jobs.models import Pod
from kube.controller import Controller
from kube.decisions import FOREIGN
from kube.permissions import MissingPermissions
from policy.statuses import JobStatus, PodStatus
from tests.k8s.apiserver import NOBODY_TOKEN
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, make_job, status


def _foreign_pod(kubelet, ns: str, node: str, gpus: int) -> str:
    kubelet.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, ok=(409,))
    spec = {
        "nodeName": node,
        "restartPolicy": "Never",
        "containers": [
            {"name": "c", "image": "other", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    kubelet.api.call(
        "POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "theirs"}, "spec": spec}
    )
    return "theirs"


def _free(node_name: str) -> int:
    return GpuDevice.objects.filter(node__name=node_name, healthy=True).count()


def test_gpus_that_foreign_pods_request_are_never_booked_twice(
    controllers, kubelet, kube_ns, researcher, workspace, quota
):
    ns, node = kube_ns, f"{kube_ns}-a"
    kubelet.add_node(node, 8, {"gpu-console-test": ns})
    other = f"{ns}-other"
    theirs = _foreign_pod(kubelet, other, node, 6)
    kubelet.start(other, theirs)
    controller = controllers()
    settle(controller, lambda: _free(node) == 2, what="6 GPUs held by the foreign pod")
    assert set(GpuDevice.objects.filter(node__name=node, healthy=False).values_list(
        "health_reason", flat=True)) == {FOREIGN}  # fmt: skip

    big = make_job(researcher, workspace, quota, gpus=4, name="big")
    small = make_job(researcher, workspace, quota, gpus=2, name="small")
    settle(controller, lambda: status(small) == JobStatus.STARTING, what="small placed")
    settle(controller, lambda: status(big) == JobStatus.INQUEUE, what="big waits")
    assert api_pod(kubelet, ns, f"job-{big.pk}-w0-a1") is None
    placed = Pod.objects.get(job=small)
    healthy = GpuDevice.objects.filter(node__name=node, healthy=True).values_list(
        "index", flat=True
    )
    assert sorted(healthy) == sorted(placed.gpu_indices)  # 6 theirs, 2 the console's pod's

    kubelet.exit(other, theirs, 0)  # their pod ends: its GPUs are the console's to place
    settle(controller, lambda: status(big) == JobStatus.STARTING, what="big placed")
    held = [i for p in Pod.objects.filter(job__in=[big, small]) for i in p.gpu_indices]
    assert sorted(held) == sorted(set(held)) and len(held) == 6


def test_a_kubelet_refusal_requeues_the_job(
    controllers, kubelet, kube_ns, researcher, workspace, quota
):
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, gpus=8)
    first = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first) is not None)
    kubelet.refuse(ns, first)
    second = f"job-{job.pk}-w0-a2"
    settle(controller, lambda: api_pod(kubelet, ns, second) is not None, what="placed again")
    refused = Pod.objects.get(job=job, attempt=1)
    assert refused.status == PodStatus.FAILED and "OutOfnvidia.com/gpu" in refused.status_reason
    job.refresh_from_db()
    assert (job.attempt, job.restart_count) == (2, 0)  # placed again, no budget spent
    assert job.events.filter(to_status=JobStatus.PENDING, reason__startswith="requeued").exists()
    settle(controller, lambda: api_pod(kubelet, ns, first) is None, what="refused pod released")


def test_missing_permissions_are_named_at_start(kube_config):
    from dataclasses import replace

    controller = Controller(replace(kube_config, token=NOBODY_TOKEN))
    with pytest.raises(MissingPermissions) as refused:
        controller.start()
    message = str(refused.value)
    assert "create pods in namespace" in message and "list nodes cluster-wide" in message
    assert "deploy/kubernetes/rbac.yaml" in message


def test_a_watch_too_old_lists_again(db, controllers, kubelet, kube_ns, kube_server):
    controller = controllers()
    lists = controller.own.lists
    kubelet.add_node(f"{kube_ns}-a", 8, {"gpu-console-test": kube_ns})
    latest = kubelet.api.call("GET", "/api/v1/nodes")["metadata"]["resourceVersion"]
    kube_server.compact(latest)
    controller.own.version = "1"  # compacted away: its next watch is answered 410 Gone
    settle(controller, lambda: controller.own.lists > lists, timeout=20, what="relisted")
    assert Node.objects.filter(name=f"{kube_ns}-a").exists()
