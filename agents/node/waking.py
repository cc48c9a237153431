"""Waking between heartbeats (agents.wake on the console; agents.node.agent tells how).

A second thread holds the console's `wait/` open with the desired-state token of the last
heartbeat reply and wakes the agent's loop as soon as the console answers that the state
changed; then it waits for the heartbeat that learns the change before waiting again. A
change the loop already learned (the reply to the heartbeat that reported exits carries
the token the exits made, while the wait still holds the one before) wakes nothing: the
waker asks again with the new token, instead of the loop sending a heartbeat for nothing.
"""

import logging
import threading
import time
from collections.abc import Iterable, Mapping

from agents.node.client import AgentClient, ConsoleRefused, TransportError
from agents.node.runtimes.base import Runtime, WorkerState
from protocol.agent import WaitRequest

log = logging.getLogger("agents.node.agent")

WAIT_FOR = 25.0  # how long each wait asks the console to hold (it may hold less)
# An exit whose job still has workers running here is reported at most this long after it
# happened, with every exit meanwhile: the workers of one gang end within milliseconds of
# each other, and one report frees all their GPUs at once (reported one by one, the console
# gave the first ones' GPUs to smaller jobs, and the next gang waited for those:
# docs/agent-protocol.md, "Exits gathered"). The exit of a job with nothing left running
# here is reported at once.
EXIT_GATHER = 0.03


def gang_still_ending(workers: Iterable[WorkerState], job_of: Mapping[int, int]) -> bool:
    """Whether the exits not reported yet should wait for more: one of them belongs to a job
    that still has a worker running on this node, or to a job this agent run does not know
    (a worker adopted from a previous run: gathered, as every exit was before)."""
    ending: set[int | None] = set()
    running: set[int | None] = set()
    for worker in workers:
        job = job_of.get(worker.pod_id)
        (running if worker.running else ending).add(job)
    return None in ending or not ending.isdisjoint(running)


class Waking:
    """The agent's waker; the agent supplies these attributes."""

    stop: threading.Event
    wake: threading.Event
    interval: float
    client: AgentClient
    runtime: Runtime
    _beat: threading.Condition
    _beats: int
    _desired_version: str | None
    _exited: threading.Event  # a worker exited since the loop last woke
    _job_of: dict[int, int]  # pod id -> job id, of the pods this agent run launched

    def wait_for_work(self) -> None:
        """The loop's pause: until the next heartbeat is due or something wakes it; after
        an exit whose gang still runs here, up to EXIT_GATHER more, so that the gang's other
        exits ride the same report (each exit wakes this to look again)."""
        self.wake.wait(self.interval)
        self.wake.clear()
        if not self._exited.is_set():
            return
        self._exited.clear()
        deadline = time.monotonic() + EXIT_GATHER
        while not self.stop.is_set() and gang_still_ending(self.runtime.workers(), self._job_of):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.wake.wait(left)
            self.wake.clear()

    def _next_beat(self, after: int, timeout: float) -> None:
        """Wait until a heartbeat newer than `after` was applied (or `timeout`)."""
        with self._beat:
            self._beat.wait_for(lambda: self._beats > after or self.stop.is_set(), timeout)

    def wait_for_change(self, client: AgentClient) -> None:
        """One wait: hold the console's `wait/` with the last reply's token; wake the loop
        when the desired state changed, then wait for the heartbeat that learns it."""
        with self._beat:
            beats, known = self._beats, self._desired_version
        if known is None:  # no reply yet, or a console without waking
            self._next_beat(beats, self.interval)
            return
        try:
            reply = client.wait(WaitRequest(known=known, timeout=WAIT_FOR))
        except (TransportError, ConsoleRefused) as exc:
            log.debug("wait failed (%s); the next heartbeat learns of new work", exc)
            self._next_beat(beats, self.interval)
            return
        if reply.changed:
            with self._beat:
                known_now = self._desired_version
            if reply.desired_version is not None and reply.desired_version == known_now:
                return  # a heartbeat reply already said so (its own exits): nothing new
            self.wake.set()
            self._next_beat(beats, self.interval * 2)
        elif reply.retry_after is not None:  # no slot free on the console: back off
            self.stop.wait(reply.retry_after)  # the heartbeats learn of new work meanwhile

    def _waker(self) -> None:
        client = self.client.copy()
        try:
            while not self.stop.is_set():
                try:
                    self.wait_for_change(client)
                except Exception:  # never let a bug here end waking for good
                    log.exception("waiting for the console failed")
                    self.stop.wait(self.interval)
        finally:
            client.close()
