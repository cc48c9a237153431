"""Celery app. Tasks are triggers only: the database is the truth (DESIGN §2)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _periodic_triggers(sender: Celery, **kwargs) -> None:
    """Beat is the safety net behind the on-commit triggers (DESIGN §2). A tick that waited
    longer than its interval is dropped: the next one does the same work."""
    from django.conf import settings

    for task, every in (
        ("jobs.schedule_tick", settings.SCHEDULER_INTERVAL),
        ("jobs.job_monitor_tick", settings.MONITOR_INTERVAL),
        ("agents.node_monitor_tick", settings.MONITOR_INTERVAL),
        ("notifications.deliver_due", settings.NOTIFY_INTERVAL),
    ):
        sender.add_periodic_task(every, sender.signature(task), name=task, expires=every)
