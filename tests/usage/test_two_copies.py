"""Two copies of the roll-up at once (PostgreSQL: the row lock serialises them) write what
one copy writes."""

import threading

import pytest
from django.conf import settings as django_settings
from django.db import connection

from usage.actions.rollup import roll_up_usage
from usage.models import UsageBucket, UsageRollup, UsageTotal

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]


def snapshot() -> tuple[list, list]:
    buckets = UsageBucket.objects.order_by("span", "start", "quota_id", "workspace_id", "user_id")
    totals = UsageTotal.objects.order_by("quota_id")
    return (
        [tuple(v for k, v in row.items() if k != "id") for row in buckets.values()],
        [tuple(v for k, v in row.items() if k != "id") for row in totals.values()],
    )


@pytest.fixture
def no_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"  # no scheduling cycle on commit: the history stays


def test_two_copies_at_once_write_what_one_does(no_cycles, history):
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def copy() -> None:
        try:
            barrier.wait(30)
            roll_up_usage(now=history["until"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=copy) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    both = snapshot()
    UsageBucket.objects.all().delete()
    UsageTotal.objects.all().delete()
    UsageRollup.objects.all().delete()
    roll_up_usage(now=history["until"])
    assert snapshot() == both
