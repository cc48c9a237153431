"""Wake-ups the core fires after a commit: "look at the queue now". Messages carry no state;
the database is the truth (docs/processes.md).

The core only says *that* the scheduler should look; *how* the message travels (a Celery
task, a wake-up of an in-process loop, a synchronous call in tests) is registered by the
shell at start-up (`console.triggers.install`, from `ConsoleConfig.ready`), so nothing here imports
the layer above. With nothing registered (the simulator, a bare import) a trigger is a
no-op: the periodic loops do the same work a little later.
"""

from collections.abc import Callable

from django.db import transaction

SCHEDULER = "scheduler"
AGENTS = "agents"
_senders: dict[str, Callable[[], None]] = {}


def register(name: str, send: Callable[[], None]) -> None:
    """Set how the `name` trigger is delivered (replacing any earlier registration)."""
    _senders[name] = send


def _send_after_commit(name: str) -> None:
    """Deliver the `name` trigger once the surrounding transaction commits (nothing if no
    transport is registered)."""
    send = _senders.get(name)
    if send is not None:
        transaction.on_commit(send, robust=True)


def request_scheduling() -> None:
    """Ask for a scheduling cycle once the surrounding transaction commits."""
    _send_after_commit(SCHEDULER)


def wake_agents() -> None:
    """Some nodes' desired state changed (pods placed, stops ordered): once the surrounding
    transaction commits, the agents waiting for work hear it now rather than at the next
    poll (agents.wake)."""
    _send_after_commit(AGENTS)
