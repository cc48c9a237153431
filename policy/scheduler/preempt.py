"""Victim choice for reclaim and priority preemption (pure; docs/scheduling.md, docs/traps.md
"reclaim loops").

Who may be a victim of a guaranteed job J of quota Q:
- a *borrower* of Q: a pod charged to Q but not in quota (an idle job of Q itself on a
  General-purpose quota, or an idle job of any quota of Q's tenant on Lingjun). Only
  borrowed capacity is reclaimed, so a victim never reclaims back: it held no guarantee.
  Borrowers that ran less than `min_runtime_before_reclaim` are protected.
- when Q's policy is `LowerPriority`: an in-quota job of Q with a lower priority than J.
In-quota jobs of other quotas are never victims, so no quota is taken below its guarantee.

Order (docs/scheduling.md, the decision table; Kueue's candidate ordering): jobs already
releasing their GPUs (free to wait for), then by tier: borrowers before in-quota jobs (a
borrower never outranks an in-quota job of the lender), borrowers from farthest in the tree
first (nearest last); within a tier lowest priority, then least GPU-time since the last
committed checkpoint, then most recently started. Victims are added in that order until J
is eligible *after* subtracting them (guarantee, charged capacity and gang placement by GPU
count); then every victim J does not actually need is dropped again, newest choice first.
"""

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime

from policy.scheduler.model import JobSnap, RunningSnap


def lost_gpu_seconds(victim: RunningSnap, now: datetime) -> float:
    """GPU-time the victim would lose: since its last committed checkpoint (or start)."""
    since = victim.last_checkpoint_at or victim.started_at
    if since is None:  # never started running: nothing to lose
        return 0.0
    if victim.started_at is not None and victim.started_at > since:
        since = victim.started_at  # a checkpoint of an earlier attempt does not count
    return max((now - since).total_seconds(), 0.0) * victim.gpus


Tier = Callable[[RunningSnap], Hashable]


def borrowers_first(victim: RunningSnap) -> int:
    """The default tier: borrowers (0) before in-quota jobs (1)."""
    return 1 if victim.in_quota else 0


def victim_order(
    candidates: Sequence[RunningSnap], now: datetime, tier: Tier = borrowers_first
) -> list[RunningSnap]:
    """Releasing first; then by tier (borrowers first); then lowest priority, least lost
    GPU-time, most recently started."""

    def key(v: RunningSnap) -> tuple:
        started = v.started_at.timestamp() if v.started_at else float("inf")
        return (not v.stopping, tier(v), v.priority, lost_gpu_seconds(v, now), -started, v.id)

    return sorted(candidates, key=key)


def preempted_within_hour(victim: RunningSnap, now: datetime) -> int:
    """How often the job was preempted in the hour before `now` (the per-hour cap)."""
    return sum(1 for when in victim.preempted_at if (now - when).total_seconds() < 3600)


def reclaimable(victim: RunningSnap, now: datetime, min_runtime_s: float) -> bool:
    """Whether min_runtime_before_reclaim still protects a borrower."""
    if victim.stopping or not min_runtime_s or victim.in_quota:
        return True
    if victim.started_at is None:
        return False  # not running yet: certainly younger than the minimum
    return (now - victim.started_at).total_seconds() >= min_runtime_s


@dataclass(frozen=True, slots=True)
class Choice:
    victims: tuple[RunningSnap, ...]  # everything the job waits for (new and releasing)

    @property
    def new(self) -> tuple[RunningSnap, ...]:
        return tuple(v for v in self.victims if not v.stopping)


def choose_victims(
    job: JobSnap,
    candidates: Sequence[RunningSnap],
    eligible: Callable[[Sequence[RunningSnap]], bool],
    now: datetime,
    tier: Tier = borrowers_first,
) -> Choice | None:
    """The smallest set of victims (in `victim_order`) after which `eligible` holds."""
    chosen: list[RunningSnap] = []
    for victim in victim_order(candidates, now, tier):
        chosen.append(victim)
        if eligible(chosen):
            break
    else:
        return None
    # Drop victims not actually needed, last added first (keeps the cheapest ones).
    for victim in list(reversed(chosen[:-1])):
        rest = [v for v in chosen if v is not victim]
        if eligible(rest):
            chosen = rest
    return Choice(tuple(chosen))
