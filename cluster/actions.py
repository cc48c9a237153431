"""Every write to the cluster's inventory: node state from the node monitor, operators'
cordons and cleared GPU health marks. Compare-and-set on the state the caller saw, so two
monitors never act twice. (One statement writes a node's row elsewhere: the quiet
heartbeat's, guarded in the same UPDATE by the node's pods, which this room cannot see:
`agents.heartbeat.actions`.)"""

import hmac
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.dispatch import Signal

from cluster.models import POOL_FIELDS, POOL_STATES, GpuDevice, Node, NodeState
from protocol import limits
from protocol.text import fit

# Sent inside the transaction of an UPDATE that changed what admission reads of the nodes
# (a node's kind or size, or Lost <-> Ready; saves and deletes send Django's post_save and
# post_delete): jobs.admission.cache listens (docs/processes.md, "Caches").
pool_changed = Signal()

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
    "health_mark",
    "pci_bus_id",
    "mig_enabled",
    "mig_instances",
    "updated_at",
]


class NameTaken(Exception):
    """A node of this name is registered and no operator allowed it to register again."""


def may_take_over(node: Node) -> bool:
    """Whether a registration may replace this node's token: it has no live token (never
    registered by an agent, or revoked by an operator), or an operator allowed it."""
    return (
        not node.token_digest
        or node.token_revoked_at is not None
        or node.reregistration_allowed_at is not None
    )


def save_registration(name: str, fields: dict, *, repeats: str = "") -> tuple[Node, bool]:
    """Create the node `name`, or replace the facts and token of the existing one if it may
    be taken over (raises NameTaken). `repeats`: the digest of the registration key of a
    request the caller found to repeat this node's last registration (same token, soon
    after): it may replace the token if the node's digest is that one. Call inside a
    transaction: the row is locked while checked. Returns the node and whether it was
    created."""
    node = Node.objects.select_for_update().filter(name=name).first()
    if node is None:
        try:
            with transaction.atomic():
                return Node.objects.create(name=name, **fields), True
        except IntegrityError:  # another agent registered this very name at this moment
            raise NameTaken(name) from None
    repeated = bool(repeats) and hmac.compare_digest(node.registration_key_digest, repeats)
    if not (repeated or may_take_over(node)):
        raise NameTaken(name)
    fields = {**fields, "reregistration_allowed_at": None}
    Node.objects.filter(pk=node.pk).update(**fields)
    pool_changed.send(sender=Node)
    node.refresh_from_db()
    return node, False


def allow_reregistration(nodes: QuerySet[Node], now: datetime) -> list[Node]:
    """Let the next registration of each of these names replace its token."""
    chosen = list(nodes.filter(reregistration_allowed_at__isnull=True))
    Node.objects.filter(pk__in=[n.pk for n in chosen]).update(reregistration_allowed_at=now)
    return chosen


def record_node_alive(
    node_id: int, fields: dict, *, now: datetime, deadline: datetime, digest: str = ""
) -> None:
    """A heartbeat was received at `now`: the node is Ready, its facts as reported (and
    their digest), and it must be heard from again before `deadline`. A plain UPDATE by id
    (last writer wins: every heartbeat carries the full facts). Where the node's kind, size
    or pool membership changes (rarely) a second UPDATE writes it and tells admission."""
    values = {
        **fields,
        "report_digest": digest,
        "state": NodeState.READY,
        "last_heartbeat_at": now,
        "heartbeat_deadline": deadline,
    }
    same = {name: fields[name] for name in POOL_FIELDS if name in fields}
    if Node.objects.filter(pk=node_id, state__in=POOL_STATES, **same).update(**values):
        return
    if Node.objects.filter(pk=node_id).update(**values):
        pool_changed.send(sender=Node)


def note_node_seen(node_id: int, digest: str, *, now: datetime, deadline: datetime) -> bool:
    """The heartbeat of a node whose facts and GPUs are as last recorded: Ready, seen at
    `now`, one UPDATE. The digest is compared in SQL, so a registration or a heartbeat
    that recorded other facts meanwhile makes it miss (False): then record them. So does a
    Lost node: its return changes admission's pool (`record_node_alive` tells it)."""
    if not digest:
        return False
    return bool(
        Node.objects.filter(pk=node_id, report_digest=digest, state__in=POOL_STATES).update(
            state=NodeState.READY, last_heartbeat_at=now, heartbeat_deadline=deadline
        )
    )


def upsert_gpus(node_id: int, gpus: Sequence[dict], *, known_count: int | None) -> None:
    """One bulk upsert for all reported devices; devices that vanished are marked unhealthy
    (kept, not deleted, so the history and the scheduler see why capacity shrank). The
    second query runs only when the device count changed."""
    GpuDevice.objects.bulk_create(
        [GpuDevice(node_id=node_id, **g) for g in gpus],
        update_conflicts=True,
        unique_fields=["node", "index"],
        update_fields=_GPU_FIELDS,
    )
    if known_count != len(gpus):
        GpuDevice.objects.filter(node_id=node_id).exclude(
            index__in=[g["index"] for g in gpus]
        ).update(healthy=False, health_reason=MISSING_GPU, utilization=None, memory_used_mb=0)


def clear_health_marks(devices: QuerySet[GpuDevice], now: datetime) -> int:
    """An operator has checked (or reset) these GPUs: clear the agent's current Xid mark on
    each. Only the mark as last reported is cleared; one the agent sets afterwards has a
    newer id and stays. Returns how many marks were cleared."""
    return devices.filter(health_mark__gt=F("health_cleared_mark")).update(
        health_cleared_mark=F("health_mark"), health_cleared_at=now
    )


def health_marks_to_clear(node_id: int) -> list[tuple[str, int]]:
    """(uuid, mark) the node's agent should drop: reported marks an operator has cleared.
    Level-triggered: asked for again in every reply until the agent stops reporting them."""
    return list(
        GpuDevice.objects.filter(
            node_id=node_id, health_mark__gt=0, health_cleared_mark__gte=F("health_mark")
        )
        .exclude(uuid="")
        .values_list("uuid", "health_mark")
    )


def refuse_gpu_reports(node_id: int, refused: dict[int, str]) -> None:
    """GPUs whose reports the console could not read: unhealthy, with the reason, so the
    scheduler places nothing on a device it knows nothing about."""
    for index, reason in refused.items():
        GpuDevice.objects.filter(node_id=node_id, index=index).update(
            healthy=False, health_reason=fit(f"report refused: {reason}", limits.GPU_REASON)
        )


def revoke_node_tokens(nodes: QuerySet[Node], now: datetime) -> int:
    """Lock the agents of these nodes out; they must register again."""
    return nodes.filter(token_revoked_at__isnull=True).update(token_revoked_at=now)


def mark_node_not_ready(node_id: int, now: datetime) -> bool:
    """Ready → NotReady once its heartbeat deadline has passed; False if it heartbeated
    meanwhile or another monitor got there first."""
    return bool(
        Node.objects.filter(pk=node_id, state=NodeState.READY, heartbeat_deadline__lt=now).update(
            state=NodeState.NOT_READY
        )
    )


def mark_node_lost(node_id: int, cutoff: datetime) -> bool:
    """NotReady → Lost when it has been silent since before `cutoff`."""
    lost = bool(
        Node.objects.filter(
            pk=node_id, state=NodeState.NOT_READY, last_heartbeat_at__lt=cutoff
        ).update(state=NodeState.LOST)
    )
    if lost:
        pool_changed.send(sender=Node)
    return lost


def set_cordoned(nodes: QuerySet[Node] | Iterable[int], cordoned: bool) -> int:
    """Cordon (no new work placed) or uncordon nodes; returns how many changed. Uncordoning
    also ends a drain."""
    query = nodes if isinstance(nodes, QuerySet) else Node.objects.filter(pk__in=list(nodes))
    if cordoned:
        return query.filter(cordoned=False).update(cordoned=True)
    return query.filter(Q(cordoned=True) | Q(drain_requested_at__isnull=False)).update(
        cordoned=False, drain_requested_at=None
    )


def drain(nodes: QuerySet[Node] | Iterable[int], now: datetime) -> int:
    """Drain nodes: no new work is placed (cordon) and the work running there finishes on
    its own (nothing is stopped). Returns how many started draining."""
    query = nodes if isinstance(nodes, QuerySet) else Node.objects.filter(pk__in=list(nodes))
    return query.filter(drain_requested_at__isnull=True).update(
        cordoned=True, drain_requested_at=now
    )


KUBERNETES = "kubernetes"  # Node.runtime of the nodes of a Kubernetes cluster (kube)


def sync_cluster_node(
    name: str, fields: dict, gpus: Sequence[dict], *, alive: bool, now: datetime, deadline
) -> int | None:
    """A node of the configured Kubernetes cluster as the console's inventory
    (docs/kubernetes.md): its facts and GPU slots as the controller computed them; while
    Kubernetes reports it Ready it is seen now (the controller stands in for its
    heartbeats, so the node monitor's NotReady/Lost timers apply when it is not). A name
    registered by an agent is never taken over: None."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is not None and node.runtime != KUBERNETES:
            return None
        seen = {"last_heartbeat_at": now, "heartbeat_deadline": deadline} if alive else {}
        if node is None:
            node = Node.objects.create(
                name=name,
                runtime=KUBERNETES,
                state=NodeState.READY if alive else NodeState.NOT_READY,
                **fields,
                **seen,
            )
            known = None
        else:
            state = {"state": NodeState.READY} if alive else {}
            Node.objects.filter(pk=node.pk).update(**fields, **seen, **state)
            known = node.gpus
            # The row is locked: its old values hold until this commits.
            back = alive and node.state not in POOL_STATES
            if back or any(getattr(node, k) != v for k, v in fields.items() if k in POOL_FIELDS):
                pool_changed.send(sender=Node)
        upsert_gpus(node.pk, list(gpus), known_count=known)
    return node.pk
