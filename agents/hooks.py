"""What the agent API announces to the rooms above it (the audit log), without importing
them: who listens is registered at start-up by the shell (`console.triggers.install`).
With nothing registered announcing does nothing.

`FOREIGN_ITEMS`: a node's request named pods that are not its own (placed on another node,
or on none): those items were refused alone (docs/agent-protocol.md, "Only a node's own
pods"); one notice per request, never per line.
"""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForeignItems:
    node_id: int
    node_name: str
    endpoint: str  # "heartbeat" or "logs"
    at: datetime
    # pod id → what was refused of it ("report", "progress and checkpoints", "log lines")
    pods: Mapping[int, list[str]] = field(default_factory=dict)


Subscriber = Callable[[ForeignItems], None]
_subscribers: dict[str, Subscriber] = {}


def subscribe(name: str, subscriber: Subscriber) -> None:
    """Register (or replace) the subscriber called `name`."""
    _subscribers[name] = subscriber


def announce_foreign(notice: ForeignItems) -> None:
    """Hand the notice to every subscriber; a subscriber never fails the request."""
    if not notice.pods:
        return
    for name, subscriber in list(_subscribers.items()):
        try:
            subscriber(notice)
        except Exception:
            log.exception("agent notice subscriber %s failed; the request goes on", name)
