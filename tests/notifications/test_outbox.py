"""The outbox: which notices become deliveries, written with the change, never blocking it;
delivery with retries, backoff and a bound; generic, Slack and e-mail bodies."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jobs.actions.stop import request_stop
from notifications.actions import AttemptResult
from notifications.delivery import backoff_seconds, deliver_due, next_attempt_at
from notifications.models import Channel, Delivery, DeliveryStatus, NotificationRule
from policy.statuses import JobStatus
from tests.notifications.conftest import webhook
from tests.web.conftest import finish, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def quiet(settings):
    """Commits trigger nothing: the test runs deliveries itself."""
    settings.CONSOLE_LOOPS = "inprocess"


def test_a_matching_rule_gets_a_delivery_per_event(quiet, researcher, workspace, quota, node):
    webhook(workspace, "http://hooks.invalid/a", ["queued", "started", "completed"])
    webhook(workspace, "http://hooks.invalid/b", ["failed"])
    job = submit(researcher, workspace, quota)
    finish(job, node)
    rows = list(Delivery.objects.order_by("id").values_list("event", "target"))
    assert rows == [
        ("queued", "http://hooks.invalid/a"),
        ("started", "http://hooks.invalid/a"),
        ("completed", "http://hooks.invalid/a"),
    ]
    body = Delivery.objects.get(event="completed").payload
    assert body["event"] == "completed" and body["job"]["id"] == job.pk
    assert body["job"]["status"] == "Completed" and body["job"]["workspace"] == "vision"
    assert body["job"]["exit_code"] == 0  # as of the change, though set in the same UPDATE
    assert body["summary"].startswith(f"Job train (#{job.pk}) completed")


def test_other_workspaces_and_disabled_rules_hear_nothing(
    quiet, researcher, workspace, other_workspace, quota, node
):
    webhook(other_workspace, "http://hooks.invalid/x", ["queued"])
    webhook(workspace, "http://hooks.invalid/y", ["queued"], enabled=False)
    submit(researcher, workspace, quota)
    assert Delivery.objects.count() == 0


def test_the_outbox_row_rolls_back_with_the_change(quiet, researcher, workspace, quota, node):
    webhook(workspace, "http://hooks.invalid/a", ["stopped"])
    job = submit(researcher, workspace, quota)
    with pytest.raises(RuntimeError), transaction.atomic():
        request_stop(job, user=researcher)
        assert Delivery.objects.filter(event="stopped").count() == 1
        raise RuntimeError("the caller's transaction fails later")
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert Delivery.objects.filter(event="stopped").count() == 0


def test_a_failing_outbox_never_blocks_the_change(
    quiet, researcher, workspace, quota, node, monkeypatch
):
    import notifications.outbox

    webhook(workspace, "http://hooks.invalid/a", ["stopped"])
    job = submit(researcher, workspace, quota)

    def broken(rows):
        raise RuntimeError("disk full")

    monkeypatch.setattr(notifications.outbox, "queue_deliveries", broken)
    request_stop(job, user=researcher)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED


def submitted(researcher, workspace, quota, capture, **spec):
    """Submit, then run what the commit triggers (the first delivery attempt, eagerly)."""
    with capture(execute=True):
        return submit(researcher, workspace, quota, **spec)


def test_retries_back_off_then_deliver(
    researcher, workspace, quota, node, receiver, fast_retries, django_capture_on_commit_callbacks
):
    hook = receiver(fail_first=2)
    webhook(workspace, hook.url, ["queued"], secret="s3cret")
    job = submitted(researcher, workspace, quota, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert delivery.attempts == 1 and delivery.status == DeliveryStatus.PENDING
    assert delivery.last_status_code == 503
    first_retry = delivery.next_attempt_at
    assert deliver_due(now=first_retry - timedelta(seconds=0.05)).as_dict()["delivered"] == 0
    deliver_due(now=first_retry + timedelta(seconds=1))
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.next_attempt_at - first_retry >= timedelta(
        seconds=0.2
    )
    deliver_due(now=delivery.next_attempt_at + timedelta(seconds=1))
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.attempts == 3
    assert [a.status_code for a in delivery.attempt_log.all()] == [503, 503, 200]
    last = hook.accepted()[-1]
    assert last["headers"]["X-Console-Event"] == "queued"
    assert last["headers"]["X-Console-Attempt"] == "3"
    expected = hmac.new(b"s3cret", last["raw"], hashlib.sha256).hexdigest()
    assert last["headers"]["X-Console-Signature"] == f"sha256={expected}"
    assert last["body"]["job"]["id"] == job.pk


def test_a_refusing_receiver_is_not_retried(
    researcher, workspace, quota, node, receiver, django_capture_on_commit_callbacks
):
    hook = receiver(fail_first=99, fail_status=404)
    webhook(workspace, hook.url, ["queued"])
    submitted(researcher, workspace, quota, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1


def test_retries_stop_after_the_maximum(
    researcher, workspace, quota, node, receiver, settings, django_capture_on_commit_callbacks
):
    settings.NOTIFY_MAX_ATTEMPTS = 3
    hook = receiver(fail_first=99)
    webhook(workspace, hook.url, ["queued"])
    submitted(researcher, workspace, quota, django_capture_on_commit_callbacks)
    later = timezone.now()
    for _ in range(10):
        later += timedelta(hours=2)
        deliver_due(now=later)
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 3
    assert len(hook.requests) == 3


def test_an_unreachable_receiver_is_recorded(
    researcher, workspace, quota, node, django_capture_on_commit_callbacks, loopback_webhooks
):
    webhook(workspace, "http://127.0.0.1:9/nothing-listens", ["queued"])
    submitted(researcher, workspace, quota, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert delivery.last_status_code is None and "ConnectionError" in delivery.last_error
    assert delivery.attempt_log.get().error == delivery.last_error


def test_slack_body(
    researcher, workspace, quota, node, receiver, django_capture_on_commit_callbacks
):
    hook = receiver()
    webhook(workspace, hook.url, ["queued"], channel=Channel.SLACK)
    submitted(researcher, workspace, quota, django_capture_on_commit_callbacks, name="<b>&co")
    (request,) = hook.accepted()
    body = request["body"]
    assert set(body) == {"text", "blocks"}
    assert "&lt;b&gt;&amp;co" in body["blocks"][0]["text"]["text"]
    assert "<b>" not in json.dumps(body)


def test_email_to_the_owner(
    researcher, colleague, workspace, quota, node, mailoutbox, django_capture_on_commit_callbacks
):
    from notifications.actions import set_email_option

    researcher.email = "alice@example.com"
    researcher.save()
    set_email_option(researcher, enabled=True, events=["failed"])
    set_email_option(colleague, enabled=True, events=["failed"])  # no address: nothing
    job = submit(researcher, workspace, quota)
    with django_capture_on_commit_callbacks(execute=True):
        finish(job, node, JobStatus.FAILED)
    (mail,) = mailoutbox
    assert mail.to == ["alice@example.com"]
    assert f"(#{job.pk}) failed" in mail.subject
    assert f"/jobs/{job.pk}/" in mail.body
    assert Delivery.objects.get().status == DeliveryStatus.DELIVERED


def test_the_email_settings_page(member_client, researcher, outsider):
    response = member_client.get("/account/notifications/")
    assert response.status_code == 200 and "no e-mail address" in response.text
    member_client.post(
        "/account/notifications/", {"enabled": "on", "events": ["failed", "preempted"]}
    )
    rule = NotificationRule.objects.get(user=researcher)
    assert rule.enabled and rule.events == ["failed", "preempted"]
    bad = member_client.post("/account/notifications/", {"events": ["exploded"]})
    assert bad.status_code == 400
    assert NotificationRule.objects.get(user=researcher).events == ["failed", "preempted"]


def test_the_email_settings_page_needs_a_login(client):
    assert client.get("/account/notifications/").status_code == 302


# Liveness: no delivery is retried without bound --------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(
    outcomes=st.lists(
        st.tuples(st.sampled_from([None, 200, 404, 408, 429, 500, 503]), st.integers(0, 10**6)),
        min_size=1,
        max_size=30,
    ),
    max_attempts=st.integers(1, 10),
    base=st.floats(0.1, 100),
    cap=st.floats(1, 10_000),
)
def test_retries_are_bounded_and_backoff_grows(outcomes, max_attempts, base, cap):
    from django.test import override_settings

    now = timezone.now()
    with override_settings(
        NOTIFY_MAX_ATTEMPTS=max_attempts, NOTIFY_BACKOFF_BASE=base, NOTIFY_BACKOFF_MAX=cap
    ):
        attempts, waits = 0, []
        for status, retry_after in outcomes:
            attempts += 1
            ok = status == 200
            retryable = status is None or status >= 500 or status in (408, 429)
            result = AttemptResult(ok, status, "", 0, retry=retryable)
            following = next_attempt_at(result, attempts, now, float(retry_after))
            if following is None:
                break
            waits.append((following - now).total_seconds())
        assert attempts <= max_attempts
        assert all(0 < w <= max(cap, base) + 1e-6 for w in waits)
    assert [backoff_seconds(n, base, cap) for n in range(1, 6)] == sorted(
        backoff_seconds(n, base, cap) for n in range(1, 6)
    )
