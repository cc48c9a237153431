"""What the console does with agent requests: register, heartbeat, logs (DESIGN §7).

Pure decisions (`judge_report`, `desired_state`, `new_log_lines`) over plain values; the shell
functions around them read and write the database with compare-and-set updates:

- node facts: a plain UPDATE by id (last writer wins; every heartbeat carries the full facts),
- pod statuses: `jobs.podsync.apply_worker_state` (compare-and-set on the pod's live status),
- log sequences: `UPDATE pod SET log_next_seq=new WHERE id=… AND log_next_seq=old` plus the
  LogChunk insert in one transaction, backed by the unique (pod, seq_start) constraint.

All times are the console's receive time; the agent's clock is never trusted (DESIGN §9).
"""

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from pydantic import ValidationError

from agents.auth import claim_bootstrap_token
from agents.models import GpuDevice, Node, NodeState, WorkerGpuSample
from agents.protocol import (
    GpuReport,
    Heartbeat,
    HeartbeatReply,
    LogAck,
    LogBatch,
    NodeFacts,
    RegisterRequest,
    StopOrder,
    WorkerReport,
    WorkerSpec,
)
from agents.tokens import NODE_KIND
from console.tokens import make_token
from jobs.faulttolerance.reports import (
    log_activity,
    log_progress,
    store_worker_extras,
    worker_ft_fields,
)
from jobs.models import LogChunk, Pod, PodDesired
from jobs.podsync import apply_worker_state
from jobs.statuses import ACTIVE_POD_STATUSES, PodStatus

log = logging.getLogger(__name__)

MISSING_GPU = "not reported by the agent (missing from NVML)"
_GPU_FIELDS = [
    "uuid",
    "name",
    "memory_total_mb",
    "memory_used_mb",
    "utilization",
    "temperature",
    "power_watts",
    "ecc_errors",
    "healthy",
    "health_reason",
    "updated_at",
]


def heartbeat_interval() -> float:
    return float(settings.AGENT_HEARTBEAT_INTERVAL)


def _deadline(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.NODE_NOT_READY_AFTER)


def _fact_fields(facts: NodeFacts) -> dict:
    return {
        "agent_version": facts.agent_version,
        "runtime": facts.runtime,
        "gpu_type": facts.gpu_type,
        "gpus": len(facts.gpus),
        "cpus": facts.cpus,
        "memory_gb": facts.memory_gb,
    }


def upsert_gpus(node_id: int, gpus: Sequence[GpuReport], *, known_count: int | None) -> None:
    """One bulk upsert for all reported devices; devices that vanished are marked unhealthy
    (kept, not deleted, so the history and the scheduler see why capacity shrank). The
    second query runs only when the device count changed."""
    GpuDevice.objects.bulk_create(
        [GpuDevice(node_id=node_id, **g.model_dump()) for g in gpus],
        update_conflicts=True,
        unique_fields=["node", "index"],
        update_fields=_GPU_FIELDS,
    )
    if known_count != len(gpus):
        GpuDevice.objects.filter(node_id=node_id).exclude(index__in=[g.index for g in gpus]).update(
            healthy=False, health_reason=MISSING_GPU, utilization=0, memory_used_mb=0
        )


# --- register ----------------------------------------------------------------------------


def register_node(bootstrap_plain: str, req: RegisterRequest, now: datetime) -> tuple[Node, str]:
    """Claim the bootstrap token and create (or take over) the node by name, in one
    transaction. Returns the node and its new plain token (stored only as prefix + digest).

    Re-registering an existing name replaces its token: the bootstrap token is the admin's
    consent, and the old agent is locked out at its next request."""
    new = make_token(NODE_KIND)
    with transaction.atomic():
        claim_bootstrap_token(bootstrap_plain, now)
        node, _ = Node.objects.update_or_create(
            name=req.name,
            defaults={
                **_fact_fields(req.facts),
                "resource_type": req.facts.resource_type,
                "state": NodeState.READY,
                "last_heartbeat_at": now,
                "heartbeat_deadline": _deadline(now),
                "token_prefix": new.prefix,
                "token_digest": new.digest,
                "token_revoked_at": None,
            },
        )
        upsert_gpus(node.pk, req.facts.gpus, known_count=None)
    log.info("node %s registered (id %s, %d GPUs)", node.name, node.pk, len(req.facts.gpus))
    return node, new.plain


# --- heartbeat ---------------------------------------------------------------------------


class Verdict(StrEnum):
    START = "start"  # Starting/Unknown → Running
    EXIT = "exit"  # live pod → final status
    TOUCH = "touch"  # still running as known: just note the report time
    IGNORE = "ignore"  # nothing to do (e.g. a re-sent exit of a final pod)
    FENCE = "fence"  # a worker that must not run: order it stopped


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
            (Verdict.FENCE, "pod is not placed on this node")
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


def _pod_facts(pod: Pod) -> PodFacts:
    return PodFacts(node_id=pod.node_id, attempt=pod.attempt, status=pod.status)


def _load_pods(node_id: int, reported: Iterable[int]) -> dict[int, Pod]:
    query = Q(node_id=node_id, status__in=list(ACTIVE_POD_STATUSES)) | Q(pk__in=list(reported))
    return {p.pk: p for p in Pod.objects.filter(query).select_related("job")}


def worker_spec(pod: Pod) -> WorkerSpec:
    job = pod.job
    return WorkerSpec(
        pod_id=pod.pk,
        job_id=job.pk,
        attempt=pod.attempt,
        rank=pod.rank,
        world_size=job.workers,
        image=job.image,
        command=job.command,
        env={str(k): str(v) for k, v in (job.env or {}).items()},
        gpu_indices=list(pod.gpu_indices or []),
        cpus=pod.cpus,
        memory_gb=pod.memory_gb,
        log_next_seq=pod.log_next_seq,
        **worker_ft_fields(pod),
    )


def desired_state(
    node_id: int, pods: Iterable[Pod], fenced: dict[int, StopOrder]
) -> tuple[list[Pod], list[StopOrder]]:
    """The pods this node should run and the workers it should stop (pure over rows)."""
    run: list[Pod] = []
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


def _apply_report(node: Node, pod: Pod, report: WorkerReport, now: datetime) -> bool:
    """One worker's change, in its own transaction. A report that cannot be applied is
    logged and must not fail the heartbeat (one bad row would take the whole node NotReady).
    It is not lost: the pod stays live, so the reply still lists it, and an agent that sees
    a pod it has finished in the desired state reports its exit again."""
    try:
        return apply_worker_state(
            pod,
            running=report.state == "running",
            exit_code=report.exit_code,
            error=report.error,
            container_id=report.container_id,
            now=now,
        )
    except Exception:
        log.exception("node %s: applying the report on pod %s failed", node.name, pod.pk)
        return False


def record_heartbeat(node: Node, hb: Heartbeat, now: datetime) -> HeartbeatReply:
    """Note the node alive and its facts, apply its worker reports, reply with the desired
    state. Queries: a constant few plus a constant per worker whose state changed."""
    Node.objects.filter(pk=node.pk).update(
        **_fact_fields(hb.facts),
        state=NodeState.READY,
        last_heartbeat_at=now,
        heartbeat_deadline=_deadline(now),
    )
    upsert_gpus(node.pk, hb.facts.gpus, known_count=node.gpus)

    pods = _load_pods(node.pk, (w.pod_id for w in hb.workers))
    # Progress and checkpoints first: a checkpoint saved on SIGTERM must be known before
    # the exit reported in this same heartbeat restarts the job from it.
    store_worker_extras(pods, hb.workers, now)
    changed = False
    touched: list[int] = []
    fenced: dict[int, StopOrder] = {}
    samples: list[WorkerGpuSample] = []
    for report in hb.workers:
        pod = pods.get(report.pod_id)
        verdict, why = judge_report(node.pk, _pod_facts(pod) if pod else None, report)
        if report.gpu is not None and verdict in (Verdict.START, Verdict.TOUCH):
            samples.append(WorkerGpuSample(pod_id=pod.pk, at=now, **report.gpu.model_dump()))
        if verdict in (Verdict.START, Verdict.EXIT):
            changed |= _apply_report(node, pod, report, now)
        elif verdict == Verdict.TOUCH:
            touched.append(pod.pk)
        elif verdict == Verdict.FENCE:
            log.warning("node %s: fencing pod %s: %s", node.name, report.pod_id, why)
            fenced[report.pod_id] = StopOrder(
                pod_id=report.pod_id,
                attempt=report.attempt,
                grace_seconds=settings.DEFAULT_STOP_GRACE,
                reason=f"stale worker: {why}",
            )
    if touched:
        Pod.objects.filter(pk__in=touched).update(last_report_at=now)
    if samples:  # only this node's current workers: one insert for all of them
        WorkerGpuSample.objects.bulk_create(samples)
    if changed:  # a report may have ended the job and ordered its other workers stopped
        pods = _load_pods(node.pk, ())

    run_pods, stop = desired_state(node.pk, pods.values(), fenced)
    run: list[WorkerSpec] = []
    for pod in run_pods:
        try:
            run.append(worker_spec(pod))
        except ValidationError as exc:
            # The job's stored spec cannot be sent (e.g. a bad env name): fail the worker
            # with the reason instead of breaking the whole node's heartbeat.
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            apply_worker_state(
                pod, running=False, error=f"invalid worker spec: {where}: {first['msg']}", now=now
            )
    return HeartbeatReply(heartbeat_interval=heartbeat_interval(), run=run, stop=stop)


# --- logs --------------------------------------------------------------------------------


def new_log_lines(next_seq: int, first_seq: int, lines: Sequence[str]) -> Sequence[str]:
    """The part of a batch the console does not have yet (pure). A batch that starts past
    `next_seq` would leave a gap: none of it is taken, and the ack tells the agent where to
    resume. A re-sent batch contributes only its unseen tail."""
    if first_seq > next_seq:
        return ()
    return lines[next_seq - first_seq :]


def _reject_reason(node_id: int, pod: Pod | None, attempt: int) -> str:
    if pod is None:
        return "unknown pod"
    if pod.node_id != node_id:
        return "pod is not placed on this node"
    if pod.attempt != attempt:
        return f"stale attempt {attempt}; the pod is attempt {pod.attempt}"
    return ""


def store_logs(node: Node, batch: LogBatch, now: datetime) -> LogAck:
    """Store each sequence number once and acknowledge the next expected one per pod."""
    ids = {b.pod_id for b in batch.batches}
    pods = {p.pk: p for p in Pod.objects.filter(pk__in=ids).select_related("job")}
    acks: dict[int, int] = {}
    rejected: dict[int, str] = {}
    for b in batch.batches:
        pod = pods.get(b.pod_id)
        reason = _reject_reason(node.pk, pod, b.attempt)
        if reason:
            rejected[b.pod_id] = reason
            continue
        current = acks.get(pod.pk, pod.log_next_seq)
        fresh = new_log_lines(current, b.first_seq, b.lines)
        if fresh:
            end = current + len(fresh)
            # Hang detection without progress reports: remember recent distinct lines.
            activity, distinct = log_activity(pod, fresh)
            with transaction.atomic():
                claimed = Pod.objects.filter(pk=pod.pk, log_next_seq=current).update(
                    log_next_seq=end, **activity
                )
                if claimed:
                    LogChunk.objects.create(
                        pod_id=pod.pk,
                        attempt=pod.attempt,
                        seq_start=current,
                        seq_end=end - 1,
                        text="".join(f"{line}\n" for line in fresh),
                    )
            if claimed:
                current = end
                pod.recent_line_hashes = activity.get("recent_line_hashes", pod.recent_line_hashes)
                if distinct:
                    log_progress(pod, now)
            else:  # a concurrent request stored these first; ack what the row says now
                current = Pod.objects.values_list("log_next_seq", flat=True).get(pk=pod.pk)
        acks[pod.pk] = current
    return LogAck(acks=acks, rejected=rejected)
