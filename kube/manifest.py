"""The Pod the console creates for one worker (pure; docs/kubernetes.md), and rank 0's
validator Pod (`validator_manifest`, docs/results.md "The validator").

A bare Pod bound to the node the console's `plan()` chose (`nodeName`: Kubernetes 1.20 has
no scheduling gates), `restartPolicy: Never` (a restart is the console's decision: a new
attempt is a new Pod), the job's stop grace, its GPUs as `nvidia.com/gpu` limits (the
device plugin chooses the devices; the console never sets the visible-device variables),
and the worker variables the agent sets (protocol.workerenv) with paths on the checkpoint
volume. A finalizer keeps the Pod until the controller has read its last log lines and
recorded its end.

Workers meet (docs/distributed.md) through a headless Service per job (`service_manifest`,
as JobSet and PyTorchJob do): each Pod's `hostname` is `w<rank>` and its `subdomain` the
Service, so rank r is `w<r>.job-<id>.<namespace>.svc` in DNS whatever its attempt (only one
attempt of a rank is live at a time), and MASTER_ADDR is rank 0's name. Every Pod has its
own network namespace, so the port is the same for every job (`RENDEZVOUS_PORT`).
"""

from dataclasses import dataclass, field
from pathlib import PurePosixPath

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
    VALIDATES,
    VALIDATOR_CONTAINER,
    pod_name,
)
from policy.rendezvous import Meeting, shape_of, worker_env
from protocol import limits, preflight
from protocol.outputs import output_paths

VOLUME = "checkpoints"
RENDEZVOUS_PORT = 29500
DATA_MOUNT = "/data"


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
    # The declared output folder (docs/results.md): the controller promotes into it on the
    # volume (kube.volumes); the worker writes only to its staging folder.
    output_subdir: str = ""
    resume_from: str = ""
    env: dict[str, str] = field(default_factory=dict)
    distributed: dict = field(default_factory=dict)  # Job.distributed (policy.rendezvous)
    data: dict[str, str] = field(default_factory=dict)  # read-only folders: name → folder
    # The job's code: not checked out on Kubernetes; the worker gets CODE_REPO/CODE_REF.
    code_repo: str = ""
    code_ref: str = ""
    gpus_per_worker: int = 0
    # The result's validator (docs/results.md): run by rank 0's validator Pod after its
    # exit 0 (validator_manifest).
    result_validator: str = ""
    # Free space the output needs (docs/results.md, "Before a long run"): checked by the
    # controller on its mount of the volume before the Pod (kube.volumes).
    expected_output_gb: int | None = None
    # The preflight (docs/results.md, "Before a long run"): run where OUTPUT_DIR is (a
    # checkpoint volume) and the attempt does not resume.
    preflight_seconds: int | None = None
    # The data folders' content manifest (docs/results.md, "Run identity"): hashed by the
    # controller before the Pod (kube.hashing).
    hash_inputs: bool = False

    @property
    def name(self) -> str:
        return pod_name(self.job_id, self.rank, self.attempt)


def service_name(job_id: int) -> str:
    return f"job-{job_id}"


def peer_host(job_id: int, rank: int, config: KubeConfig) -> str:
    """Rank `rank`'s DNS name through the job's headless Service."""
    return f"w{rank}.{service_name(job_id)}.{config.namespace}.svc"


def service_manifest(job_id: int, config: KubeConfig) -> dict:
    """The job's headless Service: DNS names for its Pods, ready or not (a worker resolves
    rank 0 before rank 0 listens)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job_id),
            "namespace": config.namespace,
            "labels": {MANAGED_BY: MANAGER, JOB_ID: str(job_id)},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {MANAGED_BY: MANAGER, JOB_ID: str(job_id)},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
        },
    }


def rendezvous_env(w: WorkerFacts, config: KubeConfig) -> dict[str, str]:
    hosts = tuple(peer_host(w.job_id, r, config) for r in range(w.world_size))
    meeting = Meeting(hosts=hosts, port=RENDEZVOUS_PORT, attempt=w.attempt)
    return worker_env(shape_of(w.distributed, w.gpus_per_worker), meeting, w.rank)


def checkpoint_folder(config: KubeConfig, workspace_id: int, job_id: int, subdir: str) -> str:
    """The job's checkpoint folder inside the worker (the same layout as the agent's:
    the workspace's area, then the job's folder)."""
    return f"{config.checkpoint_mount}/ws-{workspace_id}/{subdir or f'job-{job_id}'}"


def progress_path(config: KubeConfig, workspace_id: int, pod_id: int, attempt: int) -> str:
    return f"{config.checkpoint_mount}/ws-{workspace_id}/.progress/pod-{pod_id}-{attempt}.json"


def _env(w: WorkerFacts, config: KubeConfig, run_command: str = "") -> list[dict]:
    """`run_command`: the job's command when the preflight script runs in its place."""
    env = {str(k): str(v) for k, v in w.env.items()}
    env.update(
        {
            "RANK": str(w.rank),
            "WORLD_SIZE": str(w.world_size),
            **rendezvous_env(w, config),  # rank 0's DNS name, torchrun's variables…
            "JOB_ID": str(w.job_id),
            "POD_ID": str(w.pod_id),
            "ATTEMPT": str(w.attempt),
            "GPU_WORKER_ID": w.name,
            "PYTHONUNBUFFERED": "1",
        }
    )
    if w.code_repo:
        env.update(CODE_REPO=w.code_repo, CODE_REF=w.code_ref)
    if _volume(config):
        folder = checkpoint_folder(config, w.workspace_id, w.job_id, w.checkpoint_subdir)
        env["CHECKPOINT_DIR"] = folder
        env["PROGRESS_FILE"] = progress_path(config, w.workspace_id, w.pod_id, w.attempt)
        if w.resume_from:
            env["RESUME_FROM"] = w.resume_from
        # Counted results (docs/results.md): the attempt's staging folder on the volume,
        # promoted by the controller (kube.volumes.promote_units).
        outputs = output_paths(PurePosixPath(folder), w.job_id, w.attempt)
        env["OUTPUT_DIR"] = str(outputs.staging)
        env["ACCEPTED_UNITS_FILE"] = str(outputs.accepted_file)
        for name in w.data:
            env[f"DATA_{name.upper()}"] = f"{DATA_MOUNT}/{name}"
    if run_command:  # docs/results.md, "Before a long run"
        env[preflight.COMMAND_ENV] = run_command
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
    rehearse = bool(w.preflight_seconds) and not w.resume_from and _volume(config) is not None
    command = preflight.wrapped(w.preflight_seconds or 0) if rehearse else w.command
    container = {
        "name": CONTAINER,
        "image": w.image,
        "command": ["/bin/sh", "-c", command],
        "env": _env(w, config, run_command=w.command if rehearse else ""),
        "resources": {"limits": resources, "requests": dict(resources)},
    }
    spec = {
        "nodeName": w.node_name,
        "hostname": f"w{w.rank}",
        "subdomain": service_name(w.job_id),
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
        container["volumeMounts"] = [
            {"name": VOLUME, "mountPath": config.checkpoint_mount},
            # Read-only data: folders of the workspace's area on the same volume.
            *(
                {
                    "name": VOLUME,
                    "mountPath": f"{DATA_MOUNT}/{name}",
                    "subPath": f"ws-{w.workspace_id}/{folder}",
                    "readOnly": True,
                }
                for name, folder in sorted(w.data.items())
            ),
        ]
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


def validator_name(worker: str) -> str:
    """Deterministic: a second create is AlreadyExists (docs/results.md, "The validator")."""
    return f"{worker}-validator"


def validator_manifest(
    w: WorkerFacts, config: KubeConfig, worker_uid: str, result_dir: str
) -> dict | None:
    """Rank 0's validator Pod (docs/results.md, "The validator"): the job's image runs
    `/bin/sh -c <validator>` in the run's result folder (`RESULT_DIR`, inside the volume,
    mounted read-only: enforced by the mount, root or not) with the worker's variables, on
    the worker's node, without GPUs, service-account token or restarts, for at most
    limits.RESULT_VALIDATOR_SECONDS. Owned by the worker Pod (deleted with it). None
    without a checkpoint volume (nothing to validate)."""
    volume = _volume(config)
    if volume is None or not result_dir:
        return None
    env = [e for e in _env(w, config) if e["name"] != "RESULT_DIR"]
    env.append({"name": "RESULT_DIR", "value": result_dir})
    container = {
        "name": VALIDATOR_CONTAINER,
        "image": w.image,
        "command": ["/bin/sh", "-c", w.result_validator],
        "workingDir": result_dir,
        "env": env,
        "volumeMounts": [{"name": VOLUME, "mountPath": config.checkpoint_mount, "readOnly": True}],
    }
    owner = {"apiVersion": "v1", "kind": "Pod", "name": w.name, "uid": worker_uid}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": validator_name(w.name),
            "namespace": config.namespace,
            # No pod-id label: never taken for a worker (kube.objects.is_validator).
            "labels": {MANAGED_BY: MANAGER, VALIDATES: w.name},
            "ownerReferences": [owner] if worker_uid else [],
        },
        "spec": {
            "nodeName": w.node_name,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": limits.RESULT_VALIDATOR_SECONDS,
            "terminationGracePeriodSeconds": 5,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "tolerations": [{"key": config.gpu_resource, "operator": "Exists"}],
            "volumes": [volume],
            "containers": [container],
        },
    }
