"""The one path of a quota change (docs/quota-tree.md "Owner pages"): the owner pages, the
admin and the owners' API all create and change quotas through `change_quota`.

It builds the quota as it would be saved, checks it (`quotas.actions.quota_refusals`: the
model's checks and the tree's rules), and then either shows what the next scheduling cycle
would do with it (the what-if of `policy.quota_preview`, on the scheduler's own snapshot)
or saves it through `quotas.actions` (audited, a scheduling cycle asked for). A save may
name the state its preview was computed on (`token`): when that state moved, nothing is
saved and the preview of the current state comes back instead (`stale`).

It lives with the scheduler's snapshot it reads (`jobs.forecast`), above the quotas it
writes through their actions.
"""

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from jobs.forecast import current_snapshot
from jobs.scheduler.cycle import plan_options
from policy.quota_preview import Preview as QuotaPreview
from policy.quota_preview import QuotaEdit, pool_of, preview, state_token
from policy.scheduler.model import Plan, Snapshot
from policy.scheduler.plan import plan
from protocol import words
from quotas import actions
from quotas.models import Quota, Tenant

# What an owner sets on a quota (the pages' form, the admin's form, the API).
QUOTA_FIELDS = ("name", "gpus", "parent", "max_gpus", "lending_limit", "weight")

# The plans of unchanged pool snapshots, newest last: a second preview of the same state
# (other values, another owner) plans once, not twice. Keyed by the pool's snapshot (frozen,
# hashable) and the minute, so time-based rules (starvation, minimum runtime) stay current.
_BASELINES: OrderedDict[tuple, Plan] = OrderedDict()
BASELINES_KEPT = 4


@dataclass
class QuotaChangeOutcome:
    """What became of a proposed change: refused (`errors`), previewed (`preview` and the
    `token` of its state; `stale` when a save named a state that moved) or `saved`."""

    proposed: Quota
    errors: dict[str, list[str]] = field(default_factory=dict)
    preview: QuotaPreview | None = None
    token: str = ""
    stale: bool = False
    saved: Quota | None = None


def _baseline(now: datetime):
    options = plan_options()

    def planned(part: Snapshot) -> Plan:
        key = (part, now.replace(second=0, microsecond=0))
        found = _BASELINES.get(key)
        if found is None:
            found = _BASELINES[key] = plan(part, now, options)
            while len(_BASELINES) > BASELINES_KEPT:
                _BASELINES.popitem(last=False)
        return found

    return planned


def what_if(snapshot: Snapshot, edit: QuotaEdit) -> QuotaPreview:
    """The preview of `edit` on `snapshot` (the unchanged pool's plan reused when cached)."""
    now = timezone.now()
    return preview(snapshot, edit, now, plan_options(), baseline=_baseline(now))


def _columns() -> set[str]:
    return {f.name for f in Quota._meta.concrete_fields if not f.primary_key} - {"created_at"}


def proposed_quota(
    tenant: Tenant, quota: Quota | None, values: dict[str, Any], parent: Quota | None = None
) -> Quota:
    """The quota as it would be saved: `quota` (read again) with `values` (any of its
    columns, `QUOTA_FIELDS` those the what-if sees) set, or a new quota of `tenant` in the
    pool of its parent (`values["parent"]`, else `parent`; a root names its pool)."""
    values = {name: value for name, value in values.items() if name in _columns() - {"tenant"}}
    if values.get("reclaim_within_tree") == "":  # left empty (the admin's form): as it is
        del values["reclaim_within_tree"]
    if quota is not None:
        proposed = Quota.objects.get(pk=quota.pk)
        for name, value in values.items():
            setattr(proposed, name, value)
        return proposed
    values["parent"] = parent = values.get("parent") or parent
    if parent is not None:
        values |= {"resource_type": parent.resource_type, "gpu_type": parent.gpu_type}
    values.setdefault("resource_type", "")
    values.setdefault("gpu_type", "")
    return Quota(**values | {"tenant": tenant})


def quota_refusals(proposed: Quota) -> dict[str, list[str]]:
    """Field errors of the proposed quota (the model's checks and the tree's rules)."""
    before = Quota.objects.filter(pk=proposed.pk).first() if proposed.pk else None
    return actions.quota_refusals(proposed, before)


def quota_edit(proposed: Quota) -> QuotaEdit:
    """The change as the what-if sees it (`policy.quota_preview`)."""
    values = {
        "name": proposed.name,
        "gpus": proposed.gpus,
        "parent_id": proposed.parent_id,
        "max_gpus": proposed.max_gpus,
        "lending_limit": proposed.lending_limit,
        "weight": proposed.weight,
        # The sharing options the plan follows (docs/scheduling.md, the decision table).
        "preemption": proposed.preemption,
        "reclaim_within_tree": proposed.reclaim_within_tree,
        "borrow_within_tree_max_priority": proposed.borrow_within_tree_max_priority,
    }
    if proposed.pk is None:
        values |= {
            "tenant_id": proposed.tenant_id,
            "resource_type": proposed.resource_type,
            "gpu_type": proposed.gpu_type,
        }
    return QuotaEdit(proposed.pk, values)


def _save(proposed: Quota, values: dict[str, Any], actor: Any) -> Quota:
    if proposed.pk is None:
        columns = {name: getattr(proposed, name) for name in _columns()}
        return actions.create_quota(actor=actor, **columns)
    changes = {name: getattr(proposed, name) for name in values if name in _columns()}
    return actions.update_quota(proposed, actor=actor, **changes)


def change_quota(
    *,
    tenant: Tenant,
    quota: Quota | None,
    values: dict[str, Any],
    actor: Any = None,
    save: bool = False,
    token: str | None = None,
    parent: Quota | None = None,
) -> QuotaChangeOutcome:
    """Create (`quota` None) or change a quota of `tenant`: refused with field errors, or
    previewed (`save` False), or saved (`save` True, with the `token` of the previewed
    state when one is given; a token of a state that moved previews again, `stale`)."""
    proposed = proposed_quota(tenant, quota, values, parent)
    errors = quota_refusals(proposed)
    if errors:
        return QuotaChangeOutcome(proposed, errors)
    snapshot, edit = current_snapshot(), quota_edit(proposed)
    current = state_token(snapshot, pool_of(snapshot, edit))
    if save and (token is None or token == current):
        try:
            saved = _save(proposed, values, actor)
        except actions.QuotaChangeRefused as refused:
            return QuotaChangeOutcome(proposed, refused.errors)
        return QuotaChangeOutcome(proposed, token=current, saved=saved)
    result = what_if(snapshot, edit)
    return QuotaChangeOutcome(proposed, preview=result, token=result.token, stale=save)


def _jobs(effects) -> str:
    return "; ".join(
        f"#{e.job_id} {e.name} ({e.quota}, {words.gpus(e.gpus)}): {e.detail}" for e in effects
    )


def describe(result: QuotaPreview) -> list[str]:
    """The preview in lines of text (what the owner pages show, for the admin's form)."""
    lines = [f"{o.quota}: {o.before} → {o.after} of its own" for o in result.own]
    for over in result.over:
        lines.append(
            f"Over the new guarantee of {over.quota}: {words.gpus(over.charged)} charged, "
            f"its own guarantee {over.own_after} (now {over.own_before}); above it: "
            + _jobs(over.jobs)
        )
    lines += list(result.limits)
    for title, effects in (
        ("Would be reclaimed", result.reclaimed),
        ("Would be preempted", result.preempted),
        ("Would be re-charged (nothing restarts)", result.moved),
        ("Would start", result.started),
        ("Would start now, but not after the change", result.not_started),
    ):
        if effects:
            lines.append(f"{title}: {_jobs(effects)}")
    return lines or ["No running or waiting job is affected."]
