"""`{% fair_share_rows quotas as fair %}`: historical fair share of the quotas shown on the
Quotas page (web/templates/web/overview/_fair_share.html), one query whatever their number."""

from django import template
from django.db.models import F, OuterRef, Subquery
from django.utils import timezone

from policy.fair_share import FairShareRow, fair_share_rows
from quotas.models import Quota, QuotaDecayedUsage

register = template.Library()


@register.simple_tag
def fair_share_rows_of(quotas) -> list[FairShareRow]:
    """The rows of those quotas (objects with `id` and `borrowed`) whose tenant keeps
    historical fair share; [] when none does."""
    borrowed = {q.id: q.borrowed for q in quotas}
    if not borrowed:
        return []
    decayed = QuotaDecayedUsage.objects.filter(quota_id=OuterRef("pk"))
    found = (
        Quota.objects.filter(pk__in=borrowed, tenant__historical_fair_share=True)
        .annotate(
            half_life=F("tenant__fair_share_half_life_hours"),
            decayed_s=Subquery(decayed.values("gpu_seconds")[:1]),
            decayed_at=Subquery(decayed.values("at")[:1]),
        )
        .values_list("pk", "name", "tenant_id", "weight", "half_life", "decayed_s", "decayed_at")
    )
    return fair_share_rows(
        ((pk, name, t, w, borrowed[pk], h, s, at) for pk, name, t, w, h, s, at in found),
        timezone.now(),
    )
