"""What the usage pages show, computed from the scheduler's own snapshot (pure).

Every number here is derived from the `Snapshot` that `jobs.scheduler.cycle.load_snapshot`
builds for `plan()`: a quota's "used" is the scheduler's `QuotaSnap.used_gpus`, its "Not in
Quota" share is `QuotaSnap.borrowed_gpus`, the queue is the snapshot's waiting jobs, and a
pool's free GPUs are the free indices of its schedulable nodes. So the dashboard can never
disagree with the scheduler about what is free: they read the same numbers.

Words, as a quota owner reads them (Run:ai's deserved / allocated / over-quota):
- size: the quota's guaranteed GPUs;
- in quota: GPUs its own jobs hold within the guarantee (`In Quota` pods);
- idle own: its own idle jobs on its own capacity (Not in Quota, charged here);
- lent: other quotas' idle jobs on its capacity (Not in Quota, charged here);
- borrowed: its own idle jobs on other quotas' capacity (charged there);
- starved: a job waits although the guarantee has room for it (lent out, or no free node).

On a quota tree (docs/quota-tree.md "Accounting") the numbers above are each quota's own:
`size` stays its `gpus` (the whole subtree's guarantee), `own` is what its children leave it,
and `used`/`free` are measured against `own` (pods are charged to the guarantee they use).
Each level also shows its subtree's use: what the subtree's jobs hold anywhere
(`subtree_used`), what the subtree lends outside itself (`subtree_lent`) and borrows from
outside (`subtree_borrowed`). For a flat quota these equal its own numbers.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from policy.scheduler.model import JobSnap, PoolKey, QuotaSnap, RunningSnap, Snapshot
from policy.scheduler.tree import QuotaTree
from policy.statuses import IdleResources
from policy.tree_rules import roots_guarantee


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    id: int
    name: str
    tenant_id: int
    resource_type: str
    gpu_type: str
    size: int
    used: int  # every GPU charged here (the scheduler's used_gpus)
    in_quota: int  # of used: its own jobs' In Quota pods
    idle_own: int  # of used: its own idle jobs (Not in Quota)
    lent: int  # of used: other quotas' idle jobs (Not in Quota)
    borrowed: int  # its jobs on other quotas' capacity (not part of used)
    waiting: int  # jobs in the scheduler's queue for this quota
    waiting_guaranteed: int  # of waiting: jobs that want the guarantee (not Only Idle)
    oldest_wait: datetime | None
    smallest_need: int | None = None  # GPUs of the smallest waiting job that wants the guarantee
    # The tree (docs/quota-tree.md); account() fills these, a flat quota's equal its own.
    own: int = 0  # its own guarantee: size less its children's sizes
    parent_id: int | None = None
    depth: int = 0  # 0 for a root
    max_gpus: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    subtree_used: int = 0  # GPUs the jobs of its subtree hold, here or borrowed
    subtree_lent: int = 0  # GPUs charged inside its subtree to jobs from outside it
    subtree_borrowed: int = 0  # GPUs its subtree's jobs hold outside the subtree
    has_children: bool = False

    @property
    def in_tree(self) -> bool:
        """Part of a tree, or limited: the pages then show the tree's numbers too."""
        return (
            self.parent_id is not None
            or self.has_children
            or self.max_gpus is not None
            or self.lending_limit is not None
        )

    @property
    def free(self) -> int:
        return max(self.own - self.used, 0)

    @property
    def starved(self) -> bool:
        """A job waits although the guarantee has room for it: its GPUs are lent out or no
        node has them free (Run:ai's "starved": below its deserved share with work
        pending). A quota whose own jobs fill the guarantee is full, not starved."""
        need = self.smallest_need
        return need is not None and self.in_quota + need <= self.own

    def percent(self, value: int) -> float:
        """`value` as a share of the bar (its own guarantee, or what is held when over it)."""
        scale = max(self.own, self.used + self.borrowed, 1)
        return round(100.0 * value / scale, 2)


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """One GPU type of the cluster, as the scheduler sees it."""

    resource_type: str
    gpu_type: str
    total: int  # GPUs on every node of the pool
    in_use: int  # GPUs held by live workers (charged to the pool's quotas)
    free: int  # free GPUs on schedulable nodes: what the scheduler can place on
    unavailable: int  # the rest: cordoned, not ready or unhealthy nodes' GPUs
    guaranteed: int  # the sum of the pool's roots' guarantees (children carve theirs out)

    @property
    def overcommitted(self) -> bool:
        """The quotas promise more GPUs of this type than the cluster has."""
        return self.guaranteed > self.total


@dataclass(frozen=True, slots=True)
class Borrow:
    """A placed idle job using another quota's capacity (Not in Quota)."""

    job_id: int
    job_name: str
    borrower_id: int  # the job's own quota
    lender_id: int  # the quota its pods are charged to
    gpus: int
    since: datetime | None


@dataclass(frozen=True, slots=True)
class PooledIdle:
    """Lingjun: unused guarantees of one tenant's quotas of one GPU type, which any idle
    job of the tenant may borrow (docs/scheduling.md); `free_on_nodes` bounds what can start."""

    tenant_id: int
    gpu_type: str
    unused: int
    quotas: tuple[str, ...]
    free_on_nodes: int


@dataclass(frozen=True, slots=True)
class Accounting:
    quotas: dict[int, QuotaUsage] = field(default_factory=dict)
    pools: tuple[PoolUsage, ...] = ()
    borrows: tuple[Borrow, ...] = ()
    pooled_idle: tuple[PooledIdle, ...] = ()

    def pool(self, key: PoolKey) -> PoolUsage | None:
        return next((p for p in self.pools if (p.resource_type, p.gpu_type) == key), None)


def _held_by_own_quota(running: Iterable[RunningSnap]) -> dict[int, tuple[int, int]]:
    """Per quota: (its idle jobs' GPUs on its own capacity, its jobs' GPUs elsewhere)."""
    held: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in running:
        if r.in_quota:
            continue
        own = r.gpus_charged_to(r.quota_id)  # a pooled job may be charged to several
        held[r.quota_id][0] += own
        held[r.quota_id][1] += r.gpus - own
    return {qid: (own, away) for qid, (own, away) in held.items()}


def _queues(jobs: Iterable[JobSnap]) -> dict[int, tuple]:
    """Per quota: (waiting, waiting for the guarantee, oldest wait, smallest guaranteed need)."""
    queues: dict[int, list] = defaultdict(lambda: [0, 0, None, None])
    for job in jobs:
        entry = queues[job.quota_id]
        entry[0] += 1
        if job.idle_resources != IdleResources.ONLY:
            entry[1] += 1
            if entry[3] is None or job.total_gpus < entry[3]:
                entry[3] = job.total_gpus
        since = job.waiting_since or job.submitted_at
        if entry[2] is None or since < entry[2]:
            entry[2] = since
    return {qid: tuple(entry) for qid, entry in queues.items()}


def quota_usage(quota: QuotaSnap, idle_own: int, borrowed: int, queue) -> QuotaUsage:
    waiting, waiting_guaranteed, oldest, smallest = queue
    idle_own = min(idle_own, quota.borrowed_gpus)
    return QuotaUsage(
        id=quota.id,
        name=quota.name,
        tenant_id=quota.tenant_id,
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        size=quota.gpus,
        used=quota.used_gpus,
        in_quota=quota.guaranteed_gpus,
        idle_own=idle_own,
        lent=quota.borrowed_gpus - idle_own,
        borrowed=borrowed,
        waiting=waiting,
        waiting_guaranteed=waiting_guaranteed,
        oldest_wait=oldest,
        smallest_need=smallest,
        own=quota.gpus,
    )


def account(snapshot: Snapshot) -> Accounting:
    """Usage of every quota and pool, who borrows from whom, and pooled idle capacity."""
    held = _held_by_own_quota(snapshot.running)
    queues = _queues(snapshot.jobs)
    flat = {
        q.id: quota_usage(q, *held.get(q.id, (0, 0)), queues.get(q.id, (0, 0, None, None)))
        for q in snapshot.quotas
    }
    tree = QuotaTree.of(snapshot.quotas)
    quotas = _with_tree(flat, tree, snapshot.running)

    totals: dict[PoolKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # total, free, use, g
    for node in snapshot.nodes:
        entry = totals[node.pool]
        entry[0] += node.gpus
        if node.schedulable:
            entry[1] += len(node.free_gpu_indices)
    by_pool: dict[PoolKey, list[QuotaSnap]] = defaultdict(list)
    for q in snapshot.quotas:
        totals[q.pool][2] += q.used_gpus
        by_pool[q.pool].append(q)
    for key, members in by_pool.items():
        totals[key][3] = roots_guarantee(members)
    pools = tuple(
        PoolUsage(
            resource_type=key[0],
            gpu_type=key[1],
            total=total,
            in_use=in_use,
            free=free,
            unavailable=max(total - in_use - free, 0),
            guaranteed=guaranteed,
        )
        for key, (total, free, in_use, guaranteed) in sorted(totals.items())
    )

    borrows = tuple(  # one row per lender: a pooled idle job borrows from each
        Borrow(r.id, r.name, r.quota_id, lender, r.gpus_charged_to(lender), r.started_at)
        for r in sorted(snapshot.running, key=lambda r: r.id)
        if not r.in_quota
        for lender in r.lenders
    )

    lingjun: dict[tuple[int, str], list[QuotaSnap]] = defaultdict(list)
    for q in snapshot.quotas:
        if q.resource_type == "Lingjun":
            lingjun[(q.tenant_id, q.gpu_type)].append(q)
    free_by_pool = {(p.resource_type, p.gpu_type): p.free for p in pools}
    pooled = tuple(
        PooledIdle(
            tenant_id=tenant_id,
            gpu_type=gpu_type,
            unused=sum(max(tree.own_gpus(q.id) - q.used_gpus, 0) for q in members),
            quotas=tuple(sorted(q.name for q in members)),
            free_on_nodes=free_by_pool.get(("Lingjun", gpu_type), 0),
        )
        for (tenant_id, gpu_type), members in sorted(lingjun.items())
    )
    return Accounting(quotas=quotas, pools=pools, borrows=borrows, pooled_idle=pooled)


def roll_up(
    tree: QuotaTree,
    held: dict[int, int],
    crossings: Iterable[tuple[int, int, int]],
) -> dict[int, tuple[int, int, int]]:
    """Per quota of `tree`: (GPUs its subtree's jobs hold, GPUs its subtree lends outside
    itself, GPUs its subtree borrows from outside). `held`: GPUs each quota's own jobs hold
    anywhere; `crossings`: (job's quota, quota charged, GPUs) of Not in Quota workers. The
    dashboard, `quota_usage`, the API and `/metrics` all roll up through here."""
    lent: dict[int, int] = defaultdict(int)
    borrowed: dict[int, int] = defaultdict(int)
    for borrower_id, lender_id, gpus in crossings:
        if borrower_id not in tree.quotas or lender_id not in tree.quotas:
            continue
        borrower = tree.path(borrower_id)
        lender = tree.path(lender_id)
        for q in lender:
            if q not in borrower:
                lent[q] += gpus
        for q in borrower:
            if q not in lender:
                borrowed[q] += gpus
    return {
        qid: (
            sum(held.get(q, 0) for q in tree.subtree(qid)),
            lent.get(qid, 0),
            borrowed.get(qid, 0),
        )
        for qid in tree.quotas
    }


def _with_tree(
    flat: dict[int, QuotaUsage], tree: QuotaTree, running: Iterable[RunningSnap]
) -> dict[int, QuotaUsage]:
    """Each quota's own guarantee, place in the tree and subtree roll-ups (its quotas' own
    numbers summed, so a leaf's equal theirs; crossings from each borrowing worker)."""
    held = {qid: u.in_quota + u.idle_own + u.borrowed for qid, u in flat.items()}
    crossings = [
        (r.quota_id, lender, r.gpus_charged_to(lender))
        for r in running
        if not r.in_quota
        for lender in r.lenders
    ]
    rolled = roll_up(tree, held, crossings)
    out = {}
    for qid, usage in flat.items():
        snap = tree.quotas[qid]
        used, lent, borrowed = rolled[qid]
        out[qid] = replace(
            usage,
            own=tree.own_gpus(qid),
            parent_id=tree.parent(qid),
            depth=len(tree.ancestors(qid)),
            max_gpus=snap.max_gpus,
            lending_limit=snap.lending_limit,
            weight=snap.weight,
            subtree_used=used,
            subtree_lent=lent,
            subtree_borrowed=borrowed,
            has_children=bool(tree.children.get(qid)),
        )
    return out


def tree_order(usages: Iterable[QuotaUsage]) -> list[QuotaUsage]:
    """Parents first, each followed by its subtree; siblings and roots by name. A quota
    whose parent is not among `usages` is placed as a root."""
    usages = list(usages)
    ids = {u.id for u in usages}
    kids: dict[int | None, list[QuotaUsage]] = defaultdict(list)
    for u in usages:
        kids[u.parent_id if u.parent_id in ids else None].append(u)
    out: list[QuotaUsage] = []
    stack = sorted(kids[None], key=lambda u: u.name, reverse=True)
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(sorted(kids.get(current.id, ()), key=lambda u: u.name, reverse=True))
    placed = {u.id for u in out}
    return out + sorted((u for u in usages if u.id not in placed), key=lambda u: u.name)
