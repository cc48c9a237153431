"""Notification rules cached per process (accounts.versions): a cached look-up costs no
query, and a rule added, disabled or deleted is heard at the next change."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.models import Delivery, NotificationRule
from notifications.outbox import RULES
from tests.notifications.conftest import webhook
from tests.redis_store import URL, redis_or_skip
from tests.web.conftest import submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def version_store(settings):
    redis_or_skip(URL, " for the version store")
    settings.VERSION_STORE_URL = URL
    settings.CONSOLE_LOOPS = "inprocess"  # commits trigger nothing
    RULES.clear()
    yield
    RULES.clear()


def _rule_reads(researcher, workspace, quota) -> int:
    with CaptureQueriesContext(connection) as ctx:
        submit(researcher, workspace, quota)
    return sum(1 for q in ctx.captured_queries if "notifications_notificationrule" in q["sql"])


def test_a_cached_lookup_costs_no_query(researcher, workspace, quota, node):
    webhook(workspace, "http://hooks.invalid/a", ["queued"])
    assert _rule_reads(researcher, workspace, quota) == 1
    assert _rule_reads(researcher, workspace, quota) == 0
    assert Delivery.objects.count() == 2


@pytest.mark.parametrize("change", ["add", "disable", "delete"])
def test_a_changed_rule_is_heard_at_once(
    researcher, workspace, quota, node, change, django_capture_on_commit_callbacks
):
    if change != "add":
        webhook(workspace, "http://hooks.invalid/a", ["queued"])
    submit(researcher, workspace, quota)
    submit(researcher, workspace, quota)  # cached now
    before = Delivery.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        if change == "add":
            webhook(workspace, "http://hooks.invalid/a", ["queued"])
        elif change == "disable":
            rule = NotificationRule.objects.get()
            rule.enabled = False
            rule.save()
        else:
            NotificationRule.objects.all().delete()
    submit(researcher, workspace, quota)
    assert Delivery.objects.count() - before == (1 if change == "add" else 0)
