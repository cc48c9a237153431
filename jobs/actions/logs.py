"""Storing workers' log lines: each sequence number exactly once (docs/domain.md,
docs/agent-protocol.md).

`UPDATE pod SET log_next_seq=<end> WHERE id=… AND log_next_seq=<current>` claims the range
and the LogChunk insert goes with it, in one transaction, backed by the unique
(pod, seq_start) constraint: of two requests carrying the same lines, one stores them and
the other acknowledges what the row says.
"""

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from jobs.actions.progress import log_activity, log_progress
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
            LogChunk.objects.create(
                pod_id=pod.pk,
                attempt=pod.attempt,
                seq_start=current,
                seq_end=end - 1,
                text="".join(f"{line}\n" for line in lines),
                joins=sorted({seq for seq in joins if current <= seq < end}),
            )
    if not claimed:  # a concurrent request stored these first: ack what the row says now
        return Pod.objects.values_list("log_next_seq", flat=True).get(pk=pod.pk)
    pod.log_next_seq = end
    pod.recent_line_hashes = activity.get("recent_line_hashes", pod.recent_line_hashes)
    if distinct:
        log_progress(pod, now)
    return end
