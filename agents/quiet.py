"""The quiet heartbeat: one SQL statement when nothing changed (docs/agent-protocol.md).

Most heartbeats repeat the last one: the same facts and GPUs, the same workers running as
known, nothing refused. For those the console writes one statement and sends the reply it
sent last time to this node (kept per process, keyed by the token's prefix). A node with
no workers needs no such memory: its reply is the same for every idle node, so its first
heartbeat to a process is quiet too, the UPDATE finding the node by its token's prefix.

    UPDATE cluster_node SET state, last_heartbeat_at, heartbeat_deadline
     WHERE id = <node> AND report_digest = <digest of these facts>
       AND token_digest = <sha256 of the presented token> AND token_revoked_at IS NULL
       AND (live pods of the node) = exactly the reported (pod, attempt) pairs,
           all Running and asked to run

The UPDATE is the whole check: authentication (a revoked or replaced token misses at
once, in every process), the facts, and the desired state (a pod placed on the node, asked
to stop or ended by anyone makes the pods' condition miss). A miss, or anything the cached
reply cannot answer (a report with an exit, progress, checkpoints, a GPU sample, a refused
item, a health mark), takes the full path (`agents.actions.record_heartbeat`), which
authenticates from the database and, when its reply qualifies, remembers it here.

The cached reply's worker specs carry `log_next_seq` as it was then: an agent reads the
specs only of pods it has not launched, and in a quiet heartbeat every listed pod is one the
agent reports running.
"""

import dataclasses
import hashlib
import hmac
import threading
from dataclasses import dataclass

from django.db import connection

from accounts.tokens import digest_of, split_prefix
from agents.actions import fact_fields, gpu_rows, idle_node_reply
from agents.auth import NODE_KIND
from agents.decisions import report_digest
from cluster.actions import note_node_seen_by_token, note_node_seen_quietly
from cluster.models import Node
from jobs.models import Pod, PodDesired
from policy.statuses import ACTIVE_POD_STATUSES, PodStatus
from protocol.agent import HeartbeatReply
from protocol.batches import HeartbeatItems

# One entry per node that heartbeats to this process; a node that re-registers gets a new
# prefix, and its old entry can never match again (its token digest is gone from the row).
MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class _Quiet:
    node_id: int
    token_digest: str
    report_digest: str
    workers: frozenset[tuple[int, int]]  # (pod id, attempt)
    reply: bytes
    body: bytes = b""  # a hash of the request body last answered so (the same bytes: no parse)


_replies: dict[str, _Quiet] = {}
_lock = threading.Lock()


def forget_all() -> None:
    """Drop every cached reply (tests; nothing depends on it for correctness)."""
    with _lock:
        _replies.clear()


def _digest_of_facts(items: HeartbeatItems) -> str:
    return report_digest(fact_fields(items.facts), gpu_rows(items.facts))


def _is_plain(items: HeartbeatItems) -> bool:
    """A heartbeat the cached reply can answer: nothing refused, no health mark, and every
    worker reported running with nothing but that to say."""
    if items.refused or items.refused_gpus or items.unnamed or items.logs is not None:
        return False
    if any(g.health_mark for g in items.facts.gpus):
        return False
    return all(
        w.state == "running"
        and w.progress is None
        and not w.checkpoints
        and w.gpu is None
        and not w.error
        for w in items.workers
    )


_ACTIVE = sorted(ACTIVE_POD_STATUSES)


def _pods_are_exactly(workers: frozenset[tuple[int, int]]) -> tuple[str, list]:
    """SQL on a node row: its live pods are exactly `workers`, each Running and asked to
    run (none other is live, and as many are live as were reported)."""
    pod, node = (connection.ops.quote_name(m._meta.db_table) for m in (Pod, Node))
    live = (
        f"FROM {pod} p WHERE p.node_id = {node}.id "
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


def _hash(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _seen(entry: _Quiet, token: str, now, deadline) -> bool:
    return note_node_seen_quietly(
        entry.node_id,
        entry.report_digest,
        token,
        _pods_are_exactly(entry.workers),
        now=now,
        deadline=deadline,
    )


def quiet_reply_to_bytes(plain: str, raw: bytes, now, deadline) -> bytes | None:
    """`quiet_reply` for a body byte for byte the one last answered quietly: nothing to
    parse (the same facts, the same reports), only the one UPDATE."""
    prefix = split_prefix(plain, NODE_KIND)
    entry = _replies.get(prefix) if prefix else None
    if entry is None or not entry.body or entry.body != _hash(raw):
        return None
    token = digest_of(plain)
    if not hmac.compare_digest(token, entry.token_digest):
        return None
    if not _seen(entry, token, now, deadline):
        _replies.pop(prefix, None)
        return None
    return entry.reply


def quiet_reply(plain: str, items: HeartbeatItems, now, deadline, raw: bytes = b"") -> bytes | None:
    """The reply to a heartbeat where nothing changed, after its one UPDATE; None when the
    full path must answer (nothing was written then)."""
    prefix = split_prefix(plain, NODE_KIND)
    if prefix is None or not _is_plain(items):
        return None
    entry = _replies.get(prefix)
    if entry is None:
        return _first_idle_reply(prefix, plain, items, now, deadline, raw)
    workers = frozenset((w.pod_id, w.attempt) for w in items.workers)
    token = digest_of(plain)
    if workers != entry.workers or not hmac.compare_digest(token, entry.token_digest):
        return None
    digest = _digest_of_facts(items)
    if digest != entry.report_digest:
        return None
    if not _seen(entry, token, now, deadline):
        _replies.pop(prefix, None)
        return None
    if raw:
        _replies[prefix] = dataclasses.replace(entry, body=_hash(raw))
    return entry.reply


def _first_idle_reply(prefix: str, plain: str, items: HeartbeatItems, now, deadline, raw: bytes):
    """A node without workers that this process has not answered yet (a new process, or
    another of the server's processes answered it last): its reply needs nothing from the
    database, so the UPDATE alone (found by the token's prefix) answers it, and is kept."""
    if items.workers:
        return None  # the reply lists the workers' specs: the full path reads them once
    token, digest = digest_of(plain), _digest_of_facts(items)
    node_id = note_node_seen_by_token(
        prefix, digest, token, _pods_are_exactly(frozenset()), now=now, deadline=deadline
    )
    if node_id is None:
        return None
    body = idle_node_reply().model_dump_json().encode()
    _keep(prefix, _Quiet(node_id, token, digest, frozenset(), body, _hash(raw) if raw else b""))
    return body


def _keep(prefix: str, entry: _Quiet) -> None:
    with _lock:
        if len(_replies) >= MAX_ENTRIES:
            _replies.clear()
        _replies[prefix] = entry


def remember(
    node_id: int, plain: str, items: HeartbeatItems, reply: HeartbeatReply, raw: bytes = b""
) -> bytes:
    """The full path's reply, serialised; kept for the next heartbeat when a quiet one could
    send it again (it lists exactly the workers reported running, stops none, refuses
    nothing)."""
    body = reply.model_dump_json().encode()
    digest = "" if items.refused_gpus else _digest_of_facts(items)
    prefix = split_prefix(plain, NODE_KIND)
    workers = frozenset((w.pod_id, w.attempt) for w in items.workers)
    listed = frozenset((s.pod_id, s.attempt) for s in reply.run)
    quiet = (
        prefix is not None
        and bool(digest)
        and _is_plain(items)
        and not reply.stop
        and not reply.refused
        and not reply.clear_health_marks
        and listed == workers
    )
    if not quiet:
        with _lock:
            _replies.pop(prefix, None)
    else:
        entry = _Quiet(node_id, digest_of(plain), digest, workers, body, _hash(raw) if raw else b"")
        _keep(prefix, entry)
    return body
