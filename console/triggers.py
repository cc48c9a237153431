"""How the core's triggers travel in this deployment (registered into `jobs.triggers` and
`notifications.triggers`), and who hears the core's notices (`jobs.hooks`: notifications'
outbox and the audit log; `quotas.hooks`: the audit log and a scheduling cycle;
`agents.hooks`: the audit log).

`settings.CONSOLE_LOOPS` picks the transport, read at send time: a Celery task
(production), a wake-up of an in-process loop (the embedded default), or a synchronous call
right after the commit (tests). `jobs.triggers` sends only after the surrounding
transaction commits, so a worker never runs before the data it needs is visible.
"""

from django.conf import settings
from django.db import transaction

from agents import hooks as agent_hooks
from agents.hooks import ForeignItems
from jobs import hooks, triggers
from quotas import hooks as quota_hooks
from quotas.hooks import QuotaChange

FOREIGN_PODS_AUDITED = 20  # pods named in one audit entry of a node's foreign items


def send_scheduling() -> None:
    mode = settings.CONSOLE_LOOPS
    if mode == "celery":
        from console.requestid import current_request_id
        from jobs.scheduler.coalesce import want_cycle
        from jobs.tasks import schedule_tick

        want_cycle()  # a cycle already running runs again for it (jobs.scheduler.coalesce)

        # Expires after one interval: a trigger still queued by then is redundant (beat's
        # next tick, or any later cycle, does the same work), so an outage leaves no backlog.
        schedule_tick.apply_async(
            expires=settings.SCHEDULER_INTERVAL,
            headers={"request_id": current_request_id()},
        )
    elif mode == "inprocess":
        from console.loops import wake

        wake("scheduler")
    else:  # eager
        from jobs.scheduler.cycle import run_cycle

        run_cycle()


def send_agent_wake() -> None:
    """Tell the agents' waits of every console process (agents.wake): the same in every
    mode, since the waits are held by web processes whichever process wrote."""
    from agents.wake import nudge

    nudge()


def send_delivery() -> None:
    """Send due notifications (the outbox rows a commit just wrote)."""
    mode = settings.CONSOLE_LOOPS
    if mode == "celery":
        from notifications.tasks import deliver_due_tick

        deliver_due_tick.delay()
    elif mode == "inprocess":
        from console.loops import wake

        wake("notifications")
    else:  # eager
        from notifications.delivery import deliver_due

        deliver_due()


def schedule_after_quota_change(change: QuotaChange) -> None:
    """A resize, a binding or a new member can let waiting jobs start (or call for a
    reclaim): ask for a cycle once the change commits."""
    triggers.request_scheduling()


def audit_foreign_items(notice: ForeignItems) -> None:
    """A node named other nodes' pods (`agents.hooks`): one audit entry per request, in a
    savepoint of its own (it never fails the request)."""
    from audit.actions import record

    pods = sorted(notice.pods)
    with transaction.atomic():
        record(
            "node.foreign_items",
            actor_name=f"node {notice.node_name}",
            object_type="node",
            object_id=notice.node_id,
            object_repr=notice.node_name,
            detail={
                "endpoint": notice.endpoint,
                "refused": len(pods),
                # A bounded sample: one entry per request whatever its size.
                "pods": {str(p): notice.pods[p] for p in pods[:FOREIGN_PODS_AUDITED]},
            },
            at=notice.at,
        )


def install() -> None:
    """Register the transports and the subscribers of the core's notices (called once at
    start-up, from ConsoleConfig.ready)."""
    from audit.subscribers import on_job_notices as audit_job_notices
    from audit.subscribers import on_quota_change as audit_quota_change
    from notifications import triggers as notification_triggers
    from notifications.outbox import on_job_notices as queue_notifications

    triggers.register(triggers.SCHEDULER, send_scheduling)
    triggers.register(triggers.AGENTS, send_agent_wake)
    notification_triggers.register(send_delivery)
    hooks.subscribe("notifications", queue_notifications)
    hooks.subscribe("audit", audit_job_notices)
    quota_hooks.subscribe("audit", audit_quota_change)
    quota_hooks.subscribe("scheduling", schedule_after_quota_change)
    agent_hooks.subscribe("audit", audit_foreign_items)
