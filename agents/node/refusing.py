"""What the agent does when the console refuses or fails on its heartbeats
(docs/agent-protocol.md, "Batches of independent items"): a worker report refused
REFUSALS_BEFORE_SET_ASIDE times in a row is set aside, and after as many failed heartbeats
in a row the next ones go without worker details. A part of the agent (agents.node.agent),
kept in a module of its own for the agent's size."""

import logging

from agents.node.ledger import Ledger
from agents.node.logship import LogShipper
from protocol import limits
from protocol.agent import HeartbeatReply

log = logging.getLogger("agents.node.agent")

BARE_HEARTBEATS = 10  # heartbeats sent without worker details once the console kept failing


class Refusing:
    """The agent's handling of refusals; the agent supplies these attributes."""

    ledger: Ledger
    shipper: LogShipper
    _heartbeat_failures: int
    _bare_left: int

    def _note_refusals(self, reply: HeartbeatReply, reports) -> None:
        for pod_id, reason in reply.refused.items():
            log.warning("the console refused the report of pod %s: %s", pod_id, reason)
        sent = [r.pod_id for r in reports]
        for pod_id, reason in self.ledger.note_refusals(reply.refused, sent):
            self.shipper.append(
                pod_id,
                f"[agent] the console refused this worker's report "
                f"{limits.REFUSALS_BEFORE_SET_ASIDE} times ({reason}); from now on only its "
                "state and exit code are reported",
                False,
            )

    def _console_failed(self, reports, bare: bool) -> None:
        """A heartbeat the console failed on. After a few in a row, send the next ones
        without worker details, so exits and liveness still get through."""
        self._heartbeat_failures += 1
        if bare or self._heartbeat_failures < limits.REFUSALS_BEFORE_SET_ASIDE:
            return
        self._bare_left = BARE_HEARTBEATS
        self._heartbeat_failures = 0
        log.error(
            "the console failed on %d heartbeats in a row; sending the next %d without "
            "worker details",
            limits.REFUSALS_BEFORE_SET_ASIDE,
            BARE_HEARTBEATS,
        )
        for report in reports:
            self.shipper.append(
                report.pod_id,
                "[agent] the console kept failing on heartbeats; this worker's details "
                "(progress, checkpoints, error text) are left out for a while",
                False,
            )
