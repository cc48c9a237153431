"""Every write to the audit log. Entries are only ever added."""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.utils import timezone

from audit import context
from audit.models import AuditEntry
from jobs.actions.insert import insert_row

# Friendlier object types for the admin's models (else "<app>.<model>").
ADMIN_OBJECT_TYPES = {
    "quotas.quota": "quota",
    "quotas.workspace": "workspace",
    "quotas.tenant": "tenant",
    "cluster.node": "node",
    "agents.bootstraptoken": "agent_token",
    "accounts.apitoken": "api_token",
}
# Written through their own actions, which audit each change with its before and after
# (`audit.subscribers.on_quota_change`): their admin history is not copied a second time.
AUDITED_BY_ACTIONS = {"quotas"}
_FLAG_VERBS = {ADDITION: "add", CHANGE: "change", DELETION: "delete"}
# Admin actions name their verb at the start of the history message: "cordon: …".
_VERB_MESSAGE = re.compile(r"^([a-z_]{2,30}): ")


@dataclass
class Entry:
    action: str
    actor: Any = None  # a user, or None for the system / an unknown caller
    actor_name: str = ""
    object_type: str = ""
    object_id: str | int = ""
    object_repr: str = ""
    detail: dict = field(default_factory=dict)
    at: datetime | None = None


def _row(entry: Entry, source: context.Source) -> AuditEntry:
    actor = entry.actor if getattr(entry.actor, "is_authenticated", False) else None
    name = entry.actor_name or (actor.get_username() if actor is not None else "")
    return AuditEntry(
        at=entry.at or timezone.now(),
        action=entry.action[:64],
        actor=actor,
        actor_name=name[:150],
        object_type=entry.object_type[:64],
        object_id=str(entry.object_id)[:64],
        object_repr=entry.object_repr[:200],
        source_address=source.address or None,
        via=source.via,
        user_agent=source.user_agent[:200],
        detail=entry.detail,
    )


def record(action: str, **fields: Any) -> AuditEntry:
    """One entry, from the request being served (its address, API or web)."""
    row = _row(Entry(action, **fields), context.current())
    row.save(force_insert=True)
    return row


def record_many(entries: Iterable[Entry]) -> int:
    source = context.current()
    rows = [_row(entry, source) for entry in entries]
    if len(rows) == 1:  # a single submission's: without the ORM's compiler
        insert_row(rows[0])
    else:
        AuditEntry.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def _admin_action(log: LogEntry) -> tuple[str, str, str]:
    """(action, object type, message) of an admin history entry."""
    label = f"{log.content_type.app_label}.{log.content_type.model}" if log.content_type else ""
    object_type = ADMIN_OBJECT_TYPES.get(label, label)
    message = log.change_message or ""
    verb = _FLAG_VERBS.get(log.action_flag, "change")
    found = _VERB_MESSAGE.match(message)
    if found:
        verb = found.group(1)
    elif message.startswith("["):
        message = str(log.get_change_message())  # Django's JSON form, as the admin shows it
    return f"{object_type}.{verb}", object_type, message


def mirror_admin_entries(user, after_id: int) -> int:
    """Copy the admin history entries `user` made after `after_id` (each once)."""
    logs = list(
        LogEntry.objects.filter(pk__gt=after_id, user_id=user.pk)
        .exclude(content_type__app_label__in=AUDITED_BY_ACTIONS)
        .select_related("content_type")
        .order_by("pk")
    )
    if not logs:
        return 0
    source = context.current()
    rows = []
    for log in logs:
        action, object_type, message = _admin_action(log)
        row = _row(
            Entry(
                action,
                actor=user,
                object_type=object_type,
                object_id=log.object_id or "",
                object_repr=log.object_repr,
                detail={"message": message} if message else {},
                at=log.action_time,
            ),
            source,
        )
        row.admin_log_id = log.pk
        rows.append(row)
    AuditEntry.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
