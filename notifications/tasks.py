"""Celery task of notifications: a trigger (no arguments), like the scheduler's."""

from celery import shared_task


@shared_task(name="notifications.deliver_due", ignore_result=True)
def deliver_due_tick() -> dict:
    from notifications.delivery import deliver_due

    return deliver_due().as_dict()
