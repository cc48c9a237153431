"""Faults on Kubernetes: a node going NotReady, the controller restarting (docs/kubernetes.md)."""

import threading

from agents.node_monitor import run_node_monitor
from jobs.models import Pod
from kube.client import KubeClient
from kube.config import KubeConfig
from policy.statuses import JobStatus, PodStatus
from tests.k8s.apiserver import ADMIN_TOKEN
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, log_lines, make_job, status


class Recorder(threading.Thread):
    """Every ADDED and DELETED of the namespace's Pods, in the API server's order."""

    def __init__(self, url: str, ca_file: str, ns: str) -> None:
        super().__init__(daemon=True)
        config = KubeConfig(api_url=url, token=ADMIN_TOKEN, ca_file=ca_file, namespace=ns)
        self.client = KubeClient(config)
        self.events: list[tuple[str, str]] = []
        self.ready = threading.Event()

    def run(self) -> None:
        _, version = self.client.list_all(self.client.pods_path())
        self.ready.set()
        try:
            for kind, obj in self.client.watch(self.client.pods_path(), {}, version, timeout=60):
                if kind in ("ADDED", "DELETED"):
                    self.events.append((kind, obj["metadata"]["name"]))
        except Exception:  # the session's server stopping ends the stream
            return


def test_a_node_going_not_ready_restarts_the_job_elsewhere_without_two_copies(
    controllers, kubelet, kube_ns, kube_server, researcher, workspace, quota, settings
):
    settings.NODE_NOT_READY_AFTER = 1
    settings.NODE_LOST_TIMEOUT = 3
    ns, label = kube_ns, {"gpu-console-test": kube_ns}
    kubelet.add_node(f"{ns}-a", 8, label)
    kubelet.add_node(f"{ns}-b", 8, label)
    recorder = Recorder(kube_server.url, kube_server.ca_file, ns)
    recorder.start()
    recorder.ready.wait(10)
    controller = controllers()
    job = make_job(researcher, workspace, quota, gpus=8, ft=True)
    first = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first) is not None)
    kubelet.start(ns, first)
    settle(controller, lambda: status(job) == JobStatus.RUNNING)
    kubelet.write(ns, first, "before the node went away")
    settle(controller, lambda: log_lines(Pod.objects.get(job=job, attempt=1)) != [])

    lost = api_pod(kubelet, ns, first)["spec"]["nodeName"]
    kubelet.dead.add(lost)  # its kubelet stops: the Pod's status stays Running
    kubelet.set_node(lost, ready=False)
    second = f"job-{job.pk}-w0-a2"
    settle(
        controller,
        lambda: api_pod(kubelet, ns, second) is not None,
        what="restarted elsewhere",
        also=run_node_monitor,
    )
    assert api_pod(kubelet, ns, second)["spec"]["nodeName"] != lost
    assert Pod.objects.get(job=job, attempt=1).status == PodStatus.LOST
    job.refresh_from_db()
    assert (job.node_loss_count, job.restart_count) == (1, 0)
    kubelet.start(ns, second)
    kubelet.exit(ns, second, 0)
    settle(controller, lambda: status(job) == JobStatus.COMPLETED)
    settle(controller, lambda: ("DELETED", second) in recorder.events, what="released")
    # The old copy was gone from the API server before the new one was created.
    order = [e for e in recorder.events if e[1] in (first, second)]
    assert order == [("ADDED", first), ("DELETED", first), ("ADDED", second), ("DELETED", second)]


def test_a_restarted_controller_adopts_its_pods_and_loses_no_line(
    controllers, kubelet, kube_ns, researcher, workspace, quota
):
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, gpus=4)
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name) is not None)
    uid = api_pod(kubelet, ns, name)["metadata"]["uid"]
    kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING)
    lines = [f"line {i}" for i in range(900)]
    kubelet.write(ns, name, *lines[:300])
    pod = Pod.objects.get(job=job)
    settle(controller, lambda: len(log_lines(pod)) == 300)

    controller.stop()  # the console goes away mid-job; the worker keeps writing
    kubelet.write(ns, name, *lines[300:600])
    controller = controllers()
    settle(controller, lambda: len(log_lines(pod)) == 600, what="adopted")
    assert api_pod(kubelet, ns, name)["metadata"]["uid"] == uid  # adopted, not re-created
    kubelet.write(ns, name, *lines[600:])
    kubelet.exit(ns, name, 0)
    settle(controller, lambda: status(job) == JobStatus.COMPLETED)
    assert log_lines(pod) == lines
    assert Pod.objects.filter(job=job).count() == 1  # one attempt: nothing restarted


def test_an_eviction_by_the_cluster_restarts_through_fault_tolerance(
    controllers, kubelet, kube_ns, researcher, workspace, quota
):
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, gpus=8, ft=True)
    first = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first) is not None)
    kubelet.start(ns, first)
    settle(controller, lambda: status(job) == JobStatus.RUNNING)
    eviction = {
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": first, "namespace": ns},
    }
    kubelet.api.call("POST", f"/api/v1/namespaces/{ns}/pods/{first}/eviction", eviction)
    second = f"job-{job.pk}-w0-a2"
    settle(controller, lambda: api_pod(kubelet, ns, second) is not None, what="restarted")
    evicted = Pod.objects.get(job=job, attempt=1)
    assert evicted.status == PodStatus.LOST and "ended by the cluster" in evicted.status_reason
    assert log_lines(evicted) == ["SIGTERM received"]
    job.refresh_from_db()
    assert (job.node_loss_count, job.restart_count) == (1, 0)  # no failure budget spent
