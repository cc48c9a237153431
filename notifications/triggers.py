""" "Send the due notifications now": a wake-up fired after the commit that wrote outbox
rows. How it travels (Celery, in-process loop, synchronous in tests) is registered by the
shell (`console.triggers.install`), like `jobs.triggers`; unregistered, it is a no-op and
the periodic delivery loop sends them a little later."""

from collections.abc import Callable

from django.db import transaction

_send: list[Callable[[], None]] = []


def register(send: Callable[[], None]) -> None:
    _send[:] = [send]


def request_delivery() -> None:
    if _send:
        transaction.on_commit(_send[0], robust=True)
