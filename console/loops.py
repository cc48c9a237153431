"""In-process background loops for the embedded default (no Celery, no Redis).

Each loop runs one idempotent, level-triggered function every `interval` seconds, or at once
when woken by `wake(name)` (how `console.triggers` delivers the core's triggers here). The
functions are the same ones the Celery tasks call in production; only the transport differs.
"""

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from django.db import close_old_connections, connection
from django.utils import timezone

from console.actions import describe_error, record_run

log = logging.getLogger(__name__)


class Loop(threading.Thread):
    def __init__(self, name: str, func: Callable[[], object], interval: float) -> None:
        super().__init__(name=f"loop-{name}", daemon=True)
        self.loop_name = name
        self.func = func
        self.interval = interval
        self.woken = threading.Event()
        self.stopping = threading.Event()
        self.runs = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            self.woken.clear()
            close_old_connections()
            started_at, started, error = timezone.now(), time.monotonic(), None
            try:
                self.func()
            except Exception as exc:
                # One bad cycle must not kill the loop; the next tick retries from the DB.
                log.exception("loop %s failed; retrying at the next tick", self.loop_name)
                error = describe_error(exc)
            finally:
                self.runs += 1
            record_run(self.loop_name, started_at, time.monotonic() - started, error)
            self.woken.wait(self.interval)
        connection.close()

    def stop(self) -> None:
        self.stopping.set()
        self.woken.set()


_loops: dict[str, Loop] = {}
_lock = threading.Lock()


def wake(name: str) -> None:
    loop = _loops.get(name)
    if loop is not None:
        loop.woken.set()


def start_loops() -> dict[str, Loop]:
    """Start the scheduler, monitor, notification and usage roll-up loops once per process."""
    from django.conf import settings

    from agents.node_monitor import run_node_monitor
    from jobs.job_monitor import run_job_monitor
    from jobs.scheduler.cycle import run_cycle
    from notifications.delivery import deliver_due
    from usage.actions.rollup import roll_up_usage

    with _lock:
        if not _loops:
            for loop in (
                Loop("scheduler", run_cycle, settings.SCHEDULER_INTERVAL),
                Loop("monitor", run_node_monitor, settings.MONITOR_INTERVAL),
                Loop("job-monitor", run_job_monitor, settings.MONITOR_INTERVAL),
                Loop("notifications", deliver_due, settings.NOTIFY_INTERVAL),
                Loop("usage", partial(roll_up_usage, paced=True), settings.USAGE_ROLLUP_INTERVAL),
            ):
                _loops[loop.loop_name] = loop
                loop.start()
            kube = _kube_loop()
            if kube is not None:
                _loops[kube.loop_name] = kube
                kube.start()
    return dict(_loops)


def _kube_loop() -> Loop | None:
    """The Kubernetes controller's steps as a loop when KUBE_API_URL is set
    (docs/kubernetes.md): started (permissions checked, watches listed) at its first tick
    and woken by its watches; `manage.py run_kube_controller` is the same as a process."""
    from kube import config as kube_config

    if not kube_config.enabled():
        return None
    from kube.controller import Controller

    holder: dict[str, Controller] = {}

    def tick() -> None:
        if "controller" not in holder:
            controller = Controller(kube_config.load())
            controller.wake_with(loop.woken.set)
            try:
                controller.start()
            except Exception:
                controller.stop()  # its watches, if they started; the next tick tries again
                raise
            holder["controller"] = controller
        holder["controller"].step()

    loop = Loop("kube", tick, float(kube_config.load().sync_interval))
    return loop


def stop_loops(names: list[str] | None = None, timeout: float = 10.0) -> None:
    """Stop the named loops (default: all) and wait for their current cycle to end. Without
    its scheduler loop this process places nothing: every cycle of the in-process mode is
    the loop's, a trigger only wakes it (the embedded console's shutdown relies on it)."""
    with _lock:
        loops = [loop for name, loop in _loops.items() if names is None or name in names]
        for loop in loops:
            del _loops[loop.loop_name]
    for loop in loops:
        loop.stop()
    for loop in loops:
        loop.join(timeout)
