"""Storing workers' log lines: each sequence number exactly once (docs/domain.md,
docs/agent-protocol.md).

`UPDATE pod SET log_next_seq=<end> WHERE id=… AND log_next_seq=<current>` claims the range
and the LogChunk insert goes with it, in one transaction, backed by the unique
(pod, seq_start) constraint: of two requests carrying the same lines, one stores them and
the other acknowledges what the row says.

Several pods' lines (one request's) are stored together by `append_many`: the same
compare-and-set for every pod in one UPDATE joined on a row source (`jobs.actions.bulk`),
their chunks in one INSERT. All or nothing: where any pod's sequence moved meanwhile, the
caller stores them one by one as above, which settles each alone.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

from jobs.actions import bulk
from jobs.actions.progress import log_activity, log_progress, push_hang_deadlines
from jobs.models import LogChunk, Pod


def note_log_end(pod: Pod, end: int) -> bool:
    """The agent said the worker's log ends before sequence `end` (`LogLines.end`): once
    the console holds every line up to it, the log is complete (`logs_delivered`; a
    follower stops: jobs.logview.follow). Returns whether it was noted."""
    if pod.logs_delivered:
        return True
    noted = bool(Pod.objects.filter(pk=pod.pk, log_next_seq__gte=end).update(logs_delivered=True))
    pod.logs_delivered = pod.logs_delivered or noted
    return noted


def append_log_lines(
    pod: Pod, current: int, lines: Sequence[str], now: datetime, *, joins: Sequence[int] = ()
) -> int:
    """Store `lines` as sequence numbers current, current+1, … of `pod` (whose job is
    loaded); `joins` are the sequence numbers of lines that continue on the next one (cut
    at the agent's line limit). Returns the next sequence number the console expects."""
    end = current + len(lines)
    # Hang detection without progress reports: remember recent distinct lines.
    activity, distinct = log_activity(pod, lines)
    with transaction.atomic():
        claimed = Pod.objects.filter(pk=pod.pk, log_next_seq=current).update(
            log_next_seq=end, **activity
        )
        if claimed:
            _chunk(pod, current, lines, joins).save(force_insert=True)
    if not claimed:  # a concurrent request stored these first: ack what the row says now
        return Pod.objects.values_list("log_next_seq", flat=True).get(pk=pod.pk)
    pod.log_next_seq = end
    pod.recent_line_hashes = activity.get("recent_line_hashes", pod.recent_line_hashes)
    if distinct:
        log_progress(pod, now)
    return end


@dataclass(frozen=True, slots=True)
class LogAppend:
    """One pod's new lines for `append_many`: sequence numbers `current`, current+1, …;
    `ends`: the agent said the log ends with them (`LogLines.end`)."""

    pod: Pod
    current: int
    lines: Sequence[str]
    joins: Sequence[int] = field(default=())
    ends: bool = False


class SequenceMoved(Exception):
    """A pod's log sequence was not where the batch expected it (a concurrent request
    stored lines first): nothing of the batch is kept."""


_RECORD = (
    ("pod_id", "bigint"),
    ("current_seq", "bigint"),
    ("next_seq", "bigint"),
    ("hashes", "jsonb"),
    ("delivered", "boolean"),
)


def append_many(appends: Sequence[LogAppend], now: datetime) -> None:
    """`append_log_lines` for several pods at once (each pod once, each with new lines),
    whatever their number: the compare-and-set of every pod's sequence in one UPDATE (with
    the memory of recent lines, and the log's end where the agent said it), the chunks in
    one INSERT, the hang deadlines of the jobs with new distinct lines in one UPDATE per
    timeout (`push_hang_deadlines`).
    Run it in a transaction of its own: raises SequenceMoved when any pod's sequence
    moved, and then the caller stores them one by one."""
    # By pod id: two requests naming the same pods lock their rows in the same order.
    appends = sorted(appends, key=lambda item: item.pod.pk)
    rows, chunks, active = [], [], []
    for item in appends:
        pod, current = item.pod, item.current
        end = current + len(item.lines)
        activity, distinct = log_activity(pod, item.lines)
        hashes = activity.get("recent_line_hashes", pod.recent_line_hashes or [])
        rows.append((pod.pk, current, end, hashes, item.ends))
        chunks.append(_chunk(pod, current, item.lines, item.joins))
        if distinct:
            active.append(pod)
    qn = connection.ops.quote_name
    table = qn(Pod._meta.db_table)
    pk, seq, memory, delivered = (
        qn(Pod._meta.get_field(f).column)
        for f in ("id", "log_next_seq", "recent_line_hashes", "logs_delivered")
    )
    claimed = 0
    for source, params in bulk.row_sources(_RECORD, rows):
        claimed += bulk.execute(
            f"UPDATE {table} SET {seq} = v.next_seq, {memory} = v.hashes, "  # noqa: S608
            f"{delivered} = ({delivered} OR v.delivered) FROM {source} "
            f"WHERE {table}.{pk} = v.pod_id AND {table}.{seq} = v.current_seq",
            params,
        )
    if claimed != len(rows):
        raise SequenceMoved(f"{len(rows) - claimed} of {len(rows)} pods' sequences moved")
    LogChunk.objects.bulk_create(chunks)
    push_hang_deadlines([pod.job for pod in active], now)
    # The loaded pods as stored, once every write is done (a caller that rolls back and
    # stores them one by one must not find them stored).
    for (_, _, end, hashes, ends), item in zip(rows, appends, strict=True):
        item.pod.log_next_seq, item.pod.recent_line_hashes = end, hashes
        item.pod.logs_delivered = item.pod.logs_delivered or ends


def _chunk(pod: Pod, current: int, lines: Sequence[str], joins: Sequence[int]) -> LogChunk:
    end = current + len(lines)
    return LogChunk(
        pod_id=pod.pk,
        attempt=pod.attempt,
        seq_start=current,
        seq_end=end - 1,
        text="".join(f"{line}\n" for line in lines),
        joins=sorted({seq for seq in joins if current <= seq < end}),
    )
