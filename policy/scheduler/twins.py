"""Twins in a long queue (docs/scheduling.md, "Twins"): a waiting job that has the same
quota, priority, shape and rights as one looked at earlier in the same pass, on a plan state
that nothing changed since, gets that job's decision without being looked at again. Pure.

Why it is exact: a pass reads of a job only what its key holds (its quota, priority, shape,
idle-resources setting, whether it waited past `reserve_after_s`, and in the idle pass what
the guaranteed pass decided for it) and the plan's state; jobs with anything more of their
own (live pods of an earlier attempt, excluded nodes, recent reclaims, room kept for them)
are always looked at. A decision is kept only when looking at the job changed nothing that
a later look reads (`fingerprint`): then the twin's look would read the same and decide the
same. Caches a look fills (refusals by shape, diagnoses) answer what the look would anyway.
Admissions are never reused: each books capacity.

The Kueue baseline's full variant waits ~7,400 jobs per plan in ~64 keys: most of a plan
was the same refusal worked out again."""

from dataclasses import dataclass, field

from policy.scheduler.model import JobSnap
from policy.scheduler.working import _Short, _Working, waited_long
from policy.statuses import IdleResources

PASS_GUARANTEED, PASS_IDLE = "guaranteed", "idle"


def fingerprint(state: _Working) -> int:
    """The sum of the counts of everything a look at a job may change and a later look
    reads (`_Working.changes`, and the pools first blocked). Every count only grows within a
    plan, so an equal sum means no count changed in between."""
    return state.changes() + len(state.blocked_by)


def twin_key(job: JobSnap, phase: str, state: _Working, deferred: dict) -> tuple | None:
    """What decides a look at `job` in `phase` besides the plan's state, or None for a job
    that is always looked at: one with something of its own, and an `Off` job, whose look
    on a full quota is one check (`guaranteed._guaranteed`'s fast path), cheaper than this."""
    if (
        job.idle_resources is IdleResources.OFF
        or job.active_pods
        or job.excluded_node_ids
        or job.reclaimed_by
        or job.id in state.kept
    ):
        return None
    key = (
        phase,
        job.quota_id,
        job.priority,
        job.workers,
        job.gpus_per_worker,
        job.cpus_per_worker,
        job.memory_gb_per_worker,
        job.idle_resources is IdleResources.ONLY,
        waited_long(job, state),
    )
    if phase == PASS_IDLE:
        key += (_decided(deferred.get(job.id)),)
    return key


def _decided(guaranteed: object) -> object:
    """The guaranteed pass's decision for an idle-pass key: the same wording or shortfall
    (its pool by identity: one plan's pool indexes)."""
    if isinstance(guaranteed, _Short):
        pool = None if guaranteed.pool is None else id(guaranteed.pool)
        return (_Short, guaranteed.quota.id, pool, guaranteed.lent)
    return guaranteed


@dataclass(slots=True)
class Twins:
    """The decisions kept in one pass: key → (fingerprint when decided, decision, what the
    guaranteed pass leaves the job for the idle pass)."""

    # key → None once a job of it was looked at (the first of each key is looked at
    # untracked: a queue of all-different jobs costs only their keys), then the decision.
    known: dict[tuple, tuple[int, object, object] | None] = field(default_factory=dict)
    shared: set[int] = field(default_factory=set)  # ids of the decisions reused
    reused: int = 0

    def recall(self, key: tuple, state: _Working) -> tuple[object, object] | bool | None:
        """The decision kept for `key` on this state; None when the job must be looked at
        and its decision may be kept; False for the first of its key (not kept)."""
        seen = self.known.get(key, False)
        if seen is False:
            self.known[key] = None
            return False
        if seen is None or seen[0] != fingerprint(state):
            return None
        self.reused += 1
        self.shared.add(id(seen[1]))
        return seen[1], seen[2]

    def keep(self, key: tuple, before: int, state: _Working, decided, left) -> None:
        """Keep a decision whose look changed nothing a later look reads."""
        if fingerprint(state) == before:
            self.known[key] = (before, decided, left)
