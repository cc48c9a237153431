"""Usage history's Celery task: a trigger only (docs/processes.md), like the jobs core's."""

from celery import shared_task


@shared_task(name="usage.rollup_tick", ignore_result=True)
def usage_rollup_tick() -> dict:
    """Roll pods' intervals up into usage history's buckets (usage.actions.rollup)."""
    from usage.actions.rollup import roll_up_usage

    return roll_up_usage(paced=True).as_dict()
