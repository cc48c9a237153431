"""What a quota change would do, before it is saved (docs/quota-tree.md "Owner pages").

Pure, over the scheduler's snapshot: `preview(snapshot, edit, now)` applies the proposed
change to a copy (`apply_edit`), runs `plan()` on the unchanged and on the changed copy,
and diffs the two plans: which running jobs the next cycle would reclaim or preempt, which
borrowers it would re-charge, which waiting jobs would start (and which that would start
now would not). Only the edited quota's pool is planned: pools share no nodes and no
quotas, so the others cannot change.

`plan()` never stops a job that runs in quota, so a shrink below what already runs is
listed apart (`over`): per quota whose own guarantee would fall below what is charged to
it, the running jobs above the new guarantee, in the order reclaim would pick them
(borrowers first). `state_token` names the state a preview was computed on, so a confirm
against a state that moved shows the preview again.
"""

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from policy.scheduler.model import JobSnap, Plan, PoolKey, QuotaSnap, RunningSnap, Snapshot
from policy.scheduler.plan import PlanOptions, plan
from policy.scheduler.preempt import victim_order
from policy.scheduler.tree import QuotaTree
from policy.scheduler.treeuse import TreeUse
from protocol import words

NEW_QUOTA_ID = -1  # the id a quota being created has in the what-if
EDITABLE = ("name", "gpus", "parent_id", "max_gpus", "lending_limit", "weight")
_SNAP_FIELDS = {f.name for f in fields(QuotaSnap)}


@dataclass(frozen=True, slots=True)
class QuotaEdit:
    """A proposed change: `values` (QuotaSnap field → value) for `quota_id`, a new quota
    (`quota_id` None: `values` carries tenant, resource and GPU type too), or a delete."""

    quota_id: int | None
    values: Mapping[str, Any]
    delete: bool = False


@dataclass(frozen=True, slots=True)
class JobEffect:
    job_id: int
    name: str
    quota: str  # the job's own quota
    gpus: int
    detail: str  # the scheduler's reason, or what happens to it


@dataclass(frozen=True, slots=True)
class OverGuarantee:
    quota: str
    charged: int  # GPUs charged to it now
    own_before: int
    own_after: int
    jobs: tuple[JobEffect, ...]  # above the new guarantee, in reclaim order


@dataclass(frozen=True, slots=True)
class OwnChange:
    quota: str
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class Preview:
    reclaimed: tuple[JobEffect, ...] = ()
    preempted: tuple[JobEffect, ...] = ()
    moved: tuple[JobEffect, ...] = ()
    started: tuple[JobEffect, ...] = ()
    not_started: tuple[JobEffect, ...] = ()
    over: tuple[OverGuarantee, ...] = ()
    own: tuple[OwnChange, ...] = ()  # own guarantees that change
    limits: tuple[str, ...] = ()  # a new limit or lending limit below what is held or lent
    token: str = ""

    @property
    def quiet(self) -> bool:
        """Nothing running or waiting is affected."""
        return not (
            self.reclaimed
            or self.preempted
            or self.moved
            or self.started
            or self.not_started
            or self.over
            or self.limits
        )


def pool_of(snapshot: Snapshot, edit: QuotaEdit) -> PoolKey | None:
    if edit.quota_id is None:
        return (edit.values.get("resource_type", ""), edit.values.get("gpu_type", ""))
    quota = next((q for q in snapshot.quotas if q.id == edit.quota_id), None)
    return None if quota is None else quota.pool


def only_pool(snapshot: Snapshot, pool: PoolKey | None) -> Snapshot:
    """The snapshot's part in one pool (nodes, quotas, their waiting and running jobs)."""
    quotas = tuple(q for q in snapshot.quotas if q.pool == pool)
    ids = {q.id for q in quotas}
    return Snapshot(
        nodes=tuple(n for n in snapshot.nodes if n.pool == pool),
        quotas=quotas,
        jobs=tuple(j for j in snapshot.jobs if j.quota_id in ids),
        running=tuple(r for r in snapshot.running if r.quota_id in ids or set(r.lenders) & ids),
    )


def apply_edit(snapshot: Snapshot, edit: QuotaEdit) -> Snapshot:
    """A copy of the snapshot with the change made (the snapshot itself is frozen)."""
    values = {k: v for k, v in edit.values.items() if k in _SNAP_FIELDS and k != "id"}
    if edit.quota_id is None:
        blank = {"name": "", "tenant_id": 0, "resource_type": "", "gpu_type": "", "gpus": 0}
        new = QuotaSnap(id=NEW_QUOTA_ID, **blank | values)
        return replace(snapshot, quotas=(*snapshot.quotas, new))
    if edit.delete:
        return replace(snapshot, quotas=tuple(q for q in snapshot.quotas if q.id != edit.quota_id))
    quotas = tuple(replace(q, **values) if q.id == edit.quota_id else q for q in snapshot.quotas)
    return replace(snapshot, quotas=quotas)


def state_token(snapshot: Snapshot, pool: PoolKey | None) -> str:
    """A digest of what a preview of `pool` depends on and names: its quotas' settings and
    its running jobs' charges. Waiting jobs come and go all the time and are left out."""
    part = only_pool(snapshot, pool)
    quotas = sorted(
        (q.id, q.name, q.gpus, q.parent_id, q.max_gpus, q.lending_limit, q.weight)
        for q in part.quotas
    )
    running = sorted(
        (r.id, r.charged_quota_id, r.in_quota, r.gpus, r.charges, r.stopping) for r in part.running
    )
    return hashlib.sha256(repr((pool, quotas, running)).encode()).hexdigest()[:32]


def preview(
    snapshot: Snapshot,
    edit: QuotaEdit,
    now: datetime,
    options: PlanOptions | None = None,
    *,
    baseline: Callable[[Snapshot], Plan] | None = None,
) -> Preview:
    """The diff of `plan()` with and without the change, on the edited quota's pool.
    `baseline` plans the unchanged pool (a shell may reuse one it planned already: the
    same pool snapshot gives the same plan); by default `plan()` at `now`."""
    pool = pool_of(snapshot, edit)
    before = only_pool(snapshot, pool)
    after = apply_edit(before, edit)
    plan_before = baseline(before) if baseline else plan(before, now, options)
    plan_after = plan(after, now, options)
    names = {q.id: q.name for q in after.quotas} | {q.id: q.name for q in before.quotas}
    running = {r.id: r for r in before.running}
    waiting = {j.id: j for j in before.jobs}
    return Preview(
        **_plan_diff(plan_before, plan_after, running, waiting, names),
        over=_over_guarantee(before, after, now),
        own=_own_changes(before, after),
        limits=_limits_passed(after, edit),
        token=state_token(snapshot, pool),
    )


def _plan_diff(
    before: Plan,
    after: Plan,
    running: dict[int, RunningSnap],
    waiting: dict[int, JobSnap],
    names: dict[int, str],
) -> dict[str, tuple[JobEffect, ...]]:
    def ran(job_id: int, detail: str) -> JobEffect:
        r = running.get(job_id)
        if r is None:
            return JobEffect(job_id, "", "", 0, detail)
        return JobEffect(job_id, r.name, names.get(r.quota_id, ""), r.gpus, detail)

    def waits(job_id: int, detail: str) -> JobEffect:
        j = waiting.get(job_id)
        if j is None:
            return JobEffect(job_id, "", "", 0, detail)
        return JobEffect(job_id, j.name, names.get(j.quota_id, ""), j.total_gpus, detail)

    was_preempted = {p.job_id for p in before.preemptions}
    new_preemptions = [p for p in after.preemptions if p.job_id not in was_preempted]
    was_moved = {(m.job_id, m.quota_id) for m in before.charges_home}
    admitted_before = {a.job_id: a for a in before.admissions}
    admitted_after = {a.job_id: a for a in after.admissions}
    reason_after = {q.job_id: q.reason for q in after.queued}
    return {
        "reclaimed": tuple(ran(p.job_id, p.reason) for p in new_preemptions if p.reclaim),
        "preempted": tuple(ran(p.job_id, p.reason) for p in new_preemptions if not p.reclaim),
        "moved": tuple(
            ran(m.job_id, m.reason)
            for m in after.charges_home
            if (m.job_id, m.quota_id) not in was_moved
        ),
        "started": tuple(
            waits(a.job_id, a.reason) for a in after.admissions if a.job_id not in admitted_before
        ),
        "not_started": tuple(
            waits(job_id, reason_after.get(job_id, "would wait"))
            for job_id in admitted_before
            if job_id not in admitted_after
        ),
    }


def _limits_passed(after: Snapshot, edit: QuotaEdit) -> tuple[str, ...]:
    """A new `max_gpus` below what the subtree's jobs hold, or `lending_limit` below what is
    lent out of it: nothing is stopped (`plan()` only checks limits on admission)."""
    quota = next((q for q in after.quotas if q.id == edit.quota_id), None)
    if quota is None or edit.delete:
        return ()
    use = TreeUse.of(after.quotas, after.running)
    held, lent, out = use.held.get(quota.id, 0), use.lent.get(quota.id, 0), []
    if quota.max_gpus is not None and held > quota.max_gpus:
        out.append(
            f"The jobs of {quota.name}'s subtree hold {words.gpus(held)}, above the new limit of "
            f"{quota.max_gpus}: they keep running, and none of its jobs starts until they "
            "hold less."
        )
    if quota.lending_limit is not None and lent > quota.lending_limit:
        out.append(
            f"{words.gpus(lent)} of {quota.name}'s subtree {'is' if lent == 1 else 'are'} lent "
            "out, above the new lending "
            f"limit of {quota.lending_limit}: the borrowers keep running; nothing more is "
            "lent until they end or are reclaimed."
        )
    return tuple(out)


def _own_changes(before: Snapshot, after: Snapshot) -> tuple[OwnChange, ...]:
    old, new = QuotaTree.of(before.quotas), QuotaTree.of(after.quotas)
    out = []
    for q in after.quotas:
        was = old.own_gpus(q.id) if q.id in old.quotas else 0
        now_ = new.own_gpus(q.id)
        if was != now_:
            out.append(OwnChange(q.name or "(new quota)", was, now_))
    for q in before.quotas:
        if q.id not in new.quotas:
            out.append(OwnChange(q.name, old.own_gpus(q.id), 0))
    return tuple(out)


def _over_guarantee(before: Snapshot, after: Snapshot, now: datetime) -> tuple[OverGuarantee, ...]:
    """Quotas whose own guarantee falls below the GPUs charged to them: the jobs above it,
    in reclaim order (borrowers first, then lowest priority, least work lost)."""
    old, new = QuotaTree.of(before.quotas), QuotaTree.of(after.quotas)
    names = {q.id: q.name for q in before.quotas}
    out = []
    for q in after.quotas:
        if q.id not in old.quotas:
            continue
        own_before, own_after = old.own_gpus(q.id), new.own_gpus(q.id)
        if own_after >= own_before or q.used_gpus <= own_after:
            continue
        charged_here = [r for r in before.running if r.gpus_charged_to(q.id)]
        borrowers = [r for r in charged_here if not r.in_quota]
        in_quota = [r for r in charged_here if r.in_quota]
        excess, jobs = q.used_gpus - own_after, []
        for r in [*victim_order(borrowers, now), *victim_order(in_quota, now)]:
            if excess <= 0:
                break
            gpus = r.gpus_charged_to(q.id)
            excess -= gpus
            if r.in_quota:
                detail = (
                    f"runs in quota: keeps running (in-quota work is never stopped for a "
                    f"resize); nothing new starts in quota {q.name} while more than its "
                    f"{words.gpus(own_after)} {'is' if own_after == 1 else 'are'} charged to it"
                )
            else:
                detail = (
                    f"borrows {words.gpus(gpus)} of {q.name}: "
                    f"reclaimed when {q.name}'s jobs need them"
                )
            out_job = JobEffect(r.id, r.name, names.get(r.quota_id, ""), gpus, detail)
            jobs.append(out_job)
        out.append(OverGuarantee(q.name, q.used_gpus, own_before, own_after, tuple(jobs)))
    return tuple(out)
