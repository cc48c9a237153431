"""Sending due deliveries: webhooks by HTTP POST, e-mail through Django's mail backend.

Level-triggered and safe to run in several processes at once: each attempt is claimed by a
compare-and-set (`actions.claim`) that also counts it, so retries stop after
`NOTIFY_MAX_ATTEMPTS` whatever happens to the sender. Failures are retried with exponential
backoff (`NOTIFY_BACKOFF_BASE` * 2^(attempt-1), at most `NOTIFY_BACKOFF_MAX`, or the
receiver's Retry-After when longer). A receiver that refuses the request itself (a 4xx other
than 408/429) is not retried: sending the same body again cannot help.
"""

import hashlib
import hmac
import json
import logging
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import urllib3
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.utils import timezone

from notifications import outbound
from notifications.actions import AttemptResult, claim, record_attempt
from notifications.messages import email_message, slack_body
from notifications.models import Channel, Delivery, DeliveryStatus

log = logging.getLogger(__name__)

BATCH = 100
USER_AGENT = "gpu-console-notifications/1"
_RETRYABLE_4XX = {408, 425, 429}


@dataclass
class DeliveryRun:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def backoff_seconds(attempt: int, base: float, maximum: float) -> float:
    """Wait after failed attempt number `attempt` (1-based): base, 2*base, 4*base, …"""
    return min(base * 2 ** max(attempt - 1, 0), maximum)


def next_attempt_at(
    result: AttemptResult, attempt: int, now: datetime, retry_after: float | None = None
) -> datetime | None:
    """When to try again, or None to give up (pure but for settings)."""
    if result.ok or not result.retry or attempt >= settings.NOTIFY_MAX_ATTEMPTS:
        return None
    wait = backoff_seconds(attempt, settings.NOTIFY_BACKOFF_BASE, settings.NOTIFY_BACKOFF_MAX)
    if retry_after is not None:
        wait = max(wait, min(retry_after, settings.NOTIFY_BACKOFF_MAX))
    return now + timedelta(seconds=wait)


def _retry_after(response: outbound.OutboundResponse) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isascii() and value.isdigit() else None


def body_for(delivery: Delivery) -> dict:
    return slack_body(delivery.payload) if delivery.channel == Channel.SLACK else delivery.payload


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def send_webhook(delivery: Delivery) -> tuple[AttemptResult, float | None]:
    body = json.dumps(body_for(delivery), separators=(",", ":"), ensure_ascii=False).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Console-Event": delivery.event,
        "X-Console-Delivery": str(delivery.pk),
        "X-Console-Attempt": str(delivery.attempts),
    }
    secret = delivery.rule.secret if delivery.rule_id and delivery.rule else ""
    if secret:
        headers["X-Console-Signature"] = signature(secret, body)
    started = time.monotonic()
    try:
        # Vetted again at each attempt: a URL saved before the rule form refused such
        # addresses, or a host whose DNS answer changed since, is refused here.
        response = outbound.post(delivery.target, body, headers, timeout=settings.NOTIFY_TIMEOUT)
    except outbound.ResolveFailed as exc:  # DNS may answer later
        elapsed = int((time.monotonic() - started) * 1000)
        return AttemptResult(False, None, f"ResolveFailed: {exc}", elapsed), None
    except outbound.RefusedDestination as exc:  # sending again cannot help
        elapsed = int((time.monotonic() - started) * 1000)
        error = f"RefusedDestination: {exc}"
        return AttemptResult(False, None, error, elapsed, retry=False), None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        elapsed = int((time.monotonic() - started) * 1000)
        return AttemptResult(False, None, f"{type(exc).__name__}: {exc}", elapsed), None
    elapsed = int((time.monotonic() - started) * 1000)
    code = response.status
    if 200 <= code < 300:
        return AttemptResult(True, code, "", elapsed), None
    retry = code >= 500 or code in _RETRYABLE_4XX
    error = f"HTTP {code}: {response.text[:200]}"
    return AttemptResult(False, code, error, elapsed, retry=retry), _retry_after(response)


def send_email(delivery: Delivery) -> tuple[AttemptResult, float | None]:
    subject, text = email_message(delivery.payload)
    started = time.monotonic()
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [delivery.target])
    except Exception as exc:  # SMTP errors come in many types; all are worth a retry
        elapsed = int((time.monotonic() - started) * 1000)
        return AttemptResult(False, None, f"{type(exc).__name__}: {exc}", elapsed), None
    return AttemptResult(True, None, "", int((time.monotonic() - started) * 1000)), None


def deliver_one(delivery_id: int, now: datetime, run: DeliveryRun) -> None:
    hold = timedelta(seconds=settings.NOTIFY_TIMEOUT + 30)
    if not claim(delivery_id, now, hold):
        return  # another sender has it, or it is no longer pending
    delivery = Delivery.objects.select_related("rule").get(pk=delivery_id)
    if delivery.channel == Channel.EMAIL:
        result, retry_after = send_email(delivery)
    else:
        result, retry_after = send_webhook(delivery)
    finished = timezone.now()
    following = next_attempt_at(result, delivery.attempts, finished, retry_after)
    record_attempt(delivery, result, now=finished, next_attempt_at=following)
    if result.ok:
        run.delivered += 1
    elif following is None:
        run.failed += 1
        log.warning("notification %s gave up after %s attempts", delivery.pk, delivery.attempts)
    else:
        run.retrying += 1


def deliver_due(now: datetime | None = None, limit: int = BATCH) -> DeliveryRun:
    """Send what is due (oldest first), one attempt each."""
    now = now or timezone.now()
    due = (
        Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    run = DeliveryRun()
    for delivery_id in list(due):
        try:
            deliver_one(delivery_id, now, run)
        except Exception:
            # One broken row must not stop the others; its claim expires and it is retried.
            log.exception("notification %s: delivery failed unexpectedly", delivery_id)
    return run
