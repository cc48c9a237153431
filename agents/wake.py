"""Waking agents: `POST /api/v1/agent/wait/` answers as soon as a node's desired state
changes, so a pod placed on free capacity starts within a poll tick instead of at the
node's next heartbeat (docs/agent-protocol.md).

One watcher per console process: while any agent waits, a thread runs ONE aggregate query
per tick for all waiting nodes (live pods' count, id sum, how many are asked to stop:
`agents.decisions.desired_version`) and wakes the requests whose node's token differs from
the one they know. The cost is one small indexed query per tick per process, whatever the
number of nodes, and nothing at all while no agent waits.

A tick comes at once when a writer says the desired state changed (`nudge`, after the commit
of a cycle that placed pods or of a stop order: `jobs.triggers.wake_agents`), else after
`AGENT_WAIT_POLL` (the safety net for any other change). The writer may be another process
(the Celery worker's cycle): on PostgreSQL `nudge` sends `NOTIFY agent_wake`, and each
watcher's listener thread, on a connection of its own that does nothing but LISTEN, turns it
into a tick. On SQLite (the embedded default: the loops run in this process) the nudge is a
thread event. A hint carries nothing: the tick's query is the truth, so hints that come
together cost one query.

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
from django.db import close_old_connections, connection, connections
from django.db.models import Count, Q, Sum

from agents.decisions import desired_version
from jobs.models import Pod, PodDesired
from policy.statuses import ACTIVE_POD_STATUSES

log = logging.getLogger(__name__)


# The PostgreSQL channel of `nudge` (NOTIFY carries no payload: a hint, not the state).
CHANNEL = "agent_wake"
# How often the listener looks whether its watcher still runs (it blocks in between).
LISTEN_CHECK_S = 0.25
LISTEN_RETRY_S = 2.0  # after the listening connection failed

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
        self._listener: threading.Thread | None = None
        self._closed = False
        # Set by `nudge` (or the listener): tick now instead of at the end of the poll.
        self.hint = threading.Event()

    def wait(self, node_id: int, known: str, timeout: float) -> str | None:
        """Block until the node's token differs from `known` (that token) or `timeout`
        passes (None). Raises NoSlot when this process already holds `slots` waits."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if sum(self._waiting.values()) >= self.slots:
                raise NoSlot
            self._waiting[node_id] = self._waiting.get(node_id, 0) + 1
            began = self._tick
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agent-wake", daemon=True)
                self._thread.start()
            if self._listener is None and connection.vendor == "postgresql":
                self._listener = threading.Thread(
                    target=self._listen, name="agent-wake-listen", daemon=True
                )
                self._listener.start()
            try:
                while not self._closed:
                    seen = self._seen.get(node_id)
                    if seen is not None and seen[1] > began and seen[0] != known:
                        return seen[0]
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._cond.wait(left)
                return None
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
            thread, listener = self._thread, self._listener
        self.hint.set()
        for running in (thread, listener):
            if running is not None:
                running.join()

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
                self.hint.clear()  # a hint from here on is after this read: another tick
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
                self.hint.wait(self.poll)
        finally:
            connection.close()  # this thread's own connection; a new thread opens another

    def _watching(self) -> bool:
        """Whether the listener goes on (else it is marked gone, under the lock, so that
        the next wait starts another)."""
        with self._cond:
            if self._closed or self._thread is None:
                self._listener = None
                return False
            return True

    def _listen(self) -> None:
        """PostgreSQL: turn `NOTIFY agent_wake` from any process into a tick, on a
        connection of its own (LISTEN only, autocommit) while this watcher runs."""
        while self._watching():
            own = connections.create_connection(connection.alias)
            try:
                with own.cursor() as cursor:
                    cursor.execute(f"LISTEN {CHANNEL}")
                self.hint.set()  # a change may have come while nobody listened
                while self._watching():
                    for _ in own.connection.notifies(timeout=LISTEN_CHECK_S, stop_after=1):
                        self.hint.set()
            except Exception as exc:  # the database restarting, say: listen again later
                log.warning("cannot listen for agent wake-ups (%s); the poll goes on", exc)
                time.sleep(LISTEN_RETRY_S)
            finally:
                own.close()


_watcher: Watcher | None = None
_lock = threading.Lock()


def nudge() -> None:
    """The desired state of some nodes changed (`jobs.triggers.wake_agents`, after the
    commit): tick this process's watcher now, and on PostgreSQL every other process's."""
    current = _watcher
    if current is not None:
        current.hint.set()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {CHANNEL}")


def watcher() -> Watcher:
    global _watcher
    with _lock:
        if _watcher is None:
            _watcher = Watcher(poll=settings.AGENT_WAIT_POLL, slots=settings.AGENT_WAIT_SLOTS)
        return _watcher
