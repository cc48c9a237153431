"""The quota tree's rules, in one place (pure; docs/quota-tree.md "Rules for quota owners").

Plain values in (the tenant's quotas as they are, and the quota as it would be after a
change), field → messages out. The admin (through `Quota.clean`), `quotas.actions` and the
simulator's scenario check ask the same questions, so a change refused in one is refused in
all. A flat quota (no parent, no children) passes every tree rule, as it did before trees.

Decisions where the design was silent (docs/quota-tree.md):
- a child's `max_gpus` may be above an ancestor's: the tightest limit on a job's path holds;
- a `lending_limit` above `gpus` is allowed and means "lends all of it";
- guarantees above the cluster's GPUs of a type are a warning (`overcommitted`), never a
  refusal: nodes register after quotas are set up and leave for repairs, and a quota valid
  yesterday must not become unsaveable because a node is down today.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass

from protocol import words

type Problems = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class QuotaFacts:
    """One quota as the rules see it; `id` None for a quota not saved yet."""

    id: int | None
    name: str
    tenant_id: int | None
    resource_type: str
    gpu_type: str
    gpus: int
    parent_id: int | None = None
    max_gpus: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0


def problems(proposed: QuotaFacts, existing: Iterable[QuotaFacts]) -> Problems:
    """What is wrong with `proposed` among `existing` (its old version, if any, is replaced
    by it). `existing` holds the tenant's quotas, plus the proposed parent and children
    wherever they belong."""
    others = {q.id: q for q in existing if q.id is not None and q.id != proposed.id}
    found: Problems = {}

    def add(field: str, message: str) -> None:
        found.setdefault(field, []).append(message)

    for field, message in _own_values(proposed):
        add(field, message)
    for field, message in _parent_rules(proposed, others):
        add(field, message)
    for field, message in _children_rules(proposed, others):
        add(field, message)
    return found


def _own_values(q: QuotaFacts) -> list[tuple[str, str]]:
    out = []
    if q.gpus < 0:
        out.append(("gpus", "The guarantee cannot be negative."))
    if q.max_gpus is not None and q.max_gpus < q.gpus:
        out.append(
            (
                "max_gpus",
                f"The limit ({words.gpus(q.max_gpus)}) is below the guarantee "
                f"({words.gpus(q.gpus)}).",
            )
        )
    if q.lending_limit is not None and q.lending_limit < 0:
        out.append(("lending_limit", "The lending limit cannot be negative (0: it never lends)."))
    if not (math.isfinite(q.weight) and q.weight > 0):
        out.append(("weight", "The weight must be a number above 0."))
    return out


def _parent_rules(q: QuotaFacts, others: dict[int, QuotaFacts]) -> list[tuple[str, str]]:
    if q.parent_id is None:
        return []
    if q.parent_id == q.id:
        return [("parent", "A quota cannot be its own parent.")]
    parent = others.get(q.parent_id)
    if parent is None:
        return [("parent", "There is no such quota.")]
    out = []
    if parent.tenant_id != q.tenant_id:
        out.append(("parent", f"Quota {parent.name} belongs to another tenant."))
    if parent.resource_type != q.resource_type:
        out.append(
            ("parent", f"Quota {parent.name} is {parent.resource_type}, not {q.resource_type}.")
        )
    if parent.gpu_type != q.gpu_type:
        out.append(("parent", f"Quota {parent.name} is for {parent.gpu_type}, not {q.gpu_type}."))
    if q.id is not None and _is_below(parent, q.id, others):
        out.append(("parent", f"Quota {parent.name} is inside this quota's subtree (a cycle)."))
    if out:
        return out
    siblings = [o for o in others.values() if o.parent_id == parent.id]
    carved = q.gpus + sum(o.gpus for o in siblings)
    if carved > parent.gpus:
        rest = f", {carved - q.gpus} in {_names(siblings)}" if siblings else ""
        out.append(
            (
                "gpus",
                f"Quota {parent.name} guarantees {words.gpus(parent.gpus)}; its children would "
                f"carve out {carved} ({q.gpus} here{rest}).",
            )
        )
    return out


def _children_rules(q: QuotaFacts, others: dict[int, QuotaFacts]) -> list[tuple[str, str]]:
    if q.id is None:
        return []
    children = [o for o in others.values() if o.parent_id == q.id]
    if not children:
        return []
    out = []
    carved = sum(c.gpus for c in children)
    if carved > q.gpus:
        out.append(
            (
                "gpus",
                f"Its children {_names(children)} carve out {words.gpus(carved)}; the guarantee "
                f"cannot be below that ({q.gpus}).",
            )
        )
    if any(c.tenant_id != q.tenant_id for c in children):
        out.append(("tenant", f"Its children {_names(children)} belong to its tenant."))
    if any(c.resource_type != q.resource_type for c in children):
        out.append(("resource_type", f"Its children {_names(children)} share its resource type."))
    if any(c.gpu_type != q.gpu_type for c in children):
        out.append(("gpu_type", f"Its children {_names(children)} share its GPU type."))
    return out


def _is_below(candidate: QuotaFacts, quota_id: int, others: dict[int, QuotaFacts]) -> bool:
    """Whether `candidate` lies in quota `quota_id`'s subtree (walking up from it)."""
    seen: set[int] = set()
    current: QuotaFacts | None = candidate
    while current is not None and current.id not in seen:
        if current.parent_id == quota_id:
            return True
        seen.add(current.id)
        current = others.get(current.parent_id) if current.parent_id is not None else None
    return False


def _names(quotas: Iterable[QuotaFacts]) -> str:
    return ", ".join(sorted(q.name for q in quotas))


def roots_guarantee(quotas: Iterable[QuotaFacts | object]) -> int:
    """GPUs the roots guarantee: children carve theirs out of their parent's, so only the
    roots' `gpus` are promises of cluster capacity. Takes anything with `id`, `parent_id`
    and `gpus` (a `QuotaFacts` or the scheduler's `QuotaSnap`)."""
    quotas = list(quotas)
    ids = {q.id for q in quotas}
    return sum(q.gpus for q in quotas if q.parent_id is None or q.parent_id not in ids)


def overcommitted(guaranteed: int, cluster_gpus: int, resource_type: str, gpu_type: str) -> str:
    """The warning shown (never a refusal) when the roots of a GPU type guarantee more than
    the cluster has; "" when they do not."""
    if guaranteed <= cluster_gpus:
        return ""
    return (
        f"The {resource_type} {gpu_type} quotas guarantee {words.gpus(guaranteed)}, "
        f"but the cluster has {words.gpus(cluster_gpus, gpu_type)}: not every guarantee can be "
        "met at once."
    )
