"""Celery task of the agents app: the node monitor (a trigger, like every task: no
arguments, no state in the message)."""

from celery import shared_task


@shared_task(name="agents.node_monitor_tick", ignore_result=True)
def node_monitor_tick() -> dict:
    """Run the node monitor: silent nodes become NotReady, then Lost (agents.node_monitor)."""
    from agents.node_monitor import run_node_monitor

    return run_node_monitor().as_dict()
