"""What the console does with agent requests: register, heartbeat, logs (DESIGN §7).

The shell around the pure decisions of `agents.decisions`. Each write goes through the
actions of the app that owns the rows:

- node facts and GPUs: `cluster.actions` (a plain UPDATE by id: last writer wins; every
  heartbeat carries the full facts),
- pod statuses: `jobs.actions.workers.apply_worker_state` (compare-and-set on the pod's
  live status),
- log lines: `jobs.actions.logs.append_log_lines` (compare-and-set on the pod's next
  sequence number, plus the chunk, in one transaction).

All times are the console's receive time; the agent's clock is never trusted (DESIGN §9).
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from accounts.tokens import make_token, matches, split_prefix
from agents.auth import BOOTSTRAP_KIND, NODE_KIND, AgentApiError
from agents.decisions import (
    PodFacts,
    Verdict,
    desired_state,
    judge_report,
    log_reject_reason,
    new_log_lines,
)
from agents.models import BootstrapToken
from cluster.actions import (
    health_marks_to_clear,
    record_node_alive,
    save_registration,
    upsert_gpus,
)
from cluster.models import Node, NodeState
from jobs.actions.logs import append_log_lines
from jobs.actions.progress import store_worker_extras, worker_ft_fields
from jobs.actions.workers import apply_worker_state, note_reports, record_gpu_samples
from jobs.models import Pod
from jobs.statuses import ACTIVE_POD_STATUSES
from protocol.agent import (
    ClearHealthMark,
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

log = logging.getLogger(__name__)


def heartbeat_interval() -> float:
    return float(settings.AGENT_HEARTBEAT_INTERVAL)


def _deadline(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.NODE_NOT_READY_AFTER)


def _gpu_rows(facts: NodeFacts) -> list[dict]:
    return [g.model_dump() for g in facts.gpus]


def _fact_fields(facts: NodeFacts) -> dict:
    return {
        "agent_version": facts.agent_version,
        "runtime": facts.runtime,
        "gpu_type": facts.gpu_type,
        "gpus": len(facts.gpus),
        "cpus": facts.cpus,
        "memory_gb": facts.memory_gb,
    }


# --- bootstrap tokens ---------------------------------------------------------------------


def issue_bootstrap_token(
    user,
    note: str = "",
    single_use: bool = True,
    ttl: timedelta | int | None = None,
    *,
    now: datetime | None = None,
) -> tuple[BootstrapToken, str]:
    """Create a bootstrap token; returns the row and the plain token (show it once).

    `ttl` is a timedelta or seconds; by default settings.BOOTSTRAP_TOKEN_TTL.
    """
    if ttl is None:
        ttl = timedelta(seconds=settings.BOOTSTRAP_TOKEN_TTL)
    elif isinstance(ttl, int):
        ttl = timedelta(seconds=ttl)
    if ttl <= timedelta(0):
        raise ValueError("a bootstrap token needs a positive lifetime")
    now = now or timezone.now()
    new = make_token(BOOTSTRAP_KIND)
    row = BootstrapToken.objects.create(
        note=note[:200],
        prefix=new.prefix,
        digest=new.digest,
        created_by=user,
        expires_at=now + ttl,
        single_use=single_use,
    )
    return row, new.plain


def claim_bootstrap_token(plain: str, now: datetime) -> BootstrapToken:
    """Check a bootstrap token and, if it is single-use, mark it used.

    The claim is a compare-and-set, `UPDATE … SET used_at=now WHERE id=… AND used_at IS NULL
    AND revoked_at IS NULL AND expires_at > now`: of two agents racing with one single-use
    token exactly one UPDATE matches a row. Call it inside the registration transaction so
    a registration that fails afterwards leaves the token unused.
    """
    prefix = split_prefix(plain, BOOTSTRAP_KIND)
    if prefix is None:
        raise AgentApiError(401, "malformed_token", "not a bootstrap token")
    token = BootstrapToken.objects.filter(prefix=prefix).first()
    if token is None or not matches(plain, token.digest):
        raise AgentApiError(401, "invalid_token", "unknown bootstrap token")
    usable = BootstrapToken.objects.filter(pk=token.pk, revoked_at__isnull=True, expires_at__gt=now)
    if token.single_use:
        claimed = usable.filter(used_at__isnull=True).update(used_at=now)
    else:
        # Reusable tokens record their first use only; the update still checks validity.
        claimed = usable.update(used_at=token.used_at or now)
    if claimed:
        return token
    token.refresh_from_db()
    if token.revoked_at is not None:
        raise AgentApiError(403, "token_revoked", "this bootstrap token was revoked")
    if token.expires_at <= now:
        raise AgentApiError(403, "token_expired", "this bootstrap token has expired")
    raise AgentApiError(403, "token_used", "this single-use bootstrap token was already used")


def revoke_bootstrap_tokens(tokens, now: datetime) -> int:
    """Revoke the live bootstrap tokens of a queryset; returns how many were revoked."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=now)


# --- register ----------------------------------------------------------------------------


def register_node(bootstrap_plain: str, req: RegisterRequest, now: datetime) -> tuple[Node, str]:
    """Claim the bootstrap token and create (or take over) the node by name, in one
    transaction. Returns the node and its new plain token (stored only as prefix + digest).

    Re-registering an existing name replaces its token: the bootstrap token is the admin's
    consent, and the old agent is locked out at its next request."""
    new = make_token(NODE_KIND)
    with transaction.atomic():
        claim_bootstrap_token(bootstrap_plain, now)
        node = save_registration(
            req.name,
            {
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
        upsert_gpus(node.pk, _gpu_rows(req.facts), known_count=None)
    log.info("node %s registered (id %s, %d GPUs)", node.name, node.pk, len(req.facts.gpus))
    return node, new.plain


# --- heartbeat ---------------------------------------------------------------------------


def _pod_facts(pod: Pod) -> PodFacts:
    return PodFacts(node_id=pod.node_id, attempt=pod.attempt, status=pod.status)


def _load_pods(node_id: int, reported: Iterable[int]) -> dict[int, Pod]:
    query = Q(node_id=node_id, status__in=list(ACTIVE_POD_STATUSES)) | Q(pk__in=list(reported))
    return {p.pk: p for p in Pod.objects.filter(query).select_related("job")}


def worker_spec(pod: Pod) -> WorkerSpec:
    job = pod.job
    indices = list(pod.gpu_indices or [])
    uuids = list(pod.gpu_uuids or [])
    return WorkerSpec(
        pod_id=pod.pk,
        job_id=job.pk,
        attempt=pod.attempt,
        rank=pod.rank,
        world_size=job.workers,
        image=job.image,
        command=job.command,
        env={str(k): str(v) for k, v in (job.env or {}).items()},
        gpu_indices=indices,
        gpu_uuids=uuids if len(uuids) == len(indices) else [],
        cpus=pod.cpus,
        memory_gb=pod.memory_gb,
        log_next_seq=pod.log_next_seq,
        **worker_ft_fields(pod),
    )


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
    record_node_alive(node.pk, _fact_fields(hb.facts), now=now, deadline=_deadline(now))
    upsert_gpus(node.pk, _gpu_rows(hb.facts), known_count=node.gpus)

    pods = _load_pods(node.pk, (w.pod_id for w in hb.workers))
    # Progress and checkpoints first: a checkpoint saved on SIGTERM must be known before
    # the exit reported in this same heartbeat restarts the job from it.
    store_worker_extras(pods, hb.workers, now)
    changed = False
    touched: list[int] = []
    fenced: dict[int, StopOrder] = {}
    samples: list[tuple[int, dict]] = []
    for report in hb.workers:
        pod = pods.get(report.pod_id)
        verdict, why = judge_report(node.pk, _pod_facts(pod) if pod else None, report)
        if report.gpu is not None and verdict in (Verdict.START, Verdict.TOUCH):
            samples.append((pod.pk, report.gpu.model_dump()))
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
    note_reports(touched, now)
    record_gpu_samples(samples, now)  # only this node's current workers
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
    return HeartbeatReply(
        heartbeat_interval=heartbeat_interval(),
        run=run,
        stop=stop,
        clear_health_marks=_marks_to_clear(node.pk, hb.facts),
    )


def _marks_to_clear(node_id: int, facts: NodeFacts) -> list[ClearHealthMark]:
    """Health marks an operator cleared that the agent still reports (a query only when it
    reports one)."""
    if not any(g.health_mark for g in facts.gpus):
        return []
    return [ClearHealthMark(uuid=u, mark=m) for u, m in health_marks_to_clear(node_id)]


# --- logs --------------------------------------------------------------------------------


def store_logs(node: Node, batch: LogBatch, now: datetime) -> LogAck:
    """Store each sequence number once and acknowledge the next expected one per pod."""
    ids = {b.pod_id for b in batch.batches}
    pods = {p.pk: p for p in Pod.objects.filter(pk__in=ids).select_related("job")}
    acks: dict[int, int] = {}
    rejected: dict[int, str] = {}
    for b in batch.batches:
        pod = pods.get(b.pod_id)
        reason = log_reject_reason(node.pk, pod, b.attempt)
        if reason:
            rejected[b.pod_id] = reason
            continue
        current = acks.get(pod.pk, pod.log_next_seq)
        fresh = new_log_lines(current, b.first_seq, b.lines)
        if fresh:
            # Lines the agent cut at its length limit, by sequence number (raw log joins them).
            joins = [b.first_seq + i for i in b.continued if b.first_seq + i >= current]
            current = append_log_lines(pod, current, fresh, now, joins=joins)
        acks[pod.pk] = current
    return LogAck(acks=acks, rejected=rejected)
