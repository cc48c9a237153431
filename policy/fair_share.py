"""Historical fair share as the Quotas page shows it (docs/quota-tree.md): each quota's
decayed borrowing and the order in which its tenant's quotas borrow idle GPUs next. Pure:
the same rule as the scheduler's idle pass (`policy.scheduler.treeuse.TreeUse.borrow_order`).
"""

from dataclasses import dataclass, replace
from datetime import datetime

from policy.usage_history import average_gpus, decayed_on


@dataclass(frozen=True, slots=True)
class FairShareRow:
    quota_id: int
    name: str
    tenant_id: int
    weight: float
    borrowed_now: int  # GPUs its jobs hold on other quotas' capacity now
    decayed_gpu_hours: float  # borrowed GPU-hours decayed over the half-life, as of now
    history_gpus: float  # the same as average GPUs over the half-life
    half_life_hours: int
    order: float  # (borrowed now + history GPUs) / weight: lowest borrows first
    rank: int = 0  # 1: borrows next, within its tenant


def fair_share_rows(quotas, now: datetime) -> list[FairShareRow]:
    """(quota id, name, tenant id, weight, borrowed now, half-life hours, decayed
    GPU-seconds, as of) → rows ranked within each tenant, lowest order first (ties: by name,
    as the scheduler then goes by its jobs' priority and age)."""
    rows = []
    for quota_id, name, tenant_id, weight, borrowed, half_life_h, seconds, at in quotas:
        half_life = max(half_life_h or 1, 1) * 3600
        decayed = decayed_on(seconds, at, now, half_life) if seconds and at else 0.0
        history = average_gpus(decayed, half_life)
        w = weight if weight and weight > 0 else 1.0
        rows.append(
            FairShareRow(
                quota_id,
                name,
                tenant_id,
                w,
                borrowed,
                round(decayed / 3600, 1),
                round(history, 2),
                half_life_h,
                round((borrowed + history) / w, 3),
            )
        )
    rows.sort(key=lambda r: (r.tenant_id, r.order, r.name))
    ranked, seen = [], {}
    for row in rows:
        seen[row.tenant_id] = seen.get(row.tenant_id, 0) + 1
        ranked.append(replace(row, rank=seen[row.tenant_id]))
    return ranked
