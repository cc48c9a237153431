"""Hang judgement (docs/fault-tolerance.md): progress, not activity. Pure; shared by the console's
monitor (jobs.job_monitor) and the simulator.

A job is hung when no new progress step arrived for the timeout. A job that never reports
progress falls back to its log: only a *new distinct* line counts (a warning repeated every
second is not progress). Idle GPUs are corroborating evidence shown in the reason, never the
judgement itself (a data loader stall and a deadlock both idle the GPU).
"""

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from protocol import words

# How many distinct recent lines a worker remembers: a loop printing up to this many
# different lines over and over is still recognised as repetition.
RECENT_LINES = 32
# Leading timestamps and clock times make every repeat look new; they are ignored.
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"
)


def line_key(line: str) -> str:
    """A short digest of a log line with timestamps removed and whitespace collapsed."""
    text = " ".join(_TIMESTAMP.sub("", line).split())
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def distinct_lines(recent: Sequence[str], lines: Iterable[str]) -> tuple[int, list[str]]:
    """How many of `lines` are new (not among the recent distinct lines nor blank), and the
    updated memory of recent line keys (newest last, at most RECENT_LINES)."""
    memory = list(recent)[-RECENT_LINES:]
    new = 0
    for line in lines:
        if not line.strip():
            continue
        key = line_key(line)
        if key in memory:
            continue
        new += 1
        memory.append(key)
        if len(memory) > RECENT_LINES:
            del memory[0]
    return new, memory


def deadline_after(activity_at: datetime, timeout_seconds: int) -> datetime:
    """The hang deadline once the job showed progress (or a new distinct line) at
    `activity_at`, by the console's clock."""
    return activity_at + timedelta(seconds=timeout_seconds)


@dataclass(frozen=True)
class HangInput:
    timeout_seconds: int
    running_since: datetime  # when the current attempt became Running
    last_progress_at: datetime | None = None  # last new progress step (any worker)
    last_new_line_at: datetime | None = None  # last new distinct log line (any worker)
    gpu_utilization: Sequence[int] = ()  # known utilization of the job's GPUs, percent
    gpu_utilization_unknown: int = 0  # how many of its GPUs have no known utilization


def last_activity(state: HangInput) -> datetime:
    """What the hang clock runs from: progress when the job reports it, else distinct log
    output, and never before the attempt started running."""
    if state.last_progress_at is not None:
        return max(state.last_progress_at, state.running_since)
    if state.last_new_line_at is not None:
        return max(state.last_new_line_at, state.running_since)
    return state.running_since


def is_hung(state: HangInput, now: datetime) -> bool:
    return now >= deadline_after(last_activity(state), state.timeout_seconds)


@dataclass(frozen=True)
class NodeHeard:
    """A node one of the job's live workers is on, as the console last heard it."""

    ready: bool
    last_heartbeat_at: datetime | None


def silence_is_the_nodes(deadline: datetime, nodes: Sequence[NodeHeard]) -> bool:
    """Whether the job's silence past `deadline` may be its node's, not its own: progress
    and log lines travel with the node's heartbeats and log batches, so a job is judged
    hung only once every node of its workers is Ready and was heard after the deadline
    (it reported, and the job had nothing new). A silent or NotReady node is the node
    monitor's: NotReady, then Lost, a restart of kind node_lost that spends no budget."""
    return any(
        not node.ready or node.last_heartbeat_at is None or node.last_heartbeat_at < deadline
        for node in nodes
    )


def hang_reason(state: HangInput, now: datetime) -> str:
    """For the user: what was missing for how long, and the GPU evidence when known."""
    quiet = int((now - last_activity(state)).total_seconds())
    what = (
        "no new progress step"
        if state.last_progress_at is not None
        else "no progress reports and no new distinct log line"
    )
    text = f"{what} for {quiet}s (hang timeout {state.timeout_seconds}s)"
    if state.gpu_utilization:
        if max(state.gpu_utilization) == 0:
            idle = len(state.gpu_utilization)
            verb = "is" if idle == 1 else "are"
            text += f"; its {words.gpus(idle)} {verb} idle (0% utilization)"
        else:
            text += f"; GPU utilization {max(state.gpu_utilization)}% at most"
    if state.gpu_utilization_unknown:  # MIG mode or unreadable: says nothing either way
        text += f"; utilization of {words.gpus(state.gpu_utilization_unknown)} unknown"
    return text
