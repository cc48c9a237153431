"""A heartbeat, from the agent's request to the reply (docs/agent-protocol.md).

One entry, `answer_heartbeat` (the view calls only it), and one decision: a heartbeat that
repeats the last one is answered by ONE statement (`_seen_quietly`) and the reply
remembered for it (`agents.heartbeat.quiet`); any other is recorded in full
(`record_heartbeat`): the node's facts and GPUs (`cluster.actions`), each worker report
judged (`agents.decisions`) and applied alone (`agents.applying`), then, when
GPUs came free, a scheduling cycle asked for once the reports are committed
(`jobs.triggers.request_scheduling`: a Celery task or the scheduler loop runs it, never
this request), and the node noted alive last. The reply is the desired state
(`agents.decisions.desired_state`), the refusals and the lease (`agents.fencing`).

All times are the console's receive time; the agent's clock is never trusted (docs/traps.md).
"""

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import Q
from pydantic import ValidationError

from accounts.tokens import split_prefix
from agents.actions import (
    announce_foreign_items,
    deadline_of,
    fact_fields,
    gpu_rows,
    heartbeat_interval,
    note_foreign,
    record_refusals,
    store_logs,
)
from agents.applying import apply_reports, isolated
from agents.auth import NODE_KIND, authenticate_token
from agents.decisions import (
    PodFacts,
    Verdict,
    desired_state,
    desired_version,
    desired_version_of,
    is_foreign,
    judge_report,
    not_ours_reason,
    report_digest,
)
from agents.fencing import fence_timing
from agents.heartbeat import quiet
from agents.heartbeat.extras import store_extras
from cluster.actions import (
    health_marks_to_clear,
    note_node_seen,
    record_node_alive,
    refuse_gpu_reports,
    upsert_gpus,
)
from cluster.models import POOL_STATES, Node, NodeState
from jobs.actions.progress import worker_ft_fields
from jobs.actions.rendezvous import exec_token
from jobs.actions.workers import apply_worker_state, record_gpu_samples
from jobs.models import Pod, PodDesired
from jobs.prepared import PreparedRead
from jobs.result_reads import resume_identities
from jobs.triggers import request_scheduling
from policy.jobspec import worker_fields
from policy.rendezvous import job_env
from policy.statuses import ACTIVE_POD_STATUSES, PodStatus
from protocol.agent import (
    ClearHealthMark,
    HeartbeatReply,
    LogAck,
    StopOrder,
    WorkerReport,
    WorkerSpec,
    error_reason,
)
from protocol.batches import HeartbeatItems, LogItems, RequestRefused, parse_heartbeat
from protocol.text import JsonBodyError, load_json
from protocol.units import ResumeIdentity

log = logging.getLogger("agents.actions")


def answer_heartbeat(plain: str, raw: bytes, now: datetime) -> bytes:
    """The reply to a heartbeat (its bytes): quiet where nothing changed, else recorded in
    full. `plain` is the bearer token, `raw` the request body; AgentApiError, JsonBodyError
    or RequestRefused for what concerns the whole request (an unknown or revoked token
    answers before a bad body)."""
    prefix, body = split_prefix(plain, NODE_KIND), quiet.hash_body(raw)
    entry = quiet.known(prefix, plain, body) if prefix else None
    items = None if entry is not None else _read(plain, raw)
    if entry is None and prefix is not None:
        entry = quiet.could_repeat(prefix, plain, items, body, _idle_reply)
    if entry is not None:
        if _seen_quietly(entry, now):
            quiet.keep(entry)
            return entry.reply
        quiet.forget(entry.prefix)  # nothing was written: the full path answers
    node = authenticate_token(plain)
    items = items or _read(plain, raw)
    return quiet.remember(prefix, plain, items, record_heartbeat(node, items, now), body)


def _read(plain: str, raw: bytes) -> HeartbeatItems:
    """The heartbeat read item by item (protocol.batches: text repaired per item)."""
    try:
        return parse_heartbeat(load_json(raw, repair=True))
    except (JsonBodyError, RequestRefused):  # the view answers 400, after the token
        authenticate_token(plain)
        raise


# --- the quiet heartbeat: one statement --------------------------------------------------

_ACTIVE = sorted(ACTIVE_POD_STATUSES)


def _seen_quietly(entry: quiet.Quiet, now: datetime) -> bool:
    """The quiet heartbeat's one statement, a raw UPDATE (the ORM's compiler would cost
    more than the statement on this, the most frequent request; names from the models,
    every value a parameter):

        UPDATE <node> SET state, last_heartbeat_at, heartbeat_deadline
         WHERE token_prefix AND token_digest = <sha256 of the presented token>
           AND token_revoked_at IS NULL AND report_digest = <digest of these facts>
           AND state IN (Ready, NotReady)
           AND (live pods of the node) = exactly the reported (pod, attempt) pairs,
               all Running and asked to run

    It is the whole check: authentication (a revoked or replaced token misses at once, in
    every process), the facts, and the desired state (a pod placed on the node, asked to
    stop or ended by anyone makes the pods' condition miss), and a Lost node misses (its
    return changes admission's pool: the full path tells it). False: a miss, nothing
    written. The node's row is cluster's and every other write of it is
    `cluster.actions`'; this one is guarded by jobs' pods in the same statement, which only
    a room above both can build."""
    node, pods = (connection.ops.quote_name(m._meta.db_table) for m in (Node, Pod))
    exactly, pod_params = _pods_are_exactly(node, pods, entry.workers)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {node} SET state = %s, last_heartbeat_at = %s, "  # noqa: S608
            "heartbeat_deadline = %s WHERE token_prefix = %s AND token_digest = %s "
            "AND token_revoked_at IS NULL AND report_digest = %s AND state IN (%s, %s) "
            f"AND ({exactly})",
            [
                *(NodeState.READY, now, deadline_of(now), entry.prefix, entry.token_digest),
                *(entry.report_digest, *POOL_STATES, *pod_params),
            ],
        )
        return cursor.rowcount == 1


def _pods_are_exactly(node: str, pods: str, workers: frozenset[tuple[int, int]]):
    """`_seen_quietly`'s condition on the node's row: its live pods are exactly `workers`,
    each Running and asked to run (none other is live, and as many are live as were
    reported). The SQL and its parameters."""
    live = (
        f"FROM {pods} p WHERE p.node_id = {node}.id "
        f"AND p.status IN ({', '.join(['%s'] * len(_ACTIVE))})"
    )
    if not workers:
        return f"NOT EXISTS (SELECT 1 {live})", list(_ACTIVE)
    pairs = sorted(workers)
    listed = ", ".join(["(%s, %s)"] * len(pairs))
    where = (
        f"NOT EXISTS (SELECT 1 {live} AND NOT (p.status = %s AND p.desired = %s "
        f"AND (p.id, p.attempt) IN ({listed}))) AND (SELECT COUNT(*) {live}) = %s"
    )
    params = [*_ACTIVE, PodStatus.RUNNING, PodDesired.RUN]
    params += [v for pair in pairs for v in pair]
    return where, [*params, *_ACTIVE, len(pairs)]


def _idle_reply() -> bytes:
    """The reply to a node with no live pod whose report changed nothing: nothing to run
    or stop, the lease; byte for byte what `record_heartbeat` answers such a node."""
    return (
        HeartbeatReply(
            heartbeat_interval=heartbeat_interval(),
            desired_version=desired_version(0, 0, 0),
            **_TAKES,
            **_lease(),
        )
        .model_dump_json()
        .encode()
    )


# What this console takes from agents: log lines riding in heartbeats, end-of-stream marks.
_TAKES = {"takes_logs": True, "log_end": True}


def _lease() -> dict:
    timing = fence_timing()
    return {"lease_seconds": timing.lease_seconds, "fence_grace": timing.kill_grace}


# --- the full path -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Facts:
    """What a heartbeat says of the node itself."""

    fields: dict
    gpus: list[dict]
    digest: str  # empty when a GPU report was refused: never "the same"
    same: bool  # the digest on the node's row: nothing to write but the time seen


def record_heartbeat(node: Node, items: HeartbeatItems, now: datetime) -> HeartbeatReply:
    """Apply a heartbeat item by item (protocol.batches), reply with the desired state.

    The node is noted alive (Ready, a new deadline) last, once the heartbeat has been
    applied: a node whose heartbeats keep failing goes NotReady, so the scheduler stops
    placing work there. Queries: a constant few plus a constant per worker whose state
    changed. Where nothing changed (the same facts and GPUs as the node row's digest, the
    workers running as known) it writes one statement: the time the node was seen; a
    running worker's last report is its node's last heartbeat."""
    facts = _record_facts(node, items)
    refused = dict(items.refused)
    pods = _load_pods(node.pk, _named_pods(items, refused))
    foreign: dict[int, list[str]] = {}
    own = _own_reports(node, items.workers, pods, refused, foreign)
    # Log lines riding along first: an exit's last lines are stored before it is applied.
    log_ack = _store_riding_logs(node, items, pods, foreign, now)
    store_extras(node, own, pods, refused, now)
    fenced, freed = _apply_reports(node, items.workers, pods, refused, now)
    announce_foreign_items(node, "heartbeat", foreign, now)
    if freed:
        # GPUs came free: a cycle once this is committed (a task or the scheduler loop runs
        # it; the agent's wait wakes when it places pods here). An exit may have ended its
        # job and ordered the job's other workers stopped: read those jobs' pods here
        # again. Workers that only started change nothing the reply says.
        request_scheduling()
        pods = _read_again(node.pk, pods, freed)
    run_pods, stop = desired_state(node.pk, pods.values(), fenced)
    run = _worker_specs(node, run_pods, refused, now, {r.pod_id for r in items.workers})
    _note_alive(node, facts, now)
    return HeartbeatReply(
        heartbeat_interval=heartbeat_interval(),
        run=run,
        stop=stop,
        clear_health_marks=_marks_to_clear(node.pk, items),
        refused=refused,
        desired_version=desired_version_of(node.pk, pods.values()),
        logs=log_ack,
        **_TAKES,
        **_lease(),
    )


def _record_facts(node: Node, items: HeartbeatItems) -> _Facts:
    """The node's GPUs as reported, written only when they differ from the digest on the
    node's row; GPUs whose reports were refused marked unhealthy."""
    fields, gpus = fact_fields(items.facts), gpu_rows(items.facts)
    digest = "" if items.refused_gpus else report_digest(fields, gpus)
    facts = _Facts(fields, gpus, digest, bool(digest) and digest == node.report_digest)
    if not facts.same:
        upsert_gpus(node.pk, gpus, known_count=node.gpus)
    if items.refused_gpus:
        refuse_gpu_reports(node.pk, items.refused_gpus)
    for problem in items.unnamed:
        log.warning("node %s: refused a heartbeat item: %s", node.name, problem)
    return facts


def _note_alive(node: Node, facts: _Facts, now: datetime) -> None:
    """Ready, seen now, a new deadline: one UPDATE where the facts are as recorded."""
    deadline = deadline_of(now)
    if facts.same and note_node_seen(node.pk, facts.digest, now=now, deadline=deadline):
        return
    if facts.same:  # another request recorded other facts meanwhile: ours are newer
        upsert_gpus(node.pk, facts.gpus, known_count=node.gpus)
    record_node_alive(node.pk, facts.fields, now=now, deadline=deadline, digest=facts.digest)


def _read_again(node_id: int, pods: dict[int, Pod], job_ids: set[int]) -> dict[int, Pod]:
    """The loaded pods, those of `job_ids` read again (their live ones on this node). The
    other jobs' rows are as this request read them, as on a heartbeat without exits: a
    pod placed here meanwhile changes the node's desired version, and the agent's wait
    answers at once. Reading the node's every pod again cost 3 % of the web's CPU in
    bench/kueue.py --full."""
    kept = {pk: pod for pk, pod in pods.items() if pod.job_id not in job_ids}
    return kept | {p.pk: p for p in _live_pods_of_jobs(node_id, sorted(job_ids))}


def _named_pods(items: HeartbeatItems, refused: dict[int, str]) -> list[int]:
    """The pods a heartbeat names: its reports, its refusals, its riding log streams."""
    riding = [b.pod_id for b in items.logs.batches] if items.logs is not None else []
    return [*(w.pod_id for w in items.workers), *refused, *riding]


def _load_pods(node_id: int, named: Iterable[int]) -> dict[int, Pod]:
    return {p.pk: p for p in _live_or_named_pods(node_id, sorted(set(named)))}


# The node's pods with their jobs, compiled once per shape (jobs.prepared); unordered (read
# into a dict by id): the model's ordering would join and sort for nothing.
_live_or_named_pods = PreparedRead(
    lambda node_id, named: (
        Pod.objects.filter(Q(node_id=node_id, status__in=_ACTIVE) | Q(pk__in=named))
        .select_related("job")
        .order_by()
    )
)
_live_pods_of_jobs = PreparedRead(
    lambda node_id, job_ids: (
        Pod.objects.filter(node_id=node_id, status__in=_ACTIVE, job_id__in=job_ids)
        .select_related("job")
        .order_by()
    )
)


def _own_reports(
    node: Node,
    reports: list[WorkerReport],
    pods: dict[int, Pod],
    refused: dict[int, str],
    foreign: dict[int, list[str]],
) -> list[WorkerReport]:
    """The reports of this node's own pods in their current attempt. Any other is refused
    alone with the reason (its progress and checkpoints never stored; its state still
    judged, so a worker that must not run is fenced), and another node's pod is noted for
    the audit log (docs/agent-protocol.md, "Only a node's own pods")."""
    own: list[WorkerReport] = []
    for report in reports:
        pod = pods.get(report.pod_id)
        reason = not_ours_reason(node.pk, pod, report.attempt)
        if not reason:
            own.append(report)
            continue
        refused.setdefault(report.pod_id, reason)
        if is_foreign(node.pk, pod):
            note_foreign(foreign, report.pod_id, "report")
            if report.progress is not None or report.checkpoints:
                note_foreign(foreign, report.pod_id, "progress and checkpoints")
    return own


def _store_riding_logs(
    node: Node,
    items: HeartbeatItems,
    pods: dict[int, Pod],
    foreign: dict[int, list[str]],
    now: datetime,
) -> LogAck | None:
    """The log lines riding in the heartbeat (`agents.actions.store_logs`); an exit says
    its logs are delivered only if they were all stored."""
    if items.logs is None:
        return None
    ack = store_logs(node, items.logs, now, pods=pods, foreign=foreign)
    items.workers = _delivered_only_if_stored(items.workers, items.logs, ack)
    return ack


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


def _apply_reports(
    node: Node,
    reports: list[WorkerReport],
    pods: dict[int, Pod],
    refused: dict[int, str],
    now: datetime,
) -> tuple[dict[int, StopOrder], set[int]]:
    """Each report judged (`agents.decisions.judge_report`); starts and exits applied
    (`agents.applying`), GPU samples kept for this node's current workers,
    refusals noted. Returns the workers to fence and the jobs whose exits freed GPUs."""
    fenced: dict[int, StopOrder] = {}
    samples: list[tuple[int, dict]] = []
    applies: list[tuple[Pod, WorkerReport]] = []
    for report in reports:
        pod = pods.get(report.pod_id)
        verdict, why = judge_report(node.pk, _pod_facts(pod) if pod else None, report)
        if report.gpu is not None and verdict in (Verdict.START, Verdict.TOUCH):
            samples.append((pod.pk, report.gpu.model_dump()))
        if verdict in (Verdict.START, Verdict.EXIT):
            applies.append((pod, report))
        elif verdict == Verdict.FENCE:
            log.warning("node %s: fencing pod %s: %s", node.name, report.pod_id, why)
            fenced[report.pod_id] = _fence_order(report, why)
    applied = apply_reports(node, applies, refused, now)
    record_gpu_samples(samples, now)  # only this node's current workers
    record_refusals(node, pods, refused, "report", now)
    return fenced, {pod.job_id for pod, r in applies if pod.pk in applied and r.state != "running"}


def _pod_facts(pod: Pod) -> PodFacts:
    return PodFacts(node_id=pod.node_id, attempt=pod.attempt, status=pod.status)


def _fence_order(report: WorkerReport, why: str) -> StopOrder:
    return StopOrder(
        pod_id=report.pod_id,
        attempt=report.attempt,
        grace_seconds=settings.DEFAULT_STOP_GRACE,
        reason=f"stale worker: {why}",
    )


def _worker_specs(
    node: Node,
    run_pods: list[Pod],
    refused: dict[int, str],
    now: datetime,
    known: Collection[int] = (),
) -> list[WorkerSpec]:
    """The specs of the pods to run. A job's stored spec that cannot be sent (e.g. a bad
    env name) fails the worker with the reason instead of breaking the node's heartbeat.
    `known`: pods the agent reported (launched already: no resume identity to check)."""
    run: list[WorkerSpec] = []
    # docs/results.md: what a resume must still be, for the workers the agent will launch
    resuming = resume_identities([p for p in run_pods if p.pk not in known])
    for pod in run_pods:
        try:
            run.append(worker_spec(pod, resuming.get(pod.pk)))
        except ValidationError as exc:
            isolated(
                node,
                pod.pk,
                refused,
                "worker spec",
                lambda pod=pod, exc=exc: apply_worker_state(
                    pod, running=False, error=f"invalid worker spec: {error_reason(exc)}", now=now
                ),
            )
    return run


def worker_spec(pod: Pod, resume_identity: ResumeIdentity | None = None) -> WorkerSpec:
    job = pod.job
    indices = list(pod.gpu_indices or [])
    uuids = list(pod.gpu_uuids or [])
    return WorkerSpec(
        pod_id=pod.pk,
        job_id=job.pk,
        attempt=pod.attempt,
        rank=pod.rank,
        world_size=job.workers,
        gpu_indices=indices,
        gpu_uuids=uuids if len(uuids) == len(indices) else [],
        cpus=pod.cpus,
        memory_gb=pod.memory_gb,
        log_next_seq=pod.log_next_seq,
        workspace_id=job.workspace_id,
        rendezvous=job_env(job, pod.rank, exec_token(job)),  # where this attempt's workers meet
        **worker_fields(job),  # image, command, env, checkpoint folder (policy.jobspec)
        **worker_ft_fields(pod),
        resume_identity=resume_identity,
    )


def _marks_to_clear(node_id: int, items: HeartbeatItems) -> list[ClearHealthMark]:
    """Health marks an operator cleared that the agent still reports (a query only when it
    reports one)."""
    if not any(g.health_mark for g in items.facts.gpus):
        return []
    return [ClearHealthMark(uuid=u, mark=m) for u, m in health_marks_to_clear(node_id)]
