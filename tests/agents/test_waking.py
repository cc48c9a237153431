"""The agent's waker (agents.node.waking) against a stub console: how long it backs off;
and the loop's pause after an exit, which gathers a gang's exits only."""

import threading
import time
from types import SimpleNamespace
from unittest import mock

from agents.node import waking
from agents.node.runtimes.base import WorkerState
from agents.node.waking import Waking, gang_still_ending
from protocol.agent import WaitReply


class _Console:
    def __init__(self, reply: WaitReply) -> None:
        self.reply = reply
        self.calls = 0

    def wait(self, request) -> WaitReply:
        self.calls += 1
        return self.reply


class _Agent(Waking):
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.interval = 0.05
        self._beat = threading.Condition()
        self._beats = 0
        self._desired_version = "1.1.0"
        self._exited = threading.Event()
        self._job_of: dict[int, int] = {}


def _beat_meanwhile(agent: _Agent) -> None:
    for _ in range(5):
        time.sleep(0.03)
        with agent._beat:
            agent._beats += 1
            agent._beat.notify_all()


def test_a_refused_wait_backs_off_for_retry_after_even_across_heartbeats():
    """Refused a slot, the agent waits the console's `retry_after` (six intervals) before
    asking again: its heartbeats go on meanwhile and do not bring the next ask forward."""
    agent, console = _Agent(), _Console(WaitReply(changed=False, retry_after=0.3))
    threading.Thread(target=_beat_meanwhile, args=(agent,), daemon=True).start()
    started = time.monotonic()
    agent.wait_for_change(console)
    assert time.monotonic() - started >= 0.28
    assert console.calls == 1 and not agent.wake.is_set()


def test_a_changed_state_wakes_the_loop():
    agent, console = _Agent(), _Console(WaitReply(changed=True))
    agent.wait_for_change(console)
    assert agent.wake.is_set()


def test_a_change_the_last_heartbeat_already_learned_wakes_nothing():
    """The wait still held the token from before the agent's exits; the reply to the
    heartbeat that reported them carried the token they made. The console answers the wait
    with that same token: the loop already knows it, so no heartbeat is sent for it."""
    agent = _Agent()
    agent._desired_version = "0.0.0"  # the exit heartbeat's reply
    agent.wait_for_change(_Console(WaitReply(changed=True, desired_version="0.0.0")))
    assert not agent.wake.is_set()


def test_a_change_beyond_what_the_last_heartbeat_learned_wakes_the_loop():
    agent = _Agent()
    agent.wait_for_change(_Console(WaitReply(changed=True, desired_version="2.9.0")))
    assert agent.wake.is_set()


def _worker(pod_id: int, running: bool) -> WorkerState:
    return WorkerState(pod_id=pod_id, attempt=1, running=running, exit_code=None if running else 0)


def test_an_exit_waits_for_the_rest_of_its_gang_only():
    """Exits are gathered (docs/agent-protocol.md, "Exits gathered") while a job that ended
    here still has a worker running here; another job's running workers do not hold it."""
    job_of = {1: 10, 2: 10, 3: 20}
    assert gang_still_ending([_worker(1, False), _worker(2, True)], job_of)
    assert not gang_still_ending([_worker(1, False), _worker(2, False)], job_of)
    assert not gang_still_ending([_worker(3, False), _worker(1, True), _worker(2, True)], job_of)
    assert not gang_still_ending([_worker(1, True)], job_of)  # nothing ended


def test_an_exit_of_a_job_this_run_did_not_launch_is_gathered():
    """A worker adopted from a previous agent run: its job is not known, so its exit waits
    the whole window, as every exit did before."""
    assert gang_still_ending([_worker(7, False)], {})
    assert gang_still_ending([_worker(7, False), _worker(1, False)], {1: 10})


def test_the_gather_ends_when_the_gang_has_ended():
    """The pause after an exit ends as soon as the gang's last worker exits (its exit wakes
    the loop), not at the end of the window."""
    workers = [_worker(1, False), _worker(2, True)]
    agent = _Agent()
    agent._job_of = {1: 10, 2: 10}
    agent.runtime = SimpleNamespace(workers=lambda: list(workers))
    agent._exited.set()
    agent.wake.set()

    def second_exit() -> None:
        time.sleep(0.05)
        workers[1] = _worker(2, False)
        agent.wake.set()

    threading.Thread(target=second_exit, daemon=True).start()
    started = time.monotonic()
    with mock.patch.object(waking, "EXIT_GATHER", 5.0):
        agent.wait_for_work()
    assert 0.04 <= time.monotonic() - started < 4.0
