"""Waking agents: `POST /api/v1/agent/wait/` answers as soon as a node's desired state
changes, so a pod placed on free capacity starts within a poll tick instead of at the
node's next heartbeat (docs/agent-protocol.md).

One watcher per console process: while any agent waits, a thread runs ONE aggregate query
per tick for all waiting nodes (live pods' count, id sum, how many are asked to stop:
`agents.decisions.desired_version`) and wakes the requests whose node's token differs from
the one they know. The cost is one small indexed query per tick per process, whatever the
number of nodes, and nothing at all while no agent waits.

A waiting request holds a web server thread. The threaded servers of the embedded default
start one per connection; gunicorn's gthread workers have a fixed number, so each process
holds at most `AGENT_WAIT_SLOTS` waits at once (deploy/gunicorn.conf.py leaves the other
threads to requests). A wait beyond that is answered at once with `retry_after`, and that
agent learns of new work at its next heartbeat, as before.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Count, Q, Sum

from agents.decisions import desired_version
from jobs.models import Pod, PodDesired
from policy.statuses import ACTIVE_POD_STATUSES

log = logging.getLogger(__name__)


# An agent refused a slot asks again after this many heartbeat intervals: asking at every
# heartbeat made refused waits outnumber heartbeats (bench/fleet.py, 200 nodes: 63 waits/s
# beside 38 heartbeats/s on 8 slots), for no gain: without a slot it learns at heartbeats.
WAIT_REFUSED_RETRY_BEATS = 6


class NoSlot(Exception):
    """Every wait slot of this process is taken."""


def versions_of(node_ids: list[int]) -> dict[int, str]:
    """Each node's desired-state token, in one query (a node without live pods has one
    too)."""
    rows = (
        Pod.objects.filter(node_id__in=node_ids, status__in=list(ACTIVE_POD_STATUSES))
        .order_by()
        .values("node_id")
        .annotate(
            live=Count("id"),
            id_sum=Sum("id"),
            stopping=Count("id", filter=~Q(desired=PodDesired.RUN)),
        )
    )
    found = {r["node_id"]: desired_version(r["live"], r["id_sum"], r["stopping"]) for r in rows}
    empty = desired_version(0, 0, 0)
    return {node_id: found.get(node_id, empty) for node_id in node_ids}


class Watcher:
    def __init__(self, *, poll: float, slots: int) -> None:
        self.poll = poll
        self.slots = slots
        self._cond = threading.Condition()
        self._waiting: dict[int, int] = {}  # node id → waits held for it
        # node id → (token, tick it was read in); a token counts for a wait only if it was
        # read in a tick that started after the wait began.
        self._seen: dict[int, tuple[str, int]] = {}
        self._tick = 0
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, node_id: int, known: str, timeout: float) -> bool:
        """Block until the node's token differs from `known` (True) or `timeout` passes
        (False). Raises NoSlot when this process already holds `slots` waits."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if sum(self._waiting.values()) >= self.slots:
                raise NoSlot
            self._waiting[node_id] = self._waiting.get(node_id, 0) + 1
            began = self._tick
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agent-wake", daemon=True)
                self._thread.start()
            try:
                while not self._closed:
                    seen = self._seen.get(node_id)
                    if seen is not None and seen[1] > began and seen[0] != known:
                        return True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                return False
            finally:
                self._waiting[node_id] -= 1
                if not self._waiting[node_id]:
                    del self._waiting[node_id]
                    self._seen.pop(node_id, None)

    def close(self) -> None:
        """Answer every wait held (unchanged) and stop the thread (the server is going)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._waiting or self._closed:
                        self._thread = None
                        return
                    self._tick += 1
                    tick = self._tick
                    ids = sorted(self._waiting)
                try:
                    close_old_connections()
                    found = versions_of(ids)
                except Exception:
                    log.exception("cannot read the desired state of waiting nodes")
                    found = {}
                with self._cond:
                    for node_id, token in found.items():
                        if node_id in self._waiting:
                            self._seen[node_id] = (token, tick)
                    self._cond.notify_all()
                time.sleep(self.poll)
        finally:
            connection.close()  # this thread's own connection; a new thread opens another


_watcher: Watcher | None = None
_lock = threading.Lock()


def watcher() -> Watcher:
    global _watcher
    with _lock:
        if _watcher is None:
            _watcher = Watcher(poll=settings.AGENT_WAIT_POLL, slots=settings.AGENT_WAIT_SLOTS)
        return _watcher
