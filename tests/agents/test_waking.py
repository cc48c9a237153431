"""The agent's waker (agents.node.waking) against a stub console: how long it backs off."""

import threading
import time

from agents.node.waking import Waking
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
