"""What the controller concludes (pure: no queries, no writes; docs/kubernetes.md).

`gpu_rows`: a Kubernetes node's GPUs as the console's inventory sees them: its allocatable
GPUs, less those that pods the console does not own request, and none free while the node
may not take new work. `plan_pod`: what to do about one worker, from the console's pod and
the Kubernetes Pod (either may be missing), and rank 0's validator (`plan_validation`,
docs/results.md "The validator"). `image_refusal`: whether a resumed worker's image
changed. The shell is `kube.controller`.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kube.objects import Observed, Seen, ValidatorSeen
from protocol import limits
from protocol.agent import ResumeIdentity, RunFacts
from protocol.units import resume_refusal

FOREIGN = "requested by pods the console does not own"
# Why a validator did not run (docs/results.md, "The validator"), as the agent says it.
VALIDATOR_GONE = "the validator's Pod disappeared"
VALIDATOR_TIMED_OUT = f"timed out after {limits.RESULT_VALIDATOR_SECONDS} s"


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
    validates: bool = False  # rank 0 of a job with a result validator


class Do(StrEnum):
    CREATE = "create"  # create the Pod (AlreadyExists: done)
    DELETE = "delete"  # delete with the pod's grace (a console stop or preemption)
    START = "start"  # the worker runs: Starting/Unknown → Running
    FOLLOW = "follow"  # read its log
    EXIT = "exit"  # its end, once every log line is stored
    REQUEUE = "requeue"  # the kubelet refused it: the job is placed again
    LOSE = "lose"  # the cluster took it away (eviction, deleted): fault tolerance
    RELEASE = "release"  # drop the finalizer and delete at once: nothing more to read
    VALIDATE = "validate"  # rank 0 exited 0: promote the units, create its validator Pod
    JUDGE = "judge"  # the validator ended: rank 0's exit 0 applied with its outcome
    WAIT = "wait"


@dataclass(frozen=True)
class Step:
    do: Do
    reason: str = ""
    exit_code: int | None = None
    grace: int = 0
    read_log: bool = False  # JUDGE: the validator's last lines are its report


def image_digest(image_id: str) -> str:
    """The digest a kubelet's `imageID` names (`docker.io/library/x@sha256:…`,
    `docker-pullable://x@sha256:…` → `sha256:…`): two runtimes' prefixes differ."""
    return image_id.rsplit("@", 1)[-1]


def image_refusal(expected: ResumeIdentity | None, image_id: str) -> str:
    """Why a worker whose job carries accepted units may not go on with the image its
    kubelet ran (docs/results.md, "Resume without duplicates"), or "". Only ids of one kind
    are compared: registry digests (`…@sha256:`) with each other, an engine's image id
    (`sha256:…`, the docker runtime's or a kubelet's for an image never pushed) with
    another; a value either side lacks is not compared (protocol.units.resume_refusal)."""
    if expected is None or not image_id or not expected.image_digest:
        return ""
    if ("@" in image_id) != ("@" in expected.image_digest):
        return ""
    run = expected.model_copy(update={"image_digest": image_digest(expected.image_digest)})
    return resume_refusal(run, RunFacts(image_digest=image_digest(image_id)))


def plan_validation(
    made: bool, validator: ValidatorSeen | None, now: datetime | None
) -> list[Step]:
    """Rank 0 exited 0 and its job has a validator: its exit waits for the validator Pod.
    `made`: the worker Pod carries the mark that its validator was created (one that is
    gone since did not run). Past its deadline (the kubelet's `activeDeadlineSeconds`, or
    the console's own bound when no kubelet says so) it counts as not run."""
    if validator is None:
        return [Step(Do.JUDGE, VALIDATOR_GONE)] if made else [Step(Do.VALIDATE)]
    if not validator.ended:
        bound = limits.RESULT_VALIDATOR_SECONDS + limits.KUBE_VALIDATOR_GRACE_SECONDS
        age = (now - validator.created_at).total_seconds() if now and validator.created_at else 0
        if age > bound:
            return [Step(Do.JUDGE, VALIDATOR_TIMED_OUT, read_log=True)]
        return [Step(Do.WAIT)]
    if validator.timed_out:
        return [Step(Do.JUDGE, VALIDATOR_TIMED_OUT, read_log=True)]
    if validator.exit_code is None:
        return [Step(Do.JUDGE, validator.error or "the validator's Pod failed", read_log=True)]
    return [Step(Do.JUDGE, exit_code=validator.exit_code, read_log=True)]


def plan_pod(
    pod: ConsolePod | None,
    api: Observed | None,
    *,
    node_ready: bool,
    logs_done: bool,
    rank_blocked: bool,
    validator: ValidatorSeen | None = None,
    now: datetime | None = None,
) -> list[Step]:
    """The steps for one worker. `node_ready`: its Kubernetes node reports Ready (a NotReady
    node's pod statuses are stale); `logs_done`: the log stream ended after the container
    did; `rank_blocked`: a Pod of another attempt of this rank still exists (a new copy
    waits until the old one is gone: never two copies); `validator`: the validator Pod of
    this worker, if any."""
    if pod is None or not pod.live:
        return [] if api is None else [Step(Do.RELEASE)]
    if api is None:
        if pod.stopping:
            return [Step(Do.EXIT, "stopped before it was created")]
        if pod.status == "Starting":
            return [Step(Do.WAIT)] if rank_blocked or not node_ready else [Step(Do.CREATE)]
        return [Step(Do.LOSE, "the pod was deleted in Kubernetes")]
    steps = _plan_existing(pod, api, node_ready=node_ready, logs_done=logs_done)
    if steps[0].do == Do.EXIT and pod.validates and api.exit_code == 0 and not pod.stopping:
        return plan_validation(api.validator_made, validator, now)
    return steps


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
