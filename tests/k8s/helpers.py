"""Small helpers of the Kubernetes backend's tests."""

from jobs.models import Job, LogChunk, Pod
from policy.faulttolerance.policy import FtConfig
from tests.k8s.kubelet import FakeKubelet


def make_job(owner, workspace, quota, *, workers=1, gpus=1, ft=False, **fields) -> Job:
    config = FtConfig(enabled=ft)
    return Job.objects.create(
        workspace=workspace,
        quota=quota,
        owner=owner,
        name=fields.pop("name", "train"),
        image="busybox",
        command="python train.py",
        workers=workers,
        gpus_per_worker=gpus,
        cpus_per_worker=1,
        memory_gb_per_worker=1,
        fault_tolerance=config.enabled,
        ft_config=config.to_dict(),
        **fields,
    )


def api_pod(kubelet: FakeKubelet, ns: str, name: str) -> dict | None:
    reply = kubelet.api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}", ok=(404,))
    return reply if reply.get("kind") == "Pod" else None


def api_pods(kubelet: FakeKubelet, ns: str) -> list[dict]:
    return kubelet.api.call("GET", f"/api/v1/namespaces/{ns}/pods").get("items", [])


def log_lines(pod: Pod) -> list[str]:
    text = "".join(c.text for c in LogChunk.objects.filter(pod=pod).order_by("seq_start"))
    return text.splitlines()


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def write_checkpoint(root, workspace_id: int, job_id: int, step: int, attempt: int) -> str:
    """A committed checkpoint as the SDK leaves it (files, then the manifest last); returns
    its path as the workers see it (under /checkpoints)."""
    import json
    from pathlib import Path

    folder = Path(root) / f"ws-{workspace_id}" / f"job-{job_id}" / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"w" * 64)
    manifest = {"step": step, "attempt": attempt, "files": [{"name": "model.pt", "size": 64}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return f"/checkpoints/ws-{workspace_id}/job-{job_id}/step-{step}"


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
