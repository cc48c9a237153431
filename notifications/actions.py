"""Every write to notifications: outbox rows, claims, attempts, a user's e-mail option."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q, QuerySet

from notifications.models import (
    Channel,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    NotificationRule,
)


def queue_deliveries(rows: Sequence[Delivery]) -> int:
    """Write outbox rows (in the caller's transaction)."""
    Delivery.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def claim(delivery_id: int, now: datetime, hold: timedelta) -> bool:
    """Take a due delivery for one attempt (compare-and-set: two senders never send the
    same attempt). Counting the attempt here bounds retries even if the sender dies."""
    return bool(
        Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + hold, attempts=F("attempts") + 1)
    )


@dataclass(frozen=True)
class AttemptResult:
    ok: bool
    status_code: int | None = None
    error: str = ""
    duration_ms: int = 0
    retry: bool = True  # False: retrying cannot help (the receiver refused the request)


def record_attempt(
    delivery: Delivery,
    result: AttemptResult,
    *,
    now: datetime,
    next_attempt_at: datetime | None,
) -> None:
    """The attempt's outcome: delivered, retried at `next_attempt_at`, or given up (None)."""
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=delivery.attempts,
        at=now,
        status_code=result.status_code,
        error=result.error[:500],
        duration_ms=result.duration_ms,
    )
    fields = {
        "claimed_until": None,
        "last_status_code": result.status_code,
        "last_error": result.error[:500],
    }
    if result.ok:
        fields.update(status=DeliveryStatus.DELIVERED, delivered_at=now)
    elif next_attempt_at is None:
        fields.update(status=DeliveryStatus.FAILED)
    else:
        fields.update(next_attempt_at=next_attempt_at)
    Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(**fields)


def retry_now(deliveries: QuerySet[Delivery], now: datetime) -> int:
    """Give failed (or waiting) deliveries another round of attempts, starting now."""
    return deliveries.exclude(status=DeliveryStatus.DELIVERED).update(
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, claimed_until=None
    )


def set_email_option(user, *, enabled: bool, events: list[str]) -> NotificationRule:
    """The user's e-mail option (one rule per user)."""
    rule, _ = NotificationRule.objects.update_or_create(
        user=user,
        channel=Channel.EMAIL,
        defaults={"enabled": enabled, "events": sorted(set(events)), "name": "e-mail"},
    )
    return rule
