"""The scheduler's core: `plan(snapshot, now) -> Plan`, pure (docs/scheduling.md).

Cut into small pieces with their own table tests, composed in `plan()`:
- `admission_order`: who is looked at first (priority, then submit time, then id);
- `quota_shortfall`: does the job fit its quota's guarantee;
- `PoolIndex.find/take` (placement.py): where the gang goes;
- `diagnose_placement`: why it does not fit, in words a researcher can act on;
- `describe_placements`: the admission's event text.

- `choose_victims` (preempt.py): reclaim of lent capacity and priority preemption.

By concern: `working` (the state of one plan, usage, demand, booking), `guaranteed` (the
first pass and the starvation rule), `borrowing` (the idle pass, pooled lenders),
`reclaim` (preemption, charges moving home); this module composes them and words reasons.

Two passes in admission order, so capacity free now goes to guarantees before borrowers
(a borrower placed first would only be reclaimed by the guaranteed job behind it, and on a
quota larger than its pool that loops forever). First pass, `Off` and `Acceptable`: a
guaranteed try (its own quota's guarantee, the quota's charged capacity, a gang placement);
an `Off` job that still waits may preempt (reclaim borrowers of its quota, or lower-priority
jobs of a `LowerPriority` quota). Second pass: `Only Idle Resources` and the `Acceptable`
jobs still waiting try idle capacity; an `Acceptable` job that cannot borrow then has every
right of an `Off` job in its own quota (docs/scheduling.md). A preemptor is not placed in the same
plan: it waits until its victims have exited and their GPUs are released, and meanwhile it
claims them: the first job in line that the GPUs being released would let start keeps its
quota's room (later jobs of the quota do not start in quota, the quota lends nothing), in
every cycle until the release is done (derived from the snapshot: nothing persisted, so a
claim cannot outlive what backs it). A job whose evaluation raises is set aside with a
reason (and logged); the others go on.

No head-of-line starvation (the rule): backfill is greedy, so a small job that fits never
waits behind a big one that cannot start. But once a waiting guaranteed job has waited
`reserve_after_s` (default 10 minutes), it holds what it waits for: if short of quota, no
later job of its quota starts *in quota* (idle borrowing, which is reclaimable, still may);
if short of a placement, the first such job of each pool reserves the emptiest nodes that
will host its whole gang, and nothing else is placed on them, so they only drain. Backfill
continues on every other node: it cannot delay the reserved job.
"""

import heapq
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

from policy.scheduler.borrowing import _idle_pass, lenders_for, nearest_rounds
from policy.scheduler.guaranteed import _DEFER, _guaranteed_pass
from policy.scheduler.model import Admission, JobSnap, Plan, QueueDecision, Snapshot
from policy.scheduler.placement import CapacityIndex
from policy.scheduler.reasons import (
    describe_placements,
    diagnose_excluded,
    diagnose_placement,
    diagnose_unschedulable_pool,
    format_indices,
)
from policy.scheduler.reclaim import _move_home
from policy.scheduler.treeuse import TreeUse, with_own_guarantees
from policy.scheduler.twins import PASS_GUARANTEED, PASS_IDLE, Twins, fingerprint, twin_key
from policy.scheduler.working import (
    PlanOptions,
    Usage,
    _book,
    _Both,
    _claim_demand,
    _diagnose,
    _index,
    _releasing,
    _Short,
    _Working,
    admission_order,
    quota_shortfall,
)
from protocol import words

log = logging.getLogger(__name__)

__all__ = [  # the table tests import the wording helpers from here
    "PlanOptions",
    "Usage",
    "admission_order",
    "describe_placements",
    "diagnose_excluded",
    "diagnose_placement",
    "diagnose_unschedulable_pool",
    "format_indices",
    "lenders_for",
    "plan",
    "quota_shortfall",
]


def plan(snapshot: Snapshot, now: datetime, options: PlanOptions | None = None) -> Plan:
    """Decide which waiting jobs start where, who is preempted, and why the others wait.

    Reasons are worded against the state *after* this plan's admissions: that is what the
    next snapshot will show, so an unchanged cluster yields unchanged reasons and the cycle
    writes nothing. (Usage only grows within a plan, so a job short of quota or GPUs when
    it was looked at is still short at the end.)
    """
    tree = TreeUse.of(snapshot.quotas, snapshot.running)
    # Each quota charged by its own guarantee (docs/quota-tree.md); flat quotas unchanged.
    snapshot = replace(snapshot, quotas=with_own_guarantees(snapshot.quotas, tree.tree))
    lenders, charged_to, own = _index(snapshot)
    state = _Working(
        options=options or PlanOptions(),
        now=now,
        quotas={q.id: q for q in snapshot.quotas},
        usage={
            q.id: Usage(q.used_gpus, q.used_cpus, q.used_memory_gb, q.borrowed_gpus)
            for q in snapshot.quotas
        },
        capacity=CapacityIndex(snapshot.nodes),
        lenders=lenders,
        charged_to=charged_to,
        own=own,
        releasing=_releasing(snapshot.running),
        tree=tree,
    )
    order = admission_order(snapshot.jobs)
    _claim_demand(order, state)
    admissions: list[Admission] = []
    waits: dict[int, str | _Short | _Both] = {}
    # Two passes: capacity free now goes to guarantees before borrowers (a borrower placed
    # first would be reclaimed by the guaranteed job behind it: a reclaim loop, docs/traps.md).
    deferred: dict[int, str | _Short | None] = {}
    # Before both passes: what a move home takes, the quota's waiting jobs did not claim,
    # and a lender whose job arrives now gets the room back instead of reclaiming.
    charges_home = _move_home(snapshot.running, state)
    twins = Twins()  # a job's decision reused for its twins behind it (twins.py)
    for phase in (_guaranteed_pass, _idle_pass):
        if phase is _idle_pass:  # a subtree's idle guarantee to its own quotas first
            admissions += nearest_rounds(
                lambda: fair_order(order, deferred, state.tree), deferred, state
            )
        # Idle capacity goes to the quota with the lowest borrowed GPUs / weight first.
        jobs = order if phase is _guaranteed_pass else fair_order(order, deferred, state.tree)
        for job in jobs:
            result = _look(phase, job, state, deferred, twins)
            if result is _DEFER:
                continue
            if isinstance(result, Admission):
                admissions.append(result)
                _book(state, job, result)
            else:
                waits[job.id] = result

    return Plan(
        admissions=tuple(admissions),
        queued=_queued(order, waits, state, twins.shared),
        preemptions=tuple(state.preemptions),
        charges_home=(*charges_home, *state.charge_moves),
    )


def _look(phase, job: JobSnap, state: _Working, deferred: dict, twins: Twins) -> object:
    """One job's decision in one pass: its twin's where one was decided on the same state
    (twins.py), else the pass's; a job whose look raises is set aside with a reason."""
    key = twin_key(
        job, PASS_GUARANTEED if phase is _guaranteed_pass else PASS_IDLE, state, deferred
    )
    twinned, before = False, 0
    if key is not None:
        known = twins.recall(key, state)
        if known:
            result, left = known
            if result is _DEFER:
                deferred[job.id] = left
            else:  # the idle pass takes the job out of `deferred`, whatever it decides
                deferred.pop(job.id, None)
            return result
        if known is None:  # a twin looked at: its decision may be kept
            twinned, before = True, fingerprint(state)
    try:
        result = phase(job, state, deferred)
    except Exception as exc:  # one bad job must not stop admissions cluster-wide
        log.exception("scheduler: evaluating %s failed; set aside this cycle", job.label)
        deferred.pop(job.id, None)
        return f"set aside: the scheduler could not evaluate this job ({_error(exc)})"
    if twinned and not isinstance(result, Admission):
        twins.keep(key, before, state, result, deferred.get(job.id))
    return result


def _queued(
    order: list[JobSnap], waits: dict, state: _Working, shared: set[int]
) -> tuple[QueueDecision, ...]:
    """Why each job waits, worded on the final state, and its place in its quota's queue.
    Twins share a decision (`shared`: their ids): worded once per decision and shape."""
    positions: dict[int, int] = {}
    queued: list[QueueDecision] = []
    worded: dict[tuple, str] = {}
    for job in order:
        wait = waits.get(job.id)
        if wait is None:
            continue
        positions[job.quota_id] = positions.get(job.quota_id, 0) + 1
        memo = (id(wait), job.shape) if id(wait) in shared else None
        reason = worded.get(memo) if memo is not None else None
        if reason is None:
            try:
                reason = _reason(wait, job, state)
            except Exception as exc:
                log.exception("scheduler: wording why %s waits failed", job.label)
                reason = f"waiting (the scheduler could not word why: {_error(exc)})"
            if memo is not None:
                worded[memo] = reason
        queued.append(QueueDecision(job.id, reason, positions[job.quota_id]))
    return tuple(queued)


def fair_order(order: list[JobSnap], deferred: dict, tree: TreeUse) -> Iterator[JobSnap]:
    """The idle pass's jobs: next the head (in admission order) of the quota whose borrowed
    GPUs over weight is lowest (with historical fair share, plus its decayed borrowing:
    `TreeUse.borrow_order`), then by its priority, submission time and id. Read lazily:
    a quota's share is looked up again after its job was booked."""
    queues: dict[int, deque[JobSnap]] = {}
    for job in order:
        if job.id in deferred:
            queues.setdefault(job.quota_id, deque()).append(job)

    def key(quota_id: int) -> tuple:
        head = queues[quota_id][0]
        return (tree.borrow_order(quota_id), -head.priority, head.submitted_at, head.id, quota_id)

    heap = [key(quota_id) for quota_id in queues]
    heapq.heapify(heap)
    while heap:
        quota_id = heapq.heappop(heap)[-1]
        yield queues[quota_id].popleft()
        if queues[quota_id]:
            heapq.heappush(heap, key(quota_id))


def _error(exc: Exception) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reason(wait: "str | _Short | _Both", job: JobSnap, state: _Working) -> str:
    if isinstance(wait, _Both):
        return f"{_reason(wait.guaranteed, job, state)}; {wait.idle}"
    return wait if isinstance(wait, str) else _word(wait, job, state)


def _word(short: _Short, job: JobSnap, state: _Working) -> str:
    # Checked in the same order as _evaluate, on the final state: a job that found no
    # placement may be short of quota by now (a smaller job of its quota backfilled).
    used = state.usage[short.quota.id]
    text = quota_shortfall(short.quota, used, job)
    if text:
        return text
    if short.lent or short.pool is None:
        q = short.quota
        if used.gpus + job.total_gpus > q.gpus:
            return (
                f"quota {q.name}: {used.gpus}/{q.gpus} {words.gpu_noun(q.gpus)} in use "
                f"({used.borrowed} lent to idle jobs), job needs {job.total_gpus}"
            )
        if short.pool is None:
            return f"quota {q.name} is full"
        return f"quota {q.name}: capacity was lent out"
    return _diagnose(short.pool, job, state)
