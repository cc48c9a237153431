"""What `quotas.actions` announces to the rooms above it (the audit log, the scheduler).

`quotas` may import only `protocol`, so, like `jobs.hooks`, it only says *what* changed;
who listens is registered at start-up by the shell (`console.triggers.install`): the audit
log records each change, and the scheduler is asked for a cycle (a resize, a new binding or
a new member can let waiting jobs start). With nothing registered (the simulator, a bare
import) announcing does nothing.

A change is announced inside its transaction, right after the write: what a subscriber
writes commits or rolls back with the change. A subscriber never makes the change fail:
its exceptions are logged and swallowed here (one that writes uses a savepoint of its own).
"""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuotaChange:
    """One write of a tenant, workspace, membership or quota.

    `action` reads like the audit log's ("quota.change", "workspace.member_add");
    `changes` maps each changed field to its (before, after) values (before is None for a
    new object, after is None for a deleted one); `about` names what the change concerns
    without changing it (the member whose role changed: {"user": "alice"})."""

    action: str
    object_type: str
    object_id: int | None
    object_repr: str
    at: datetime
    actor: Any = None  # the user who asked, when a person did
    changes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    about: Mapping[str, Any] = field(default_factory=dict)


Subscriber = Callable[[QuotaChange], None]
_subscribers: dict[str, Subscriber] = {}


def subscribe(name: str, subscriber: Subscriber) -> None:
    """Register (or replace) the subscriber called `name`."""
    _subscribers[name] = subscriber


def announce(change: QuotaChange) -> None:
    """Hand the change to every subscriber, inside the caller's transaction."""
    for name, subscriber in list(_subscribers.items()):
        try:
            subscriber(change)
        except Exception:
            log.exception("quota change subscriber %s failed; the change goes ahead", name)
