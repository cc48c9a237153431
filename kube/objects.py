"""Reading and building Kubernetes objects (pure: plain dicts in, dataclasses or dicts out).

What the controller reads of a Node (`parse_node`), of a Pod (`observe`), how much GPU a
pod the console does not own requests (`gpu_request`), and the Pod the console creates for
one of its workers (`pod_manifest`). docs/kubernetes.md.
"""

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from kube.config import KubeConfig

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpu-console"
OWN_SELECTOR = f"{MANAGED_BY}={MANAGER}"
POD_ID = "gpu-console.io/pod-id"
JOB_ID = "gpu-console.io/job-id"
RANK = "gpu-console.io/rank"
ATTEMPT = "gpu-console.io/attempt"
FINALIZER = "gpu-console.io/logs"
CONTAINER = "worker"
# The result's validator (docs/results.md, "The validator"): a Pod of its own, labelled with
# the worker Pod it validates (never a worker: it has no pod-id label), and a mark on the
# worker Pod once it was created, so one that vanished is told from one not made yet.
VALIDATES = "gpu-console.io/validates"
VALIDATOR_MARK = "gpu-console.io/validator"
VALIDATOR_CONTAINER = "validator"


def pod_name(job_id: int, rank: int, attempt: int) -> str:
    """Deterministic: creating it twice is AlreadyExists, which means done."""
    return f"job-{job_id}-w{rank}-a{attempt}"


_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "m": 10**-3, "": 1,
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|m)?$")


def quantity(text: object) -> float:
    """A resource quantity ("16", "15500m", "131072Ki", "8") as a number; 0 if unreadable."""
    match = _QUANTITY.match(str(text or "").strip())
    if not match:
        return 0.0
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


# -- nodes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeNode:
    name: str
    ready: bool
    blocked: str  # why nothing new may be placed here ("" : schedulable)
    gpus: int
    cpus: int
    memory_gb: int
    gpu_type: str


def _condition(obj: dict, kind: str) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond.get("status", "Unknown")
    return "Unknown"


def parse_node(obj: dict, config: KubeConfig) -> KubeNode:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = _condition(obj, "Ready") == "True"
    taints = [
        t.get("key", "")
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") != config.gpu_resource
    ]
    blocked = ""
    if not ready:
        blocked = "NotReady in Kubernetes"
    elif spec.get("unschedulable"):
        blocked = "cordoned in Kubernetes (unschedulable)"
    elif taints:
        blocked = f"tainted in Kubernetes ({', '.join(sorted(taints))})"
    labels = meta.get("labels") or {}
    return KubeNode(
        name=meta.get("name", ""),
        ready=ready,
        blocked=blocked,
        gpus=int(quantity(allocatable.get(config.gpu_resource))),
        cpus=int(quantity(allocatable.get("cpu"))),
        memory_gb=int(quantity(allocatable.get("memory")) // 2**30),
        gpu_type=labels.get("nvidia.com/gpu.product") or config.gpu_type,
    )


# -- pods -----------------------------------------------------------------------------------


def is_own(obj: dict, config: KubeConfig) -> bool:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return labels.get(MANAGED_BY) == MANAGER and meta.get("namespace") == config.namespace


def gpu_request(obj: dict, resource: str) -> int:
    """GPUs a pod holds on its node while it is not finished (the larger of its containers'
    sum and its largest init container, as the kubelet counts)."""
    spec = obj.get("spec") or {}

    def of(container: dict) -> int:
        res = container.get("resources") or {}
        wanted = (res.get("limits") or {}).get(resource) or (res.get("requests") or {}).get(
            resource
        )
        return int(quantity(wanted))

    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def is_finished(obj: dict) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Seen(StrEnum):
    PENDING = "pending"  # accepted, not running yet
    RUNNING = "running"
    EXITED = "exited"  # the container ended (the pod is Succeeded or Failed)
    REJECTED = "rejected"  # the kubelet refused to admit it (OutOf…)
    EVICTED = "evicted"  # the cluster ended it: eviction, node pressure


@dataclass(frozen=True)
class Observed:
    name: str
    pod_id: int | None
    attempt: int | None
    job_id: int | None
    rank: int | None
    node_name: str
    seen: Seen
    deleting: bool = False  # a deletion is under way (by us or by the cluster)
    exit_code: int | None = None
    error: str = ""
    finalizers: tuple[str, ...] = field(default_factory=tuple)
    resource_version: str = ""
    # The image the kubelet ran (`imageID`, e.g. `docker.io/library/x@sha256:…`): known
    # once the container started; the run identity's image digest (docs/results.md).
    image_id: str = ""
    uid: str = ""
    validator_made: bool = False  # VALIDATOR_MARK: its validator Pod was created


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _container(status: dict, name: str = CONTAINER) -> dict:
    for c in status.get("containerStatuses") or []:
        if c.get("name") == name:
            return c
    return {}


def observe(obj: dict) -> Observed:
    """What a Pod's status says about its worker."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    phase, reason = status.get("phase", ""), status.get("reason") or ""
    container = _container(status)
    state = container.get("state") or {}
    terminated = state.get("terminated")
    exit_code, error = None, ""
    if phase == "Failed" and reason.startswith("OutOf"):
        seen, error = Seen.REJECTED, f"{reason}: {status.get('message', '')}".rstrip(": ")
    elif phase == "Failed" and reason in ("Evicted", "Shutdown", "NodeLost", "Terminated"):
        seen, error = Seen.EVICTED, f"{reason}: {status.get('message', '')}".rstrip(": ")
    elif phase in ("Succeeded", "Failed"):
        seen = Seen.EXITED
        if terminated:
            exit_code = _int(terminated.get("exitCode"))
            error = terminated.get("message") or terminated.get("reason") or ""
        elif phase == "Succeeded":
            exit_code = 0
        else:
            error = status.get("message") or reason or "the pod failed"
    elif phase == "Running" or "running" in state:
        seen = Seen.RUNNING
    else:
        seen = Seen.PENDING
    return Observed(
        name=meta.get("name", ""),
        pod_id=_int(labels.get(POD_ID)),
        attempt=_int(labels.get(ATTEMPT)),
        job_id=_int(labels.get(JOB_ID)),
        rank=_int(labels.get(RANK)),
        node_name=(obj.get("spec") or {}).get("nodeName", ""),
        seen=seen,
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=exit_code,
        error=error,
        finalizers=tuple(meta.get("finalizers") or ()),
        resource_version=meta.get("resourceVersion", ""),
        image_id=str(container.get("imageID") or "")[:200],
        uid=meta.get("uid", ""),
        validator_made=VALIDATOR_MARK in (meta.get("annotations") or {}),
    )


# -- validators -----------------------------------------------------------------------------


def is_validator(obj: dict) -> bool:
    return VALIDATES in ((obj.get("metadata") or {}).get("labels") or {})


@dataclass(frozen=True)
class ValidatorSeen:
    """What a validator Pod's status says (kube.decisions.plan_validation reads it)."""

    name: str
    worker: str  # the worker Pod it validates
    ended: bool  # Succeeded or Failed
    exit_code: int | None = None  # its container's, once terminated
    timed_out: bool = False  # past activeDeadlineSeconds
    error: str = ""  # why it failed without an exit code
    created_at: datetime | None = None


def observe_validator(obj: dict) -> ValidatorSeen:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    phase, reason = status.get("phase", ""), status.get("reason") or ""
    terminated = (_container(status, VALIDATOR_CONTAINER).get("state") or {}).get("terminated")
    timed_out = reason == "DeadlineExceeded"
    exit_code = None if timed_out or not terminated else _int(terminated.get("exitCode"))
    return ValidatorSeen(
        name=meta.get("name", ""),
        worker=(meta.get("labels") or {}).get(VALIDATES, ""),
        ended=phase in ("Succeeded", "Failed"),
        exit_code=exit_code,
        timed_out=timed_out,
        error=f"{reason}: {status.get('message', '')}".strip(": ") if phase == "Failed" else "",
        created_at=_timestamp(meta.get("creationTimestamp")),
    )


def _timestamp(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
