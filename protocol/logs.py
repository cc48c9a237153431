"""Log lines in the agent protocol (docs/agent-protocol.md): a worker's lines with their
sequence numbers, a batch of them (the logs request, or riding in a heartbeat), and the
console's acknowledgement. No Django imports."""

from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from protocol import limits
from protocol.base import Attempt, PodId, Seq, _FromAgent, _FromConsole
from protocol.text import clean_log_line

# A log line is repaired, never refused: NUL → ␀, a newline inside → ␤, cut at limits.LOG_LINE.
LogLine = Annotated[str, AfterValidator(clean_log_line)]


class LogLines(_FromAgent):
    """Consecutive lines of one worker: line i has sequence number first_seq + i."""

    pod_id: PodId
    attempt: Attempt
    first_seq: Seq
    # At least one line, unless the batch only says `end`.
    lines: Annotated[list[LogLine], Field(max_length=limits.LINES_PER_BATCH)]
    # Indices of lines that continue on the next one: the worker wrote them as one line,
    # longer than the agent's line limit, and the agent cut it (additive: older agents send
    # none). The raw log joins them again without a newline.
    continued: Annotated[list[int], Field(max_length=limits.LINES_PER_BATCH)] = []
    # Additive (end of stream): these are the worker's last lines; the worker has exited
    # and nothing follows them (an empty batch: everything was acknowledged already). Sent
    # only to a console whose heartbeat reply said `log_end`; the console then knows the
    # log is complete (docs/agent-protocol.md, "End of a worker's log").
    end: bool = False

    @model_serializer(mode="wrap")
    def _end_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if not data.get("end"):
            data.pop("end", None)
        return data

    @model_validator(mode="after")
    def _continued_indices(self) -> "LogLines":
        if not self.lines and not self.end:
            raise ValueError("a batch holds at least one line, unless it only says end")
        if self.continued != sorted(set(self.continued)) or any(
            not 0 <= i < len(self.lines) for i in self.continued
        ):
            raise ValueError("continued must be increasing indices of this batch's lines")
        return self


class LogBatch(_FromAgent):
    batches: Annotated[list[LogLines], Field(min_length=1, max_length=limits.STREAMS_PER_REQUEST)]

    @model_validator(mode="after")
    def _bounded(self) -> "LogBatch":
        if sum(len(b.lines) for b in self.batches) > limits.LINES_PER_REQUEST:
            raise ValueError(f"at most {limits.LINES_PER_REQUEST} lines per request")
        return self


class LogAck(_FromConsole):
    # pod_id → the next sequence number the console expects (everything below is stored).
    acks: dict[int, int] = {}
    # pod_id → why the console will never accept lines for it (not this node's pod, stale
    # attempt, unknown pod): the agent drops them instead of re-sending forever.
    rejected: dict[int, str] = {}
    # Additive (isolation): pod_id → why the console refused this request's lines of it
    # (a malformed item). The agent sends them again, and sets them aside (a marker line
    # takes their place) after limits.REFUSALS_BEFORE_SET_ASIDE refusals.
    refused: dict[int, str] = {}
