"""What the console concludes from an agent's reports (pure: no queries, no writes).

The inputs are plain values, protocol models and pod rows typed as `PodRow`: only the
attributes named there are read. The heartbeat passes the ORM pods it already loaded
(building a copy of each would cost more than it proves); tests pass any object with those
attributes.

`judge_report`: what one worker report means for the pod it names (start, exit, touch,
ignore, fence). `desired_state`: what a node should run and stop; `desired_version`: a
token of it that changes when it does. `new_log_lines`: the part of a log batch not
stored yet. The shell that reads and writes is `agents.actions`.
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from jobs.models import PodDesired
from policy.statuses import ACTIVE_POD_STATUSES, PodStatus
from protocol.agent import StopOrder, WorkerReport


class PodRow(Protocol):
    """What these functions read of a pod."""

    pk: int
    job_id: int
    rank: int
    node_id: int | None
    attempt: int
    status: str
    desired: str
    stop_grace_seconds: int
    stop_reason: str


class Verdict(StrEnum):
    START = "start"  # Starting/Unknown → Running
    EXIT = "exit"  # live pod → final status
    TOUCH = "touch"  # still running as known: just note the report time
    IGNORE = "ignore"  # nothing to do (e.g. a re-sent exit of a final pod)
    FENCE = "fence"  # a worker that must not run: order it stopped


NOT_PLACED_HERE = "pod is not placed on this node"


@dataclass(frozen=True)
class PodFacts:
    node_id: int | None
    attempt: int
    status: str


def judge_report(node_id: int, pod: PodFacts | None, report: WorkerReport) -> tuple[Verdict, str]:
    """What a worker report means for the pod it names (pure). A node may only speak for its
    own pods and their current attempt; anything else it still runs is fenced."""
    running = report.state == "running"
    if pod is None:
        return (Verdict.FENCE, "unknown pod") if running else (Verdict.IGNORE, "")
    if pod.node_id != node_id:
        return (
            (Verdict.FENCE, NOT_PLACED_HERE)
            if running
            else (
                Verdict.IGNORE,
                "",
            )
        )
    if report.attempt != pod.attempt:
        return (
            (Verdict.FENCE, f"stale attempt {report.attempt}")
            if running
            else (
                Verdict.IGNORE,
                "",
            )
        )
    active = pod.status in ACTIVE_POD_STATUSES
    if running:
        if pod.status in (PodStatus.STARTING, PodStatus.UNKNOWN):
            return Verdict.START, ""
        if pod.status == PodStatus.RUNNING:
            return Verdict.TOUCH, ""
        return Verdict.FENCE, f"the worker is already {pod.status}"
    return (Verdict.EXIT, "") if active else (Verdict.IGNORE, "")


def desired_state(
    node_id: int, pods: Iterable[PodRow], fenced: dict[int, StopOrder]
) -> tuple[list[PodRow], list[StopOrder]]:
    """The pods this node should run and the workers it should stop."""
    run: list[PodRow] = []
    stop: dict[int, StopOrder] = dict(fenced)
    for pod in pods:
        if pod.node_id != node_id or pod.status not in ACTIVE_POD_STATUSES:
            continue
        if pod.desired == PodDesired.RUN:
            run.append(pod)
        else:
            stop[pod.pk] = StopOrder(
                pod_id=pod.pk,
                attempt=pod.attempt,
                grace_seconds=pod.stop_grace_seconds,
                reason=pod.stop_reason,
            )
    run.sort(key=lambda p: (p.job_id, p.rank))
    return run, [stop[k] for k in sorted(stop)]


def desired_version(live: int, id_sum: int, stopping: int) -> str:
    """A token of a node's desired state (pure): its live pods' count and id sum, and how
    many of them are asked to stop. A pod placed (new id), ended or asked to stop changes
    it; the same three numbers come from one aggregate query (agents.wake)."""
    return f"{live}.{id_sum}.{stopping}"


def desired_version_of(node_id: int, pods: Iterable[PodRow]) -> str:
    """`desired_version` over the rows a heartbeat loaded."""
    live = [p for p in pods if p.node_id == node_id and p.status in ACTIVE_POD_STATUSES]
    stopping = sum(1 for p in live if p.desired != PodDesired.RUN)
    return desired_version(len(live), sum(p.pk for p in live), stopping)


def report_digest(facts: dict, gpus: Sequence[dict]) -> str:
    """A digest of what a heartbeat reports about the node itself (pure): equal digests,
    nothing to write but the time it was seen."""
    text = json.dumps([facts, list(gpus)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def new_log_lines(next_seq: int, first_seq: int, lines: Sequence[str]) -> Sequence[str]:
    """The part of a batch the console does not have yet (pure). A batch that starts past
    `next_seq` would leave a gap: none of it is taken, and the ack tells the agent where to
    resume. A re-sent batch contributes only its unseen tail."""
    if first_seq > next_seq:
        return ()
    return lines[next_seq - first_seq :]


def not_ours_reason(node_id: int, pod: PodRow | None, attempt: int) -> str:
    """Why a node may not speak for this pod in this attempt ("" when it may). A node's
    items (reports, progress, checkpoints, log lines) count only for the pods placed on it
    in their current attempt (docs/agent-protocol.md, "Only a node's own pods")."""
    if pod is None:
        return "unknown pod"
    if pod.node_id != node_id:
        return NOT_PLACED_HERE
    if pod.attempt != attempt:
        return f"stale attempt {attempt}; the pod is attempt {pod.attempt}"
    return ""


def is_foreign(node_id: int, pod: PodRow | None) -> bool:
    """A pod that exists and is placed elsewhere (or nowhere): naming it is what the audit
    log records; an unknown pod or a stale attempt of the node's own is a race, not that."""
    return pod is not None and pod.node_id != node_id
