"""A job's life on Kubernetes through the real API server (docs/kubernetes.md)."""

import json
from pathlib import Path

from jobs.models import Pod
from policy.statuses import JobStatus, PodStatus
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, log_lines, make_job, status


def test_a_two_worker_job_completes_with_every_log_line_once(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota
):
    ns, label = kube_ns, {"gpu-console-test": kube_ns}
    kubelet.add_node(f"{ns}-a", 8, label)
    kubelet.add_node(f"{ns}-b", 8, label)
    controller = controllers()
    job = make_job(researcher, workspace, quota, workers=2, gpus=8)
    names = [f"job-{job.pk}-w{rank}-a1" for rank in (0, 1)]
    settle(controller, lambda: all(api_pod(kubelet, ns, n) for n in names), what="pods created")
    created = [api_pod(kubelet, ns, n) for n in names]
    assert {p["spec"]["nodeName"] for p in created} == {f"{ns}-a", f"{ns}-b"}
    for pod in created:
        assert pod["spec"]["restartPolicy"] == "Never"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
        env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert "CUDA_VISIBLE_DEVICES" not in env and "NVIDIA_VISIBLE_DEVICES" not in env
    for name in names:
        kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    for pod in job.pods.all():  # the SDK's progress file, on the shared volume
        folder = Path(kube_config.checkpoint_root) / f"ws-{workspace.pk}" / ".progress"
        folder.mkdir(parents=True, exist_ok=True)
        progress = {"step": 5 + pod.rank, "total": 100, "phase": "train"}
        (folder / f"pod-{pod.pk}-1.json").write_text(json.dumps(progress))
    settle(
        controller,
        lambda: sorted(job.pods.values_list("progress_step", flat=True)) == [5, 6],
        what="progress read",
    )

    expected = {name: [f"{name} line {i}" for i in range(1200)] for name in names}
    for name in names:
        kubelet.write(ns, name, *expected[name][:700])
    settle(controller, lambda: all(len(log_lines(p)) >= 700 for p in job.pods.all()))
    kubelet.drop_log_connections(ns, names[0])  # the stream breaks: resumed, no repeats
    for name in names:
        kubelet.write(ns, name, *expected[name][700:])
        kubelet.exit(ns, name, 0)
    settle(controller, lambda: status(job) == JobStatus.COMPLETED, what="Completed")

    for pod in Pod.objects.filter(job=job):
        assert pod.status == PodStatus.SUCCEEDED
        assert log_lines(pod) == expected[f"job-{job.pk}-w{pod.rank}-a1"]
    settle(controller, lambda: not any(api_pod(kubelet, ns, n) for n in names), what="pods gone")
