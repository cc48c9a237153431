"""What the controller concludes (pure: no queries, no writes; docs/kubernetes.md).

`gpu_rows`: a Kubernetes node's GPUs as the console's inventory sees them: its allocatable
GPUs, less those that pods the console does not own request, and none free while the node
may not take new work. `plan_pod`: what to do about one worker, from the console's pod and
the Kubernetes Pod (either may be missing). The shell is `kube.controller`.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from kube.objects import Observed, Seen

FOREIGN = "requested by pods the console does not own"


def gpu_rows(
    allocatable: int, foreign: int, held: Iterable[int], blocked: str, gpu_name: str
) -> list[dict]:
    """One row per allocatable GPU (index, healthy, health_reason). The console places
    GPUs by index; Kubernetes' device plugin picks the devices, so an index is a slot. The
    slots the console's live pods hold stay as they are; of the others, the highest
    `foreign` are taken by foreign pods, and none is free while the node is `blocked`."""
    held = {i for i in held if 0 <= i < allocatable}
    others = [i for i in reversed(range(allocatable)) if i not in held]
    taken = set(others[: max(foreign, 0)])
    rows = []
    for index in range(allocatable):
        reason = ""
        if index in taken:
            reason = FOREIGN
        elif blocked and index not in held:
            reason = blocked
        rows.append(
            {
                "index": index,
                "name": gpu_name,
                "healthy": not reason,
                "health_reason": reason,
            }
        )
    return rows


@dataclass(frozen=True)
class ConsolePod:
    """What plan_pod reads of the console's pod."""

    pk: int
    job_id: int
    rank: int
    attempt: int
    status: str  # PodStatus
    stopping: bool  # the console ordered it stopped (desired Stop)
    grace_seconds: int
    live: bool  # Starting, Running or Unknown


class Do(StrEnum):
    CREATE = "create"  # create the Pod (AlreadyExists: done)
    DELETE = "delete"  # delete with the pod's grace (a console stop or preemption)
    START = "start"  # the worker runs: Starting/Unknown → Running
    FOLLOW = "follow"  # read its log
    EXIT = "exit"  # its end, once every log line is stored
    REQUEUE = "requeue"  # the kubelet refused it: the job is placed again
    LOSE = "lose"  # the cluster took it away (eviction, deleted): fault tolerance
    RELEASE = "release"  # drop the finalizer and delete at once: nothing more to read
    WAIT = "wait"


@dataclass(frozen=True)
class Step:
    do: Do
    reason: str = ""
    exit_code: int | None = None
    grace: int = 0


def plan_pod(
    pod: ConsolePod | None,
    api: Observed | None,
    *,
    node_ready: bool,
    logs_done: bool,
    rank_blocked: bool,
) -> list[Step]:
    """The steps for one worker. `node_ready`: its Kubernetes node reports Ready (a NotReady
    node's pod statuses are stale); `logs_done`: the log stream ended after the container
    did; `rank_blocked`: a Pod of another attempt of this rank still exists (a new copy
    waits until the old one is gone: never two copies)."""
    if pod is None or not pod.live:
        return [] if api is None else [Step(Do.RELEASE)]
    if api is None:
        if pod.stopping:
            return [Step(Do.EXIT, "stopped before it was created")]
        if pod.status == "Starting":
            return [Step(Do.WAIT)] if rank_blocked or not node_ready else [Step(Do.CREATE)]
        return [Step(Do.LOSE, "the pod was deleted in Kubernetes")]
    return _plan_existing(pod, api, node_ready=node_ready, logs_done=logs_done)


def _plan_existing(pod: ConsolePod, api: Observed, *, node_ready: bool, logs_done: bool) -> list:
    steps: list[Step] = []
    if api.seen == Seen.REJECTED:
        return [Step(Do.REQUEUE, f"the kubelet refused the pod: {api.error}")]
    if api.seen in (Seen.EXITED, Seen.EVICTED):
        if not logs_done:
            return [Step(Do.FOLLOW)]
        if not pod.stopping and (api.seen == Seen.EVICTED or api.deleting):
            why = api.error or "deleted in Kubernetes"
            return [Step(Do.LOSE, f"ended by the cluster: {why}")]
        return [Step(Do.EXIT, api.error, exit_code=api.exit_code)]
    if api.seen == Seen.RUNNING:
        if node_ready and pod.status in ("Starting", "Unknown"):
            steps.append(Step(Do.START))
        steps.append(Step(Do.FOLLOW))
    if pod.stopping and not api.deleting:
        steps.append(Step(Do.DELETE, grace=pod.grace_seconds))
    return steps or [Step(Do.WAIT)]
