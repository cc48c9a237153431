"""The live pods of the cycle's snapshot, summed per quota, per job and per node; kept between
cycles on PostgreSQL (docs/scheduling.md, "The snapshot's live pods").

Summing every live pod was most of a cycle at fleet size (16,000 pods at 2,000 nodes:
`bench/fleet_cycle.py --profile`). A pod's placement (its job, node, GPUs, CPUs and memory)
is written once, in the INSERT that creates it (`jobs.actions.scheduling`,
`jobs.actions.restarts`); while it lives, only its start time and its charge (a charge moved
home) change, and its status, which here only says live or not. So on PostgreSQL each
process keeps the sums of its last read with the pods they were made of, and a read asks the
database for the live pods' ids with those changeable columns and their creation time (the
pod's key: an id reused after a restore cannot pass for the old pod). Pods gone or changed
are taken out of the sums; the whole rows of new and changed pods are read and added. Any
write to those columns, by any code path, changes the key, so a missed write can only cost a
re-read. The memory is dropped every REBUILD_AFTER_S and on any error; when more than half
the pods are unseen, every row is read again. Elsewhere (SQLite, pages, the forecast) every
read sums every row, with the same code.
"""

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast

from jobs.models import Pod
from jobs.scheduler.versions import FETCH_ALL_SHARE, ID_CHUNK, REBUILD_AFTER_S
from policy.statuses import ACTIVE_POD_STATUSES

__all__ = ["Holding", "LiveUse", "NodeUse", "QuotaUse", "forget", "read_live_use"]

_ROW = (  # and `gpu_indices`, read as text (_gpu_list)
    "id",
    "job_id",
    "node_id",
    "gpus",
    "cpus",
    "memory_gb",
    "charged_quota_id",
    "in_quota",
    "started_at",
    "created_at",
    "attempt",
    "rank",
)
_KEY = ("created_at", "started_at", "charged_quota_id", "in_quota")


@dataclass(slots=True)
class QuotaUse:
    """What the live workers charged to a quota hold."""

    gpus: int = 0
    cpus: int = 0
    memory_gb: int = 0
    borrowed_gpus: int = 0  # of `gpus`: held by pods not in quota (lent out)


@dataclass(slots=True)
class Holding:
    """A job's live workers: where they run and whose capacity they use."""

    charged_quota_id: int
    in_quota: bool
    gpus_by_node: list[tuple[int | None, int]] = field(default_factory=list)
    last_started_at: datetime | None = None
    charges: list[int] = field(default_factory=list)  # per worker: pooled jobs have several
    pods_in_quota: list[bool] = field(default_factory=list)  # per worker (fair share by pod)


@dataclass(slots=True)
class NodeUse:
    busy_gpus: set[int] = field(default_factory=set)
    cpus: int = 0
    memory_gb: int = 0


@dataclass
class LiveUse:
    """The live workers summed per quota, per job and per node. A snapshot's own: the
    kept sums are copied out, never handed over."""

    quotas: dict[int, QuotaUse] = field(default_factory=dict)
    holdings: dict[int, Holding] = field(default_factory=dict)
    pods_per_job: dict[int, int] = field(default_factory=dict)
    nodes: dict[int, NodeUse] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LivePod:
    id: int
    job_id: int
    node_id: int | None
    gpu_indices: tuple[int, ...]
    gpus: int
    cpus: int
    memory_gb: int
    charged_quota_id: int
    in_quota: bool
    started_at: datetime | None
    key: tuple
    order: tuple[int, int]  # (attempt, rank): a job's workers in rank order, older first


@dataclass(slots=True)
class _NodeSums:
    gpus: Counter = field(default_factory=Counter)  # a GPU is busy while any pod holds it
    cpus: int = 0
    memory_gb: int = 0


class _Sums:
    """Pods by id and job, and their sums per quota and node, kept right by `change`;
    holdings are rebuilt, whole, for the jobs whose pods changed."""

    def __init__(self) -> None:
        self.pods: dict[int, LivePod] = {}
        self.by_job: dict[int, dict[int, LivePod]] = defaultdict(dict)
        self.quotas: dict[int, QuotaUse] = defaultdict(QuotaUse)
        self.nodes: dict[int, _NodeSums] = defaultdict(_NodeSums)
        self.holdings: dict[int, Holding] = {}
        self.since = time.monotonic()

    def change(self, gone: Iterable[LivePod], new: Iterable[LivePod]) -> None:
        touched: set[int] = set()
        for pod in gone:
            self._count(pod, -1)
            del self.pods[pod.id]
            del self.by_job[pod.job_id][pod.id]
            touched.add(pod.job_id)
        for pod in new:
            self._count(pod, 1)
            self.pods[pod.id] = pod
            self.by_job[pod.job_id][pod.id] = pod
            touched.add(pod.job_id)
        for job_id in touched:
            pods = self.by_job.get(job_id)
            if pods:
                self.holdings[job_id] = _holding(sorted(pods.values(), key=_in_order))
            else:
                self.by_job.pop(job_id, None)
                self.holdings.pop(job_id, None)

    def _count(self, pod: LivePod, sign: int) -> None:
        charged = self.quotas[pod.charged_quota_id]
        charged.gpus += sign * pod.gpus
        charged.cpus += sign * pod.cpus
        charged.memory_gb += sign * pod.memory_gb
        if not pod.in_quota:
            charged.borrowed_gpus += sign * pod.gpus
        if pod.node_id is not None:
            node = self.nodes[pod.node_id]
            for index in pod.gpu_indices:
                holders = node.gpus[index] + sign
                if holders > 0:
                    node.gpus[index] = holders
                else:
                    del node.gpus[index]  # no pod holds it any more
            node.cpus += sign * pod.cpus
            node.memory_gb += sign * pod.memory_gb

    def use(self) -> LiveUse:
        """A copy of the sums for one snapshot."""
        return LiveUse(
            quotas={
                q: QuotaUse(u.gpus, u.cpus, u.memory_gb, u.borrowed_gpus)
                for q, u in self.quotas.items()
                if u.gpus or u.cpus or u.memory_gb
            },
            holdings=dict(self.holdings),  # rebuilt, never changed, when their pods change
            pods_per_job={job: len(pods) for job, pods in self.by_job.items()},
            nodes={
                n: NodeUse(set(s.gpus), s.cpus, s.memory_gb)
                for n, s in self.nodes.items()
                if s.gpus or s.cpus or s.memory_gb
            },
        )


def _in_order(pod: LivePod) -> tuple[int, int]:
    return pod.order


def _holding(pods: list[LivePod]) -> Holding:
    first = pods[0]
    started = [p.started_at for p in pods if p.started_at]
    return Holding(
        charged_quota_id=first.charged_quota_id,
        in_quota=first.in_quota,
        gpus_by_node=[(p.node_id, p.gpus) for p in pods],
        last_started_at=max(started) if started else None,
        charges=[p.charged_quota_id for p in pods],
        pods_in_quota=[p.in_quota for p in pods],
    )


def _live():
    # Unordered: the sums do not depend on the order, holdings are sorted per job.
    return Pod.objects.filter(status__in=[s.value for s in ACTIVE_POD_STATUSES]).order_by()


def _decode(rows) -> list[LivePod]:
    # A pod holds one of a few GPU lists: each distinct text is parsed once per read.
    parsed: dict[str, tuple[int, ...]] = {}
    pods = []
    for row in rows:
        text = row.gpu_indices_text
        indices = parsed.get(text)
        if indices is None:
            indices = parsed[text] = _gpu_list(text)
        pods.append(
            LivePod(
                row.id,
                row.job_id,
                row.node_id,
                indices,
                row.gpus,
                row.cpus,
                row.memory_gb,
                row.charged_quota_id,
                row.in_quota,
                row.started_at,
                (row.created_at, row.started_at, row.charged_quota_id, row.in_quota),
                (row.attempt, row.rank),
            )
        )
    return pods


def _gpu_list(text: str | None) -> tuple[int, ...]:
    value = json.loads(text) if text else None
    return tuple(value) if isinstance(value, list) else ()


def _rows(pods):
    pods = pods.annotate(gpu_indices_text=Cast("gpu_indices", TextField()))
    return pods.values_list(*_ROW, "gpu_indices_text", named=True)


def _summed(pods: Iterable[LivePod]) -> _Sums:
    sums = _Sums()
    sums.change((), pods)
    return sums


class _Kept:
    """This process's sums of its last read (the cycle's, on PostgreSQL)."""

    def __init__(self) -> None:
        self.sums: _Sums | None = None
        self.lock = threading.Lock()


_kept = _Kept()


def forget() -> None:
    """Drop this process's sums: the next read sums every live pod."""
    with _kept.lock:
        _kept.sums = None


def read_live_use(*, incremental: bool = False) -> LiveUse:
    """The live workers summed. A GPU is busy while any live worker holds it, whatever its
    job's status: a stopped job's worker keeps its GPUs until it has exited.
    `incremental` (the cycle, on PostgreSQL): only new and changed pods are read whole."""
    if not incremental or connection.vendor != "postgresql":
        return _summed(_decode(_rows(_live()))).use()
    with _kept.lock:
        try:
            sums = _kept.sums
            if sums is None or time.monotonic() - sums.since > REBUILD_AFTER_S:
                sums = None
            _kept.sums = sums = _read_changes(sums)
            return sums.use()
        except Exception:
            _kept.sums = None  # on any doubt, start again from the database
            raise


def _read_changes(sums: _Sums | None) -> _Sums:
    if sums is None:
        return _summed(_decode(_rows(_live())))
    keys = {row[0]: row[1:] for row in _live().values_list("id", *_KEY)}  # id → key
    gone, unseen = [], []
    for pod_id, pod in sums.pods.items():
        if keys.get(pod_id) != pod.key:
            gone.append(pod)
    for pod_id, key in keys.items():
        pod = sums.pods.get(pod_id)
        if pod is None or pod.key != key:
            unseen.append(pod_id)
    if len(unseen) * FETCH_ALL_SHARE > len(keys):
        return _summed(_decode(_rows(_live())))
    # Read after the keys: a pod changed meanwhile comes back newer, with its own key; one
    # that ended meanwhile does not come back and is not live.
    new = []
    for i in range(0, len(unseen), ID_CHUNK):
        new += _decode(_rows(_live().filter(id__in=unseen[i : i + ID_CHUNK])))
    sums.change(gone, new)
    return sums
