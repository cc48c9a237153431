"""What the console does with agent requests: register, bootstrap tokens, logs
(docs/agent-protocol.md); a heartbeat is `agents.heartbeat.actions`, which uses the helpers
here.

The shell around the pure decisions of `agents.decisions`. Each write goes through the
actions of the app that owns the rows:

- the node's registration and facts: `cluster.actions`,
- log lines: `jobs.actions.logs.append_log_lines` (compare-and-set on the pod's next
  sequence number, plus the chunk, in one transaction); refusals noted on their pods by
  `jobs.actions.workers.note_refusal`.

All times are the console's receive time; the agent's clock is never trusted (docs/traps.md).
"""

import hashlib
import logging
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.tokens import derived_token, make_token, matches, split_prefix
from agents.applying import FAILED, isolated
from agents.auth import BOOTSTRAP_KIND, NODE_KIND, AgentApiError
from agents.decisions import is_foreign, new_log_lines, not_ours_reason
from agents.hooks import ForeignItems, announce_foreign
from agents.models import BootstrapToken, RegistrationOutcome, RegistrationRecord
from cluster.actions import NameTaken, save_registration, upsert_gpus
from cluster.actions import allow_reregistration as allow_node_reregistration
from cluster.models import Node, NodeState
from jobs.actions.logs import LogAppend, SequenceMoved, append_log_lines, append_many, note_log_end
from jobs.actions.workers import note_refusal
from jobs.models import Pod
from jobs.prepared import PreparedRead
from protocol import limits, words
from protocol.agent import LogAck, LogLines, NodeFacts, RegisterRequest
from protocol.batches import LogItems

log = logging.getLogger(__name__)


def heartbeat_interval() -> float:
    return float(settings.AGENT_HEARTBEAT_INTERVAL)


def deadline_of(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.NODE_NOT_READY_AFTER)


def gpu_rows(facts: NodeFacts) -> list[dict]:
    return [g.model_dump() for g in facts.gpus]


def fact_fields(facts: NodeFacts) -> dict:
    fields = {
        "agent_version": facts.agent_version,
        "runtime": facts.runtime,
        "gpu_type": facts.gpu_type,
        "gpus": len(facts.gpus),
        "cpus": facts.cpus,
        "memory_gb": facts.memory_gb,
    }
    # Only what the agent says (docs/distributed.md): a node that advertises no address
    # keeps the one it registered from.
    if facts.address:
        fields["address"] = facts.address
    if facts.rendezvous_ports is not None:
        fields["rendezvous_port_first"], fields["rendezvous_port_last"] = facts.rendezvous_ports
    return fields


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


def find_bootstrap_token(plain: str) -> BootstrapToken:
    """The bootstrap token `plain` is, in any state (401 when it is none)."""
    prefix = split_prefix(plain, BOOTSTRAP_KIND)
    if prefix is None:
        raise AgentApiError(401, "malformed_token", "not a bootstrap token")
    token = BootstrapToken.objects.filter(prefix=prefix).first()
    if token is None or not matches(plain, token.digest):
        raise AgentApiError(401, "invalid_token", "unknown bootstrap token")
    return token


def claim_bootstrap_token(token: BootstrapToken, now: datetime) -> BootstrapToken:
    """Check a bootstrap token (`find_bootstrap_token`) and, if it is single-use, mark it
    used.

    The claim is a compare-and-set, `UPDATE … SET used_at=now WHERE id=… AND used_at IS NULL
    AND revoked_at IS NULL AND expires_at > now`: of two agents racing with one single-use
    token exactly one UPDATE matches a row. Call it inside the registration transaction so
    a registration that fails afterwards leaves the token unused.
    """
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


def repeats_last_registration(
    token: BootstrapToken, name: str, key_digest: str, now: datetime
) -> bool:
    """Whether this request may repeat the last registration of `name` (an agent whose
    reply was lost asks again): it carries a registration key, and comes within
    REGISTRATION_REPEAT_SECONDS of that registration, with the bootstrap token that made it,
    not revoked since. The token is then not claimed again (a single-use one was used by
    that registration). Whether the key is that registration's is checked under the node's
    lock (cluster.actions.save_registration); any other request is a registration of its
    own."""
    if not key_digest or token.revoked_at is not None:
        return False
    last = (
        RegistrationRecord.objects.filter(
            name=name,
            outcome__in=[RegistrationOutcome.REGISTERED, RegistrationOutcome.REREGISTERED],
        )
        .only("created_at", "bootstrap_prefix")
        .first()
    )
    since = now - timedelta(seconds=limits.REGISTRATION_REPEAT_SECONDS)
    return last is not None and last.created_at >= since and last.bootstrap_prefix == token.prefix


def register_node(
    bootstrap_plain: str, req: RegisterRequest, now: datetime, *, remote_addr: str = ""
) -> tuple[Node, str]:
    """Claim the bootstrap token and create the node, in one transaction. Returns the node
    and its new plain token (stored only as prefix + digest).

    A name that is already registered is never taken over by a bootstrap token (whoever
    holds a reusable one would lock the real agent out and receive its job specs): it is
    refused (409) and the attempt recorded, until an operator allows the name to register
    again (admin "Allow re-registration", or revoking its token). The one exception is the
    same registration asked again after its reply was lost (`repeats_last_registration`,
    docs/agent-protocol.md "A registration repeated"). Every registration is recorded in
    RegistrationRecord."""
    record = {"name": req.name, "created_at": now, "remote_addr": remote_addr[:64]}
    key = hashlib.sha256(req.registration_key.encode()).hexdigest() if req.registration_key else ""
    # With a key, the node's token is the key's (every copy of the request, however late
    # behind its retry, answers the same token); without one, a random token.
    new = (
        derived_token(NODE_KIND, settings.SECRET_KEY.encode(), f"{req.name}:{req.registration_key}")
        if key
        else make_token(NODE_KIND)
    )
    fields = {
        "address": req.facts.address or remote_addr[: limits.ADDRESS],
        **fact_fields(req.facts),
        "resource_type": req.facts.resource_type,
        "state": NodeState.READY,
        "last_heartbeat_at": now,
        "heartbeat_deadline": deadline_of(now),
        "token_prefix": new.prefix,
        "token_digest": new.digest,
        "token_revoked_at": None,
        "report_digest": "",
        "registration_key_digest": key,
    }
    # With a key, a refusal is looked at once more: a copy of this very request may have
    # been registering while this one looked (its record not yet committed: its insert of
    # the node, or its claim of a single-use token, made this one wait and fail); the
    # second look sees it committed and repeats it.
    tries = 2 if key else 1
    for attempt in range(1, tries + 1):
        try:
            node, repeated = _register_once(bootstrap_plain, req, key, fields, record, now)
            break
        except AgentApiError as exc:
            if exc.code != "token_used" or attempt == tries:
                raise
        except NameTaken:
            if attempt < tries:
                continue
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
    log.info(
        "node %s %s (id %s, %s)",
        node.name,
        "registration repeated" if repeated else "registered",
        node.pk,
        words.gpus(len(req.facts.gpus)),
    )
    return node, new.plain


def _register_once(
    bootstrap_plain: str, req: RegisterRequest, key: str, fields: dict, record: dict, now
) -> tuple[Node, bool]:
    """One transaction of `register_node`: the node and whether this repeated its last
    registration. Raises NameTaken (nothing written)."""
    with transaction.atomic():
        token = find_bootstrap_token(bootstrap_plain)
        repeats = repeats_last_registration(token, req.name, key, now)
        if not repeats:
            claim_bootstrap_token(token, now)
        record["bootstrap_prefix"] = token.prefix
        node, created = save_registration(req.name, fields, repeats=key if repeats else "")
        upsert_gpus(node.pk, gpu_rows(req.facts), known_count=None)
        repeated = repeats and not created
        RegistrationRecord.objects.create(
            **record,
            node=node,
            outcome=RegistrationOutcome.REREGISTERED
            if not created
            else RegistrationOutcome.REGISTERED,
            detail="repeated: the reply to its last registration was lost" if repeated else "",
        )
    return node, repeated


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


# --- logs --------------------------------------------------------------------------------


def record_refusals(
    node: Node, pods: dict[int, Pod], refused: dict[int, str], what: str, now: datetime
) -> None:
    """Note each refusal on its pod (this node's pods only), and log it."""
    for pod_id, reason in refused.items():
        log.warning("node %s: refused the %s of pod %s: %s", node.name, what, pod_id, reason)
        pod = pods.get(pod_id)
        if pod is not None and pod.node_id == node.pk:
            note_refusal(pod, f"{what} refused: {reason}", now)


def store_logs(
    node: Node,
    items: LogItems,
    now: datetime,
    *,
    pods: dict[int, Pod] | None = None,
    foreign: dict[int, list[str]] | None = None,
) -> LogAck:
    """Store each sequence number once and acknowledge the next expected one per pod; a
    stream that cannot be read or stored is refused alone, and so is a stream of a pod not
    placed on this node in that attempt (`rejected`). `pods`: already loaded with their
    jobs (a heartbeat's), read again only for the ids it lacks. `foreign`: where to note
    the streams of other nodes' pods (a heartbeat announces them once with its other
    items); None: announced here (the log endpoint)."""
    pods = _with_pods(pods, {b.pod_id for b in items.batches} | set(items.refused))
    for problem in items.unnamed:
        log.warning("node %s: refused a log item: %s", node.name, problem)
    acks: dict[int, int] = {}
    rejected: dict[int, str] = {}
    refused = dict(items.refused)
    noted: dict[int, list[str]] = {} if foreign is None else foreign
    storable: list[tuple[Pod, LogLines]] = []
    for batch in items.batches:
        pod = pods.get(batch.pod_id)
        reason = not_ours_reason(node.pk, pod, batch.attempt)
        if reason:
            rejected[batch.pod_id] = reason
            if is_foreign(node.pk, pod):
                note_foreign(noted, batch.pod_id, "log lines")
        elif batch.pod_id not in refused:
            storable.append((pod, batch))
    stored = _store_together(node, storable, acks, now)
    for pod, batch in storable:
        if pod.pk not in stored and pod.pk not in refused:
            _store_stream(node, pod, batch, acks, refused, now)
    record_refusals(node, pods, refused, "log lines", now)
    if foreign is None:
        announce_foreign_items(node, "logs", noted, now)
    return LogAck(acks=acks, rejected=rejected, refused=refused)


def _with_pods(pods: dict[int, Pod] | None, ids: set[int]) -> dict[int, Pod]:
    """`pods` and the pods of `ids` it lacks, with their jobs."""
    pods = dict(pods or {})
    missing = ids - pods.keys()
    if missing:
        pods |= {p.pk: p for p in _pods_with_jobs(sorted(missing))}
    return pods


# Compiled once per number of ids (jobs.prepared): a log batch names a few dozen pods.
_pods_with_jobs = PreparedRead(lambda ids: Pod.objects.filter(pk__in=ids).select_related("job"))


def note_foreign(foreign: dict[int, list[str]], pod_id: int, what: str) -> None:
    kinds = foreign.setdefault(pod_id, [])
    if what not in kinds:
        kinds.append(what)


def announce_foreign_items(
    node: Node, endpoint: str, foreign: dict[int, list[str]], now: datetime
) -> None:
    """One notice (the audit log hears it) for a request's items naming other nodes' pods."""
    if not foreign:
        return
    log.warning("node %s: refused items of pods not placed on it: %s", node.name, sorted(foreign))
    announce_foreign(ForeignItems(node.pk, node.name, endpoint, now, dict(foreign)))


def _store_together(
    node: Node, storable: list[tuple[Pod, LogLines]], acks: dict[int, int], now: datetime
) -> set[int]:
    """The new lines of the pods named once, stored together (`append_many`, in a
    savepoint): the ids of the pods stored; none where fewer than two have new lines or the
    batch failed (a sequence moved meanwhile, an error), and then each is stored alone."""
    named = Counter(pod.pk for pod, _ in storable)
    appends = []
    for pod, batch in storable:
        fresh = new_log_lines(pod.log_next_seq, batch.first_seq, batch.lines)
        if named[pod.pk] == 1 and fresh:
            joins = _joins(batch, pod.log_next_seq)
            appends.append(LogAppend(pod, pod.log_next_seq, fresh, joins, ends=batch.end))
    if len(appends) < 2:
        return set()
    try:
        with transaction.atomic():
            append_many(appends, now)
    except SequenceMoved:
        return set()
    except Exception:
        log.exception("node %s: log lines of %d pods together failed", node.name, len(appends))
        return set()
    acks.update((item.pod.pk, item.pod.log_next_seq) for item in appends)
    return {item.pod.pk for item in appends}


def _joins(batch: LogLines, current: int) -> list[int]:
    """Lines the agent cut at its length limit, by sequence number (raw log joins them),
    from `current` on."""
    return [batch.first_seq + i for i in batch.continued if batch.first_seq + i >= current]


def _store_stream(
    node: Node,
    pod: Pod,
    batch: LogLines,
    acks: dict[int, int],
    refused: dict[int, str],
    now: datetime,
) -> None:
    """One stream's lines, acknowledged in `acks`; its end noted once all are stored."""
    stored = _store_batch(node, pod, batch, acks.get(pod.pk, pod.log_next_seq), refused, now)
    if stored is FAILED:
        return
    acks[pod.pk] = stored
    end = batch.first_seq + len(batch.lines)
    if batch.end and stored >= end:
        note_log_end(pod, end)


def _store_batch(
    node: Node, pod: Pod, batch: LogLines, current: int, refused: dict[int, str], now: datetime
) -> int | object:
    """The lines of a batch not stored yet (from `current`, the next expected sequence
    number): the next expected one after them, or FAILED (the stream refused alone)."""
    fresh = new_log_lines(current, batch.first_seq, batch.lines)
    if not fresh:
        return current
    joins = _joins(batch, current)
    return isolated(
        node,
        pod.pk,
        refused,
        "log lines",
        lambda: append_log_lines(pod, current, fresh, now, joins=joins),
    )
