"""The quiet heartbeat's memory (docs/agent-protocol.md): the reply this process sent a node
last time, for a heartbeat that repeats the last one.

Most heartbeats repeat the last one: the same facts and GPUs, the same workers running as
known, nothing refused. Such a heartbeat is answered with the reply sent last time to this
node (kept per process, keyed by the token's prefix), once one UPDATE of the node's row has
confirmed that nothing it stands for changed (`agents.heartbeat.actions`, which builds and
runs that statement). A node with no workers needs no such memory: its reply is the same
for every idle node, so its first heartbeat to a process can be quiet too.

This module only remembers and says what a heartbeat could be answered with (`known`,
`could_repeat`); it reads and writes nothing in the database. Anything the remembered reply
cannot answer (a report with an exit, progress, checkpoints, a GPU sample, a refused item,
a health mark) takes the full path.

The remembered worker specs carry `log_next_seq` as it was then: an agent reads the specs
only of pods it has not launched, and in a quiet heartbeat every listed pod is one the
agent reports running.
"""

import dataclasses
import hashlib
import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass

from accounts.tokens import digest_of
from agents.actions import fact_fields, gpu_rows
from agents.decisions import report_digest
from protocol.agent import HeartbeatReply
from protocol.batches import HeartbeatItems

# One entry per node that heartbeats to this process; a node that re-registers gets a new
# prefix, and its old entry can never match again (its token digest is gone from the row).
MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class Quiet:
    """What a quiet heartbeat stands for, and its answer."""

    prefix: str  # of the node's token (unique): the row the statement finds
    token_digest: str  # sha256 of the presented token: must still be the node's live one
    report_digest: str  # of the facts and GPUs: must still be the one on the node's row
    workers: frozenset[tuple[int, int]]  # (pod id, attempt): exactly the node's live pods
    reply: bytes
    body: bytes = b""  # a hash of the request body last answered so (the same bytes: no parse)


_replies: dict[str, Quiet] = {}
_lock = threading.Lock()


def forget_all() -> None:
    """Drop every remembered reply (tests; nothing depends on it for correctness)."""
    with _lock:
        _replies.clear()


def forget(prefix: str) -> None:
    with _lock:
        _replies.pop(prefix, None)


def keep(entry: Quiet) -> None:
    with _lock:
        if len(_replies) >= MAX_ENTRIES:
            _replies.clear()
        _replies[entry.prefix] = entry


def hash_body(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def known(prefix: str, plain: str, body: bytes) -> Quiet | None:
    """The entry for a request body byte for byte the one last answered quietly: nothing to
    parse (the same facts, the same reports), only the statement to run."""
    entry = _replies.get(prefix)
    if entry is None or not entry.body or entry.body != body:
        return None
    return entry if hmac.compare_digest(digest_of(plain), entry.token_digest) else None


def could_repeat(
    prefix: str, plain: str, items: HeartbeatItems, body: bytes, idle: Callable[[], bytes]
) -> Quiet | None:
    """What a parsed heartbeat could be answered with if the statement confirms it: the
    remembered reply (the same workers, token and facts), or for a node without workers
    that this process has not answered yet (a new process, or another of the server's
    processes answered it last) `idle()`, the reply of every idle node. None: the full
    path answers."""
    if not _is_plain(items):
        return None
    entry = _replies.get(prefix)
    token = digest_of(plain)
    if entry is None:
        if items.workers:
            return None  # the reply lists the workers' specs: the full path reads them once
        return Quiet(prefix, token, _digest_of_facts(items), frozenset(), idle(), body)
    workers = frozenset((w.pod_id, w.attempt) for w in items.workers)
    if workers != entry.workers or not hmac.compare_digest(token, entry.token_digest):
        return None
    if _digest_of_facts(items) != entry.report_digest:
        return None
    return entry if entry.body == body else dataclasses.replace(entry, body=body)


def remember(
    prefix: str | None, plain: str, items: HeartbeatItems, reply: HeartbeatReply, body: bytes
) -> bytes:
    """The full path's reply, serialised; kept for the next heartbeat when a quiet one could
    send it again (it lists exactly the workers reported running, stops none, refuses
    nothing)."""
    serialised = reply.model_dump_json().encode()
    if prefix is None:
        return serialised
    digest = "" if items.refused_gpus else _digest_of_facts(items)
    workers = frozenset((w.pod_id, w.attempt) for w in items.workers)
    listed = frozenset((s.pod_id, s.attempt) for s in reply.run)
    if digest and _is_plain(items) and listed == workers and _repeatable(reply):
        keep(Quiet(prefix, digest_of(plain), digest, workers, serialised, body))
    else:
        forget(prefix)
    return serialised


def _repeatable(reply: HeartbeatReply) -> bool:
    return not reply.stop and not reply.refused and not reply.clear_health_marks


def _digest_of_facts(items: HeartbeatItems) -> str:
    return report_digest(fact_fields(items.facts), gpu_rows(items.facts))


def _is_plain(items: HeartbeatItems) -> bool:
    """A heartbeat a remembered reply can answer: nothing refused, no health mark, and
    every worker reported running with nothing but that to say."""
    if items.refused or items.refused_gpus or items.unnamed or items.logs is not None:
        return False
    if any(g.health_mark for g in items.facts.gpus):
        return False
    return all(
        w.state == "running"
        and w.progress is None
        and not w.checkpoints
        and not w.units
        and w.facts is None
        and w.gpu is None
        and not w.error
        for w in items.workers
    )
