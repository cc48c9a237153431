"""A distributed job's workers meet on Kubernetes (docs/distributed.md): a headless Service
per job and each Pod's DNS name, through the real API server."""

import json

from policy.statuses import JobStatus
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, make_job, status


def _service(kubelet, ns: str, name: str) -> dict | None:
    reply = kubelet.api.call("GET", f"/api/v1/namespaces/{ns}/services/{name}", ok=(404,))
    return reply if reply.get("kind") == "Service" else None


def test_a_headless_service_names_every_worker_and_goes_with_the_job(
    controllers, kubelet, kube_ns, researcher, workspace, quota
):
    ns, label = kube_ns, {"gpu-console-test": kube_ns}
    kubelet.add_node(f"{ns}-a", 8, label)
    kubelet.add_node(f"{ns}-b", 8, label)
    controller = controllers()
    job = make_job(
        researcher,
        workspace,
        quota,
        workers=3,
        gpus=4,
        distributed={"framework": "tensorflow", "ps_workers": 1},
    )
    names = [f"job-{job.pk}-w{rank}-a1" for rank in range(3)]
    settle(controller, lambda: all(api_pod(kubelet, ns, n) for n in names), what="pods created")
    service = _service(kubelet, ns, f"job-{job.pk}")
    assert service is not None
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"]["gpu-console.io/job-id"] == str(job.pk)
    master = f"w0.job-{job.pk}.{ns}.svc"
    for rank, name in enumerate(names):
        pod = api_pod(kubelet, ns, name)
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"w{rank}", f"job-{job.pk}")
        env = env_of(pod)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master, "29500")
        assert (env["NNODES"], env["NODE_RANK"]) == ("3", str(rank))
        tf = json.loads(env["TF_CONFIG"])
        assert tf["cluster"] == {
            "chief": [f"{master}:29500"],
            "ps": [f"w1.job-{job.pk}.{ns}.svc:29500"],
            "worker": [f"w2.job-{job.pk}.{ns}.svc:29500"],
        }
        assert tf["task"] == {"type": ("chief", "ps", "worker")[rank], "index": 0}
    for name in names:
        kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    for name in names:
        kubelet.exit(ns, name, 0)
    settle(controller, lambda: status(job) == JobStatus.COMPLETED, what="Completed")
    settle(controller, lambda: _service(kubelet, ns, f"job-{job.pk}") is None, what="service gone")
