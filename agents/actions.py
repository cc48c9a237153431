"""What the console does with agent requests: register, heartbeat, logs (docs/agent-protocol.md).

The shell around the pure decisions of `agents.decisions`. Each write goes through the
actions of the app that owns the rows:

- node facts and GPUs: `cluster.actions` (a plain UPDATE by id: last writer wins; every
  heartbeat carries the full facts),
- pod statuses: `jobs.actions.workers.apply_worker_states` (compare-and-set on the pod's
  live status; a heartbeat's changes in one transaction, agents.applying),
- log lines: `jobs.actions.logs.append_log_lines` (compare-and-set on the pod's next
  sequence number, plus the chunk, in one transaction).

All times are the console's receive time; the agent's clock is never trusted (docs/traps.md).
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
from agents.applying import FAILED, apply_reports, isolated
from agents.auth import BOOTSTRAP_KIND, NODE_KIND, AgentApiError
from agents.decisions import (
    PodFacts,
    Verdict,
    desired_state,
    desired_version,
    desired_version_of,
    judge_report,
    log_reject_reason,
    new_log_lines,
    report_digest,
)
from agents.fencing import fence_timing
from agents.models import BootstrapToken, RegistrationOutcome, RegistrationRecord
from cluster.actions import (
    NameTaken,
    health_marks_to_clear,
    note_node_seen,
    record_node_alive,
    refuse_gpu_reports,
    save_registration,
    upsert_gpus,
)
from cluster.actions import allow_reregistration as allow_node_reregistration
from cluster.models import Node, NodeState
from jobs.actions.logs import append_log_lines
from jobs.actions.progress import store_worker_extras, worker_ft_fields
from jobs.actions.workers import (
    apply_worker_state,
    note_refusal,
    record_gpu_samples,
)
from jobs.models import Pod
from jobs.scheduler.cycle import admit_now
from policy.statuses import ACTIVE_POD_STATUSES
from protocol import words
from protocol.agent import (
    ClearHealthMark,
    HeartbeatReply,
    LogAck,
    NodeFacts,
    RegisterRequest,
    StopOrder,
    WorkerReport,
    WorkerSpec,
    error_reason,
)
from protocol.batches import HeartbeatItems, LogItems

log = logging.getLogger(__name__)


def heartbeat_interval() -> float:
    return float(settings.AGENT_HEARTBEAT_INTERVAL)


def deadline_of(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.NODE_NOT_READY_AFTER)


def gpu_rows(facts: NodeFacts) -> list[dict]:
    return [g.model_dump() for g in facts.gpus]


def fact_fields(facts: NodeFacts) -> dict:
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


def register_node(
    bootstrap_plain: str, req: RegisterRequest, now: datetime, *, remote_addr: str = ""
) -> tuple[Node, str]:
    """Claim the bootstrap token and create the node, in one transaction. Returns the node
    and its new plain token (stored only as prefix + digest).

    A name that is already registered is never taken over by a bootstrap token (whoever
    holds a reusable one would lock the real agent out and receive its job specs): it is
    refused (409) and the attempt recorded, until an operator allows the name to register
    again (admin "Allow re-registration", or revoking its token). Every registration is
    recorded in RegistrationRecord."""
    new = make_token(NODE_KIND)
    record = {"name": req.name, "created_at": now, "remote_addr": remote_addr[:64]}
    try:
        with transaction.atomic():
            token = claim_bootstrap_token(bootstrap_plain, now)
            record["bootstrap_prefix"] = token.prefix
            node, created = save_registration(
                req.name,
                {
                    **fact_fields(req.facts),
                    "resource_type": req.facts.resource_type,
                    "state": NodeState.READY,
                    "last_heartbeat_at": now,
                    "heartbeat_deadline": deadline_of(now),
                    "token_prefix": new.prefix,
                    "token_digest": new.digest,
                    "token_revoked_at": None,
                    "report_digest": "",
                },
            )
            upsert_gpus(node.pk, gpu_rows(req.facts), known_count=None)
            RegistrationRecord.objects.create(
                **record,
                node=node,
                outcome=RegistrationOutcome.REGISTERED
                if created
                else RegistrationOutcome.REREGISTERED,
            )
    except NameTaken:
        taken = Node.objects.filter(name=req.name).first()
        RegistrationRecord.objects.create(
            **record,
            node=taken,
            outcome=RegistrationOutcome.REFUSED,
            detail="the name is registered to another agent",
        )
        log.warning(
            "refused to register node %s from %s: the name is already registered",
            req.name,
            remote_addr or "?",
        )
        raise AgentApiError(
            409,
            "name_taken",
            f"a node named {req.name} is already registered; an admin must allow it to "
            "register again (Nodes → Allow re-registration)",
            "name",
        ) from None
    log.info("node %s registered (id %s, %s)", node.name, node.pk, words.gpus(len(req.facts.gpus)))
    return node, new.plain


def allow_reregistration(nodes, user, now: datetime) -> int:
    """An operator's consent: the next registration of each node's name replaces its
    token (recorded). Returns how many nodes were allowed."""
    with transaction.atomic():
        allowed = allow_node_reregistration(nodes, now)
        RegistrationRecord.objects.bulk_create(
            RegistrationRecord(
                name=node.name,
                created_at=now,
                outcome=RegistrationOutcome.ALLOWED,
                node=node,
                user=user,
                detail="the next registration of this name replaces its token",
            )
            for node in allowed
        )
    return len(allowed)


# --- heartbeat ---------------------------------------------------------------------------


def _pod_facts(pod: Pod) -> PodFacts:
    return PodFacts(node_id=pod.node_id, attempt=pod.attempt, status=pod.status)


def _load_pods(node_id: int, reported: Iterable[int]) -> dict[int, Pod]:
    query = Q(node_id=node_id, status__in=list(ACTIVE_POD_STATUSES)) | Q(pk__in=list(reported))
    # Unordered (a dict by id): the model's ordering would join and sort for nothing.
    return {p.pk: p for p in Pod.objects.filter(query).select_related("job").order_by()}


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
        workspace_id=job.workspace_id,
        **worker_ft_fields(pod),
    )


def _heartbeat_lease() -> dict:
    timing = fence_timing()
    return {"lease_seconds": timing.lease_seconds, "fence_grace": timing.kill_grace}


def idle_node_reply() -> HeartbeatReply:
    """`record_heartbeat`'s reply to a node with no live pod whose report changed nothing:
    nothing to run or stop, the lease (agents.quiet answers such a node without a query)."""
    return HeartbeatReply(
        heartbeat_interval=heartbeat_interval(),
        desired_version=desired_version(0, 0, 0),
        takes_logs=True,
        **_heartbeat_lease(),
    )


def record_heartbeat(node: Node, items: HeartbeatItems, now: datetime) -> HeartbeatReply:
    """Apply a heartbeat item by item (protocol.batches), reply with the desired state.

    The node is noted alive (Ready, a new deadline) last, once the heartbeat has been
    applied: a node whose heartbeats keep failing goes NotReady, so the scheduler stops
    placing work there. Queries: a constant few plus a constant per worker whose state
    changed. Where nothing changed (the same facts and GPUs as the node row's digest, the
    workers running as known) it writes one statement: the time the node was seen; a
    running worker's last report is its node's last heartbeat."""
    reported_gpus = gpu_rows(items.facts)
    facts = fact_fields(items.facts)
    digest = "" if items.refused_gpus else report_digest(facts, reported_gpus)
    same_facts = bool(digest) and digest == node.report_digest
    if not same_facts:
        upsert_gpus(node.pk, reported_gpus, known_count=node.gpus)
    if items.refused_gpus:
        refuse_gpu_reports(node.pk, items.refused_gpus)
    for problem in items.unnamed:
        log.warning("node %s: refused a heartbeat item: %s", node.name, problem)
    refused = dict(items.refused)

    riding = [b.pod_id for b in items.logs.batches] if items.logs is not None else []
    pods = _load_pods(node.pk, [*(w.pod_id for w in items.workers), *refused, *riding])
    # Log lines riding along first: an exit's last lines are stored before it is applied.
    log_ack = None
    if items.logs is not None:
        log_ack = store_logs(node, items.logs, now, pods=pods)
        items.workers = _delivered_only_if_stored(items.workers, items.logs, log_ack)
    # Progress and checkpoints first: a checkpoint saved on SIGTERM must be known before
    # the exit reported in this same heartbeat restarts the job from it.
    for report in items.workers:
        if report.progress is not None or report.checkpoints:
            isolated(
                node,
                report.pod_id,
                refused,
                "progress and checkpoints",
                lambda report=report: store_worker_extras(pods, [report], now),
                atomic=True,
            )
    fenced: dict[int, StopOrder] = {}
    samples: list[tuple[int, dict]] = []
    applies: list[tuple[Pod, WorkerReport]] = []
    for report in items.workers:
        pod = pods.get(report.pod_id)
        verdict, why = judge_report(node.pk, _pod_facts(pod) if pod else None, report)
        if report.gpu is not None and verdict in (Verdict.START, Verdict.TOUCH):
            samples.append((pod.pk, report.gpu.model_dump()))
        if verdict in (Verdict.START, Verdict.EXIT):
            applies.append((pod, report))
        elif verdict == Verdict.FENCE:
            log.warning("node %s: fencing pod %s: %s", node.name, report.pod_id, why)
            fenced[report.pod_id] = StopOrder(
                pod_id=report.pod_id,
                attempt=report.attempt,
                grace_seconds=settings.DEFAULT_STOP_GRACE,
                reason=f"stale worker: {why}",
            )
    applied = apply_reports(node, applies, refused, now)
    freed = any(report.state != "running" for pod, report in applies if pod.pk in applied)
    record_gpu_samples(samples, now)  # only this node's current workers
    _record_refusals(node, pods, refused, "report", now)
    if freed:  # GPUs came free: admit what fits now, and send this node's share back
        admit_now()
    # An exit may have ended the job and ordered its other workers stopped, and the cycle
    # above may have placed pods here: read the node's pods again. Workers that only
    # started change nothing the reply says (the same pods to run, the same version).
    if freed:
        pods = _load_pods(node.pk, ())

    run_pods, stop = desired_state(node.pk, pods.values(), fenced)
    run: list[WorkerSpec] = []
    for pod in run_pods:
        try:
            run.append(worker_spec(pod))
        except ValidationError as exc:
            # The job's stored spec cannot be sent (e.g. a bad env name): fail the worker
            # with the reason instead of breaking the whole node's heartbeat.
            isolated(
                node,
                pod.pk,
                refused,
                "worker spec",
                lambda pod=pod, exc=exc: apply_worker_state(
                    pod, running=False, error=f"invalid worker spec: {error_reason(exc)}", now=now
                ),
            )
    deadline = deadline_of(now)
    if not (same_facts and note_node_seen(node.pk, digest, now=now, deadline=deadline)):
        if same_facts:  # another request recorded other facts meanwhile: ours are newer
            upsert_gpus(node.pk, reported_gpus, known_count=node.gpus)
        record_node_alive(node.pk, facts, now=now, deadline=deadline, digest=digest)
    return HeartbeatReply(
        heartbeat_interval=heartbeat_interval(),
        run=run,
        stop=stop,
        clear_health_marks=_marks_to_clear(node.pk, items.facts),
        refused=refused,
        desired_version=desired_version_of(node.pk, pods.values()),
        takes_logs=True,
        logs=log_ack,
        **_heartbeat_lease(),
    )


def _delivered_only_if_stored(
    reports: list[WorkerReport], logs: LogItems, ack: LogAck
) -> list[WorkerReport]:
    """An exit report says its logs are delivered when the agent sent the last of them in
    this heartbeat; true only if the console stored them all (not refused, not cut)."""
    ends = {b.pod_id: b.first_seq + len(b.lines) for b in logs.batches}
    short = set(logs.refused) | set(ack.refused) | set(ack.rejected)
    short |= {pod for pod, end in ends.items() if ack.acks.get(pod, -1) < end}
    return [
        r.model_copy(update={"logs_delivered": False})
        if r.logs_delivered and r.pod_id in short
        else r
        for r in reports
    ]


def _marks_to_clear(node_id: int, facts: NodeFacts) -> list[ClearHealthMark]:
    """Health marks an operator cleared that the agent still reports (a query only when it
    reports one)."""
    if not any(g.health_mark for g in facts.gpus):
        return []
    return [ClearHealthMark(uuid=u, mark=m) for u, m in health_marks_to_clear(node_id)]


def _record_refusals(
    node: Node, pods: dict[int, Pod], refused: dict[int, str], what: str, now: datetime
) -> None:
    """Note each refusal on its pod (this node's pods only), and log it."""
    for pod_id, reason in refused.items():
        log.warning("node %s: refused the %s of pod %s: %s", node.name, what, pod_id, reason)
        pod = pods.get(pod_id)
        if pod is not None and pod.node_id == node.pk:
            note_refusal(pod, f"{what} refused: {reason}", now)


# --- logs --------------------------------------------------------------------------------


def store_logs(
    node: Node, items: LogItems, now: datetime, *, pods: dict[int, Pod] | None = None
) -> LogAck:
    """Store each sequence number once and acknowledge the next expected one per pod; a
    stream that cannot be read or stored is refused alone. `pods`: already loaded with
    their jobs (a heartbeat's), read again only for the ids it lacks."""
    ids = {b.pod_id for b in items.batches} | set(items.refused)
    pods = dict(pods or {})
    missing = ids - pods.keys()
    if missing:
        pods |= {p.pk: p for p in Pod.objects.filter(pk__in=missing).select_related("job")}
    for problem in items.unnamed:
        log.warning("node %s: refused a log item: %s", node.name, problem)
    acks: dict[int, int] = {}
    rejected: dict[int, str] = {}
    refused = dict(items.refused)
    for b in items.batches:
        pod = pods.get(b.pod_id)
        reason = log_reject_reason(node.pk, pod, b.attempt)
        if reason:
            rejected[b.pod_id] = reason
            continue
        if b.pod_id in refused:
            continue
        current = acks.get(pod.pk, pod.log_next_seq)
        fresh = new_log_lines(current, b.first_seq, b.lines)
        if fresh:
            # Lines the agent cut at its length limit, by sequence number (raw log joins them).
            joins = [b.first_seq + i for i in b.continued if b.first_seq + i >= current]
            stored = isolated(
                node,
                pod.pk,
                refused,
                "log lines",
                lambda pod=pod, current=current, fresh=fresh, joins=joins: append_log_lines(
                    pod, current, fresh, now, joins=joins
                ),
            )
            if stored is FAILED:
                continue
            current = stored
        acks[pod.pk] = current
    _record_refusals(node, pods, refused, "log lines", now)
    return LogAck(acks=acks, rejected=rejected, refused=refused)
