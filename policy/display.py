"""What a user sees of a job, derived from stored state (pure: no queries, no clock).

`Job.status` stores only the nine lifecycle statuses (docs/statuses.md); "Stopping…" and
"Unknown (node not reachable)" are derived here, like healthchecks derives "grace" from
timestamps. Log text is hostile input (docs/traps.md): `clean_log_line` strips terminal control
sequences for display; HTML escaping is left to template autoescape.
"""

import re
from collections.abc import Iterable
from datetime import datetime, timedelta

from policy.statuses import ACTIVE_JOB_STATUSES, JobStatus, PodStatus

STOPPING = "Stopping…"
UNKNOWN = "Unknown (node not reachable)"

_BADGES = {
    JobStatus.PENDING: "badge-pending",
    JobStatus.INQUEUE: "badge-inqueue",
    JobStatus.STARTING: "badge-starting",
    JobStatus.RUNNING: "badge-running",
    JobStatus.COMPLETED: "badge-completed",
    JobStatus.FAILED: "badge-failed",
    JobStatus.STOPPED: "badge-stopped",
    JobStatus.PREEMPTED: "badge-preempted",
    JobStatus.TERMINATED: "badge-terminated",
    PodStatus.SUCCEEDED: "badge-completed",
    PodStatus.PREEMPTED: "badge-preempted",
    PodStatus.UNKNOWN: "badge-unknown",
    PodStatus.LOST: "badge-failed",
    STOPPING: "badge-stopping",
    UNKNOWN: "badge-unknown",
}


def display_status(
    status: str, *, stop_requested_at: datetime | None = None, has_unknown_worker: bool = False
) -> str:
    """The status label shown to users.

    A graceful stop keeps the stored status until every worker has exited, so it is shown as
    "Stopping…". A worker on a node that stopped answering is not known to be dead
    (docs/fault-tolerance.md), so the job is shown as unknown rather than as running.
    """
    placed = status in (JobStatus.STARTING, JobStatus.RUNNING)
    if placed and stop_requested_at is not None:
        return STOPPING
    if placed and has_unknown_worker:
        return UNKNOWN
    return str(status)


def display_reason(
    status: str, reason: str, *, stop_requested_at: datetime | None = None, stop_reason: str = ""
) -> str:
    """The reason shown with the status. While a graceful stop is under way the stored
    reason still describes how the job got where it is ("all workers running"), which the
    "Stopping…" label contradicts; the stop's own reason is what is happening now."""
    if status in (JobStatus.STARTING, JobStatus.RUNNING) and stop_requested_at is not None:
        return f"stopping: {stop_reason}" if stop_reason else "stopping"
    return reason


def badge_class(label: str) -> str:
    """CSS class for a job or worker status label (stored or derived)."""
    return _BADGES.get(label, "badge-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-"))


def is_live(status: str) -> bool:
    """Whether a page showing this job should keep polling for changes (a stop in progress
    keeps the job active until its workers have exited)."""
    return status in ACTIVE_JOB_STATUSES


def duration(
    started_at: datetime | None, finished_at: datetime | None, now: datetime
) -> timedelta | None:
    """How long the job has run: until it finished, or until `now` while it runs."""
    if started_at is None:
        return None
    end = finished_at or now
    return max(end - started_at, timedelta(0))


def running_time(
    spans: Iterable[tuple[datetime | None, datetime | None]], until: datetime
) -> timedelta | None:
    """How long the job ran: the union of its workers' running spans (start, end; no end
    while running, counted to `until`: its end or now). Time spent waiting between attempts
    (a fault-tolerance restart queued, a crash-loop backoff, a preempted job waiting) is
    not running time. None when no worker has run yet."""
    ordered = sorted((start, min(end or until, until)) for start, end in spans if start)
    if not ordered:
        return None
    total = timedelta(0)
    first, last = ordered[0]
    for start, end in ordered[1:]:
        if start > last:
            total += max(last - first, timedelta(0))
            first, last = start, end
        else:
            last = max(last, end)
    return total + max(last - first, timedelta(0))


def format_duration(value: timedelta | None) -> str:
    """Compact human duration: "45s", "3m 05s", "2h 07m", "3d 4h"."""
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


# ECMA-48 control sequences: CSI (ESC [ … final), OSC (ESC ] … BEL or ESC \), other
# string controls (DCS, SOS, PM, APC up to ST), two-byte escapes, and 8-bit CSI.
_ANSI = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]            # CSI
    | \x9b[0-?]*[ -/]*[@-~]            # 8-bit CSI
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?  # OSC, terminated by BEL or ST (or cut off)
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?    # DCS, SOS, PM, APC
    | \x1b[ -/]*[0-~]                  # other escapes (charset selection, ESC c, …)
    | \x1b                             # a lone ESC
    """,
    re.VERBOSE,
)
# C0 controls except tab, plus DEL and the C1 range: never meaningful in an HTML page.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_log_line(text: str) -> str:
    """A log line as a terminal would show it, without control sequences.

    A carriage return rewinds the line (progress bars), so only what follows the last one
    is visible; every other control character is dropped. The raw text stays stored.
    """
    text = _ANSI.sub("", text)
    text = text.rstrip("\r")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1]
    return _CONTROL.sub("", text)
