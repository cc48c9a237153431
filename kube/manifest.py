"""The Pod the console creates for one worker (pure; docs/kubernetes.md).

A bare Pod bound to the node the console's `plan()` chose (`nodeName`: Kubernetes 1.20 has
no scheduling gates), `restartPolicy: Never` (a restart is the console's decision: a new
attempt is a new Pod), the job's stop grace, its GPUs as `nvidia.com/gpu` limits (the
device plugin chooses the devices; the console never sets the visible-device variables),
and the worker variables the agent sets (protocol.workerenv) with paths on the checkpoint
volume. A finalizer keeps the Pod until the controller has read its last log lines and
recorded its end.
"""

from dataclasses import dataclass, field

from kube.config import KubeConfig
from kube.objects import (
    ATTEMPT,
    CONTAINER,
    FINALIZER,
    JOB_ID,
    MANAGED_BY,
    MANAGER,
    POD_ID,
    RANK,
    pod_name,
)

VOLUME = "checkpoints"


@dataclass(frozen=True)
class WorkerFacts:
    pod_id: int
    job_id: int
    rank: int
    attempt: int
    world_size: int
    node_name: str
    image: str
    command: str
    gpus: int
    cpus: int
    memory_gb: int
    grace_seconds: int
    workspace_id: int
    checkpoint_subdir: str = ""
    resume_from: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return pod_name(self.job_id, self.rank, self.attempt)


def checkpoint_folder(config: KubeConfig, workspace_id: int, job_id: int, subdir: str) -> str:
    """The job's checkpoint folder inside the worker (the same layout as the agent's:
    the workspace's area, then the job's folder)."""
    return f"{config.checkpoint_mount}/ws-{workspace_id}/{subdir or f'job-{job_id}'}"


def progress_path(config: KubeConfig, workspace_id: int, pod_id: int, attempt: int) -> str:
    return f"{config.checkpoint_mount}/ws-{workspace_id}/.progress/pod-{pod_id}-{attempt}.json"


def _env(w: WorkerFacts, config: KubeConfig) -> list[dict]:
    env = {str(k): str(v) for k, v in w.env.items()}
    env.update(
        {
            "RANK": str(w.rank),
            "WORLD_SIZE": str(w.world_size),
            # Rank 0's pod IP would need a Service per job; until then workers of a
            # multi-node job find rank 0 by the job's own means.
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(20000 + w.job_id % 20000),
            "JOB_ID": str(w.job_id),
            "POD_ID": str(w.pod_id),
            "ATTEMPT": str(w.attempt),
            "GPU_WORKER_ID": w.name,
            "PYTHONUNBUFFERED": "1",
        }
    )
    if _volume(config):
        folder = checkpoint_folder(config, w.workspace_id, w.job_id, w.checkpoint_subdir)
        env["CHECKPOINT_DIR"] = folder
        env["PROGRESS_FILE"] = progress_path(config, w.workspace_id, w.pod_id, w.attempt)
        if w.resume_from:
            env["RESUME_FROM"] = w.resume_from
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def _volume(config: KubeConfig) -> dict | None:
    if config.checkpoint_claim:
        return {"name": VOLUME, "persistentVolumeClaim": {"claimName": config.checkpoint_claim}}
    if config.checkpoint_hostpath:
        return {
            "name": VOLUME,
            "hostPath": {"path": config.checkpoint_hostpath, "type": "DirectoryOrCreate"},
        }
    return None


def pod_manifest(w: WorkerFacts, config: KubeConfig) -> dict:
    resources = {config.gpu_resource: str(w.gpus)} if w.gpus else {}
    if w.cpus:
        resources["cpu"] = str(w.cpus)
    if w.memory_gb:
        resources["memory"] = f"{w.memory_gb}Gi"
    container = {
        "name": CONTAINER,
        "image": w.image,
        "command": ["/bin/sh", "-c", w.command],
        "env": _env(w, config),
        "resources": {"limits": resources, "requests": dict(resources)},
    }
    spec = {
        "nodeName": w.node_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": w.grace_seconds,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "tolerations": [{"key": config.gpu_resource, "operator": "Exists"}],
        "containers": [container],
    }
    volume = _volume(config)
    if volume:
        spec["volumes"] = [volume]
        container["volumeMounts"] = [{"name": VOLUME, "mountPath": config.checkpoint_mount}]
    labels = {
        MANAGED_BY: MANAGER,
        POD_ID: str(w.pod_id),
        JOB_ID: str(w.job_id),
        RANK: str(w.rank),
        ATTEMPT: str(w.attempt),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": w.name,
            "namespace": config.namespace,
            "labels": labels,
            "finalizers": [FINALIZER],
        },
        "spec": spec,
    }
