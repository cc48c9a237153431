"""The outbox writer: job notices → Delivery rows, in the transaction of the change.

Registered as a `jobs.hooks` subscriber by the shell. One indexed query per announced batch
finds the rules that could match (the workspaces' webhooks and the owners' e-mail
options); rows are written in a savepoint and delivery is requested after the commit, so a
notification never blocks, slows down by a network call, or fails the state change.
"""

import logging
from collections.abc import Sequence

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.versions import VersionedCache
from jobs.hooks import JobNotice
from notifications.actions import queue_deliveries
from notifications.messages import event_of, generic_body
from notifications.models import Channel, Delivery, NotificationRule
from notifications.triggers import request_delivery

log = logging.getLogger(__name__)


# The rules that could match, per process, by the workspaces and owners asked about; stale
# in every process once a rule or a user (their e-mail) is saved or deleted
# (accounts.versions; bumped from notifications.apps).
RULES_VERSION = "notification-rules"
RULES = VersionedCache[tuple[NotificationRule, ...]](RULES_VERSION)


def _load_rules(workspace_ids: frozenset[int], owner_ids: frozenset[int]):
    return tuple(
        NotificationRule.objects.filter(enabled=True)
        .filter(
            Q(workspace_id__in=workspace_ids, channel__in=[Channel.WEBHOOK, Channel.SLACK])
            | Q(user_id__in=owner_ids, channel=Channel.EMAIL)
        )
        .select_related("user")
    )


def _rules(workspace_ids: set[int], owner_ids: set[int]) -> tuple[NotificationRule, ...]:
    key = (frozenset(workspace_ids), frozenset(owner_ids))
    return RULES.get(key, lambda: _load_rules(*key))


def _matches(rule: NotificationRule, notice: JobNotice, event: str) -> bool:
    if event not in (rule.events or []):
        return False
    if rule.channel == Channel.EMAIL:
        return rule.user_id == notice.job.owner_id and bool(rule.user.email)
    return rule.workspace_id == notice.job.workspace_id


def on_job_notices(notices: Sequence[JobNotice]) -> None:
    evented = [(notice, event) for notice in notices if (event := event_of(notice))]
    if not evented:
        return
    rules = _rules({n.job.workspace_id for n, _ in evented}, {n.job.owner_id for n, _ in evented})
    if not rules:
        return
    now = timezone.now()
    rows = []
    for notice, event in evented:
        body = None
        for rule in rules:
            if not _matches(rule, notice, event):
                continue
            body = body or generic_body(event, notice)
            rows.append(
                Delivery(
                    rule=rule,
                    channel=rule.channel,
                    target=rule.user.email if rule.channel == Channel.EMAIL else rule.url,
                    event=event,
                    job_id=notice.job.pk,
                    payload=body,
                    next_attempt_at=now,
                )
            )
    if not rows:
        return
    try:
        with transaction.atomic():  # a savepoint: a failed insert leaves the change alone
            queue_deliveries(rows)
    except Exception:
        log.exception("notifications: could not queue %d deliveries", len(rows))
        return
    request_delivery()
