"""Reading a worker's stored log lines for display and the API.

Sequence numbers are per pod (one worker of one attempt, docs/agent-protocol.md), so a reader
follows one worker at a time with `after=<last seq seen>`. `LogChunk` rows hold consecutive lines
[seq_start, seq_end] and never overlap (unique per pod and start), which lets a read touch only the
chunk that contains `after + 1` and the ones after it, both by index range.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from cluster.models import NodeState
from jobs.models import Job, LogChunk, Pod
from policy.display import clean_log_line
from policy.statuses import FINAL_JOB_STATUSES, FINAL_POD_STATUSES

MAX_LIMIT = 5000
DEFAULT_LIMIT = 1000
TAIL_LINES = 500


@dataclass(frozen=True)
class LogLine:
    seq: int
    rank: int
    attempt: int
    text: str  # raw, as stored
    at: datetime | None = None  # when the console received it (its chunk's time)
    # The same time as the job page shows it (ISO 8601 and HH:MM:SS, in the current time
    # zone): formatted once per chunk, not twice per line by the template's date filter.
    at_iso: str = ""
    clock: str = ""

    @property
    def display(self) -> str:
        return clean_log_line(self.text)


def chunk_lines(seq_start: int, seq_end: int, text: str) -> list[tuple[int, str]]:
    """Number the lines of one chunk (pure). A trailing newline does not start a new line."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return [(seq_start + i, line) for i, line in enumerate(lines[: seq_end - seq_start + 1])]


def _times(at: datetime | None) -> tuple[str, str]:
    if at is None:
        return "", ""
    local = timezone.localtime(at)
    return local.isoformat(), local.strftime("%H:%M:%S")


def _lines(pod: Pod, chunks) -> list[LogLine]:
    lines: list[LogLine] = []
    for chunk in chunks:
        at_iso, clock = _times(chunk.created_at)
        lines.extend(
            LogLine(
                seq=seq,
                rank=pod.rank,
                attempt=pod.attempt,
                text=line,
                at=chunk.created_at,
                at_iso=at_iso,
                clock=clock,
            )
            for seq, line in chunk_lines(chunk.seq_start, chunk.seq_end, chunk.text)
        )
    return lines


def raw_text(pod: Pod) -> Iterator[str]:
    """The worker's output as it wrote it: every stored line with its newline, except that
    a line the agent cut at its length limit is joined to the next again."""
    chunks = (
        LogChunk.objects.filter(pod=pod)
        .order_by("seq_start")
        .values_list("seq_start", "seq_end", "text", "joins")
    )
    for seq_start, seq_end, text, joins in chunks.iterator(500):
        if not joins:
            yield text if text.endswith("\n") else text + "\n"
            continue
        cut = set(joins)
        yield "".join(
            line if seq in cut else line + "\n"
            for seq, line in chunk_lines(seq_start, seq_end, text)
        )


def read_after(pod: Pod, after: int, limit: int = DEFAULT_LIMIT) -> list[LogLine]:
    """Up to `limit` lines of `pod` with seq > after, in order (two indexed queries)."""
    limit = max(1, min(limit, MAX_LIMIT))
    chunks = LogChunk.objects.filter(pod=pod).only("seq_start", "seq_end", "text", "created_at")
    # The chunk that straddles `after`, if any: the last one starting at or before it.
    head = list(chunks.filter(seq_start__lte=after, seq_end__gt=after).order_by("-seq_start")[:1])
    # Every chunk holds at least one line, so `limit` chunks are enough for `limit` lines.
    rest = list(chunks.filter(seq_start__gt=after).order_by("seq_start")[:limit])
    lines = [line for line in _lines(pod, head + rest) if line.seq > after]
    return lines[:limit]


def read_tail(pod: Pod, count: int = TAIL_LINES) -> list[LogLine]:
    """The last `count` lines of `pod`."""
    # Ranges first (no text): load only as many chunks as the last `count` lines need.
    needed, ids = 0, []
    for pk, start, end in (
        LogChunk.objects.filter(pod=pod)
        .order_by("-seq_start")
        .values_list("pk", "seq_start", "seq_end")[:count]
    ):
        ids.append(pk)
        needed += end - start + 1
        if needed >= count:
            break
    chunks = LogChunk.objects.filter(pk__in=ids).only("seq_start", "seq_end", "text", "created_at")
    return _lines(pod, chunks.order_by("seq_start"))[-count:]


def pick_pod(job: Job, *, rank: int | None, attempt: int | None) -> Pod | None:
    """The worker whose log to show: the given rank (default 0) and attempt, by default
    that worker's newest attempt (after an Asynchronous restart only the restarted worker
    has the job's newest attempt; the others go on in their own)."""
    pods = Pod.objects.filter(job=job, rank=rank or 0)
    if attempt is None:
        return pods.order_by("-attempt").first()
    return pods.filter(attempt=attempt).first()


def missing_worker(
    *,
    rank: int,
    attempt: int | None,
    found: bool,
    workers: int,
    job_attempt: int,
    final: bool,
    named: bool = True,
) -> str:
    """Why the log asked for is of a worker that does not exist and never will (pure), or ""
    when it exists or may still (a waiting job's workers are not placed yet). A job's log
    asked for without naming a worker (`named` False: rank 0 by default) of a job that ended
    before placing any is an empty log, not a missing one: `logs JOB` of a job stopped in
    its queue prints nothing and ends."""
    if found:
        return ""
    if rank >= workers:
        return f"The job has {workers} worker{'s' if workers != 1 else ''}: no rank {rank}."
    if attempt is not None and attempt > job_attempt:
        return f"The job's newest attempt is {job_attempt}: no attempt {attempt}."
    if attempt is not None and attempt < job_attempt:
        return f"Worker {rank} did not run in attempt {attempt}."
    if final and named:
        return f"Worker {rank} never ran: the job ended before it was placed."
    return ""


def missing_pod(job: Job, pod: Pod | None, *, rank: int | None, attempt: int | None) -> str:
    """`missing_worker` for `pick_pod`'s answer."""
    return missing_worker(
        rank=rank or 0,
        attempt=attempt,
        found=pod is not None,
        workers=job.workers,
        job_attempt=job.attempt,
        final=job.status in FINAL_JOB_STATUSES,
        named=rank is not None or attempt is not None,
    )


def end_wait_seconds() -> int:
    """How long after a worker ended the console waits for its agent's end of stream
    before it calls the log complete with a gap: only an agent that never sends one (an
    older agent, or a worker ended without its agent) waits this long; a node that stopped
    answering is Lost by then (NODE_LOST_TIMEOUT) and its workers' logs end with a gap."""
    return int(settings.NODE_LOST_TIMEOUT)


NODE_LOST_GAP = "the worker's node was lost: lines it had not shipped are missing"
NO_END_GAP = "the agent never said this worker's log ended: late lines may be missing"


@dataclass(frozen=True)
class Follow:
    """What a follower of one worker's log does next (the job page's viewer and the API)."""

    complete: bool  # stop: nothing more will come, in this attempt or a later one
    newer_attempt: int | None  # move on to this attempt (after=-1): this one is all read
    gap: str = ""  # why the log may lack lines at its end, when it does


def follow(job: Job, pod: Pod | None, *, caught_up: bool, now: datetime) -> Follow:
    """The one rule for following a worker across restarts (docs/agent-protocol.md: seqs are per
    pod).

    `complete` only on the worker's last attempt: a job that failed, restarted and finished
    before the reader came back still has the newer attempt's lines. `newer_attempt` only
    once this worker's log has ended; until then the follower stays where it is. A log has
    ended when its agent said so (end of stream, or an exit reported with every line
    delivered), or its node was lost (a gap, said in `gap`): never on a timer alone.
    """
    if pod is None and job.status in FINAL_JOB_STATUSES:
        return Follow(complete=True, newer_attempt=None)  # it ended before any worker ran
    later = None
    # Only an ended worker can have a later attempt (the database keeps one live copy of a
    # rank): a running one costs no query.
    if pod is not None and pod.status in FINAL_POD_STATUSES:
        later = (
            Pod.objects.filter(job=job, rank=pod.rank, attempt__gt=pod.attempt)
            .order_by("attempt")
            .values_list("attempt", flat=True)
            .first()
        )
    ended, gap = log_end(pod, now) if pod is not None else (False, "")
    complete = later is None and logs_complete(
        job_final=job.status in FINAL_JOB_STATUSES, caught_up=caught_up, ended=ended
    )
    return Follow(
        complete=complete, newer_attempt=later if ended else None, gap=gap if ended else ""
    )


def log_end(pod: Pod, now: datetime) -> tuple[bool, str]:
    """Whether this worker's log has ended, and the gap it may have (see `follow`)."""
    if pod.status not in FINAL_POD_STATUSES:
        return False, ""
    if pod.logs_delivered:
        return True, ""  # the agent acknowledged the end of its stream
    if pod.started_at is None and pod.log_next_seq == 0:
        return True, ""  # never ran, never wrote: nothing is on its way
    if pod.node_id is None or pod.node.state == NodeState.LOST:
        return True, NODE_LOST_GAP
    if pod.finished_at is not None and now - pod.finished_at >= timedelta(
        seconds=end_wait_seconds()
    ):
        return True, NO_END_GAP
    return False, ""


def logs_complete(*, job_final: bool, caught_up: bool, ended: bool) -> bool:
    """Whether a follower of this job's logs can stop polling (pure): the job is final, the
    reader has everything stored, and the worker's log has ended (`log_end`)."""
    return job_final and caught_up and ended
