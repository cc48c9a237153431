"""Notifications: per-workspace webhook rules (generic JSON or a Slack-compatible body) and
a per-user e-mail option, on chosen job events.

An outbox: when the jobs core announces a change (`jobs.hooks`), `notifications.outbox`
writes one `Delivery` row per matching rule in the same transaction as the change (in a
savepoint, so it never makes the change fail), and asks for delivery after the commit
(`notifications.triggers`). `notifications.delivery` sends due deliveries with retries and
exponential backoff, recording every attempt; Celery, the in-process loop or (in tests) a
synchronous call runs it, like the scheduler's triggers.
"""
