"""What the jobs core announces to the rooms above it (notifications, audit).

The core must not import those rooms, so, like `jobs.triggers`, it only says *what*
happened; who listens is registered at start-up by the shell (`console.triggers.install`).
With nothing registered (the simulator, a bare import) announcing does nothing.

A notice is announced inside the transaction of the change it describes, right after the
JobEvent is written: what a subscriber writes (an outbox row, an audit entry) commits or
rolls back with the change itself. A subscriber must never make the change fail: its
exceptions are logged and swallowed here, and a subscriber that writes does so in a
savepoint of its own (a failed statement would otherwise abort the caller's transaction).

Not every status change is announced: the scheduler's bulk moves (Pending → Inqueue,
→ Starting) are not, since nobody subscribes to them; everything written by
`transitions.transition` and `transitions.finish_many` is.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from jobs.models import Job

log = logging.getLogger(__name__)


class Notice(StrEnum):
    SUBMITTED = "submitted"  # a new job (or a batch of them) was created
    STATUS = "status"  # a status change, from_status → to_status
    STOP_REQUESTED = "stop_requested"  # a stop, terminate or preemption was asked for
    RESTARTED = "restarted"  # Automatic Fault Tolerance started a new attempt
    RESUBMITTED = "resubmitted"  # a finished job was submitted again as a new job
    HANG_DETECTED = "hang_detected"  # the job monitor judged the job hung
    RECLAIMED = "reclaimed"  # a lending quota takes its GPUs back from this borrower


@dataclass(frozen=True)
class JobNotice:
    kind: Notice
    job: Job  # as the writer holds it (its status may not reflect to_status yet)
    at: datetime
    reason: str = ""
    actor: str = ""
    user: Any = None  # the user who asked, when a person did
    from_status: str = ""
    to_status: str = ""
    attempt: int = 1
    detail: Mapping[str, Any] = field(default_factory=dict)


Subscriber = Callable[[Sequence[JobNotice]], None]
_subscribers: dict[str, Subscriber] = {}


def subscribe(name: str, subscriber: Subscriber) -> None:
    """Register (or replace) the subscriber called `name`."""
    _subscribers[name] = subscriber


def announce(notices: Sequence[JobNotice]) -> None:
    """Hand the notices to every subscriber, inside the caller's transaction."""
    if not notices:
        return
    for name, subscriber in list(_subscribers.items()):
        try:
            subscriber(notices)
        except Exception:
            log.exception("job notice subscriber %s failed; the change goes ahead", name)


def announce_one(kind: Notice, job: Job, at: datetime, **fields: Any) -> None:
    fields.setdefault("attempt", job.attempt)
    announce([JobNotice(kind=kind, job=job, at=at, **fields)])
