"""Console side of progress, checkpoints and log activity reported by agents
(docs/fault-tolerance.md).

Called by `agents.actions` while it handles a heartbeat or a log batch, with pods already
loaded (job joined). Fencing: only a live worker of a placed job may speak, and only while it
is meant to run (or its job is being stopped as a whole, so a save on SIGTERM still counts);
a worker of an old attempt, a worker the console already ordered away for a restart, or one
on a node that came back after its workers were declared lost is ignored.

Writes: the pods' progress is one UPDATE by id for a heartbeat's workers, joined on a row
source (`store_progress_many`; the newest report wins); the hang deadline is `UPDATE job
SET hang_deadline=… WHERE id IN (…) AND status='Running' AND hang_deadline IS NOT NULL`
(only a running job with hang detection has one), one per distinct timeout; checkpoints
are inserted once per (job, path) (unique constraint, conflicts ignored); a checkpoint the
scan no longer finds gets `pruned_at` (UPDATE … WHERE pruned_at IS NULL; the row stays).
"""

from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.db.models import Q

from jobs.actions import bulk
from jobs.actions.results import store_facts, store_phase, store_units, store_validator
from jobs.models import Checkpoint, Job, Pod, PodDesired, ProgressSample
from policy.faulttolerance.hang import deadline_after, distinct_lines
from policy.faulttolerance.policy import config_of
from policy.statuses import ACTIVE_POD_STATUSES, JobStatus
from protocol import limits


def may_report(pod: Pod) -> bool:
    """Whether this worker's progress, checkpoints and log activity count for its job."""
    job = pod.job
    if pod.status not in ACTIVE_POD_STATUSES or pod.attempt > job.attempt:
        return False
    if job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return False
    return pod.desired == PodDesired.RUN or job.stop_requested_at is not None


def push_hang_deadlines(jobs: Iterable[Job], now: datetime) -> None:
    """Progress (or a new distinct log line) of these jobs at `now`: the hang deadline of
    those with hang detection moves on, one UPDATE per distinct timeout."""
    by_timeout: dict[int, set[int]] = {}
    for job in jobs:
        config = config_of(job)
        if config.hang_detection:
            by_timeout.setdefault(config.hang_timeout, set()).add(job.pk)
    for timeout, ids in by_timeout.items():
        running = Job.objects.filter(status=JobStatus.RUNNING, hang_deadline__isnull=False)
        running.filter(pk__in=sorted(ids)).update(hang_deadline=deadline_after(now, timeout))


def _new_step(pod: Pod, progress, now: datetime) -> tuple[bool, float | None]:
    """Whether this report is a new step to store (not the same step and phase again, and
    from a worker that may report), and the step rate to store with it. A new phase is
    stored on the job here."""
    if progress is None or not may_report(pod):
        return False, None
    same_phase = progress.phase == pod.progress_phase
    if pod.progress_step == progress.step and pod.progress_at is not None and same_phase:
        return False, None
    if not same_phase:
        store_phase(pod.job_id, progress.phase)
    rate = pod.progress_rate
    if pod.progress_step is not None and pod.progress_at is not None:
        # Measured on the worker's clock when both steps carry it: the console receives
        # steps at heartbeat times, and two heartbeats a moment apart (a stop, an exit)
        # would make one step look like a burst.
        if progress.at is not None and pod.progress_clock is not None:
            elapsed = progress.at - pod.progress_clock
        else:
            elapsed = (now - pod.progress_at).total_seconds()
        if progress.step > pod.progress_step and elapsed > 0:
            rate = (progress.step - pod.progress_step) / elapsed
    return True, rate


def store_progress(pod: Pod, progress, now: datetime) -> bool:
    """A new step moves the pod's progress and the job's hang deadline; the same step again
    (a heartbeat with nothing new) writes nothing. Returns whether anything was stored."""
    return bool(store_progress_many([(pod, progress)], now))


# The pods' progress UPDATE: each value of a row of its row source (jobs.actions.bulk), in
# order after the pod's id, with its SQL type and the Pod field it sets.
_PROGRESS_FIELDS = (
    ("rate", "double precision", "progress_rate"),
    ("clock", "double precision", "progress_clock"),
    ("step", "bigint", "progress_step"),
    ("total", "bigint", "progress_total"),
    ("phase", "text", "progress_phase"),
    ("metrics", "jsonb", "progress_metrics"),
)
_PROGRESS_RECORD = (("pod_id", "bigint"), *((name, kind) for name, kind, _ in _PROGRESS_FIELDS))


def store_progress_many(reported: Iterable[tuple[Pod, object]], now: datetime) -> list[int]:
    """`store_progress` for many workers at once (one heartbeat's): their new steps in one
    UPDATE joined on a row source, their samples in one INSERT, each job's hang deadline
    pushed once, whatever the number of workers (a 60-worker heartbeat wrote 120 rows one
    statement each: bench/percall.py). Run it in a transaction of its own: on an error the
    caller applies the reports one by one (docs/agent-protocol.md, "Batches of independent
    items"). Returns the ids of the pods whose progress was stored."""
    rows, samples, jobs, seen = [], [], {}, []
    for pod, progress in reported:
        new, rate = _new_step(pod, progress, now)
        if not new:
            continue
        metrics = dict(progress.metrics)
        rows.append(
            (pod.pk, rate, progress.at, progress.step, progress.total, progress.phase, metrics)
        )
        # The history behind the job page's charts: one row per new step reported.
        samples.append(
            ProgressSample(
                pod_id=pod.pk,
                at=now,
                step=progress.step,
                total=progress.total,
                rate=rate,
                metrics=metrics,
            )
        )
        seen.append((pod, progress, rate))
        jobs[pod.job_id] = pod.job
    if not rows:
        return []
    qn = connection.ops.quote_name
    table = qn(Pod._meta.db_table)
    sets = ", ".join(
        f"{qn(Pod._meta.get_field(field).column)} = v.{name}" for name, _, field in _PROGRESS_FIELDS
    )
    stamp = connection.ops.adapt_datetimefield_value(now)
    at, pk = (qn(Pod._meta.get_field(f).column) for f in ("progress_at", "id"))
    for source, params in bulk.row_sources(_PROGRESS_RECORD, rows):
        bulk.execute(
            f"UPDATE {table} SET {sets}, {at} = %s FROM {source} "  # noqa: S608
            f"WHERE {table}.{pk} = v.pod_id",
            [stamp, *params],
        )
    ProgressSample.objects.bulk_create(samples)
    push_hang_deadlines(jobs.values(), now)
    # The loaded pods as stored, once every write is done (a caller that rolls back and
    # applies the reports again one by one must not find them "already stored").
    for pod, progress, rate in seen:
        pod.progress_step, pod.progress_at, pod.progress_clock = progress.step, now, progress.at
        pod.progress_rate, pod.progress_phase = rate, progress.phase
    return [row[0] for row in rows]


def store_checkpoints(pod: Pod, checkpoints: Iterable, now: datetime) -> int:
    """Record committed checkpoints of the current attempt (once per path), and mark the
    job's checkpoints the scan no longer finds as pruned (`pruned_gone`)."""
    reports = list(checkpoints)
    if not reports or not may_report(pod):
        return 0
    paths = [c.path for c in reports]
    # The reported paths (to insert each once) and the job's live checkpoints (to see which
    # are gone): a few rows, as the SDK keeps only the newest CHECKPOINT_KEEP on disk.
    rows = list(
        Checkpoint.objects.filter(
            Q(path__in=paths) | Q(committed=True, pruned_at__isnull=True), job_id=pod.job_id
        ).values_list("id", "path", "step", "pruned_at")
    )
    known = {path: pruned_at for _, path, _, pruned_at in rows}
    mine = [c for c in reports if c.attempt is None or c.attempt == pod.attempt]
    new = [
        Checkpoint(
            job_id=pod.job_id,
            attempt=pod.attempt,
            step=c.step,
            path=c.path,
            size_bytes=c.size_bytes,
            checksum=c.checksum,
            committed=True,
        )
        for c in mine
        # Saved by another attempt (a stale worker still running after its restart, or an
        # older attempt's save found in the shared folder): not this attempt's checkpoint.
        if c.path not in known
    ]
    if new:
        # Recorded already for another job (a folder reused before submissions refused
        # that): that run's checkpoints, never this job's to list or resume from.
        foreign = set(
            Checkpoint.objects.filter(path__in=[c.path for c in new])
            .exclude(job_id=pod.job_id)
            .values_list("path", flat=True)
        )
        new = [c for c in new if c.path not in foreign]
    if new:
        Checkpoint.objects.bulk_create(new, ignore_conflicts=True)
    for c in mine:  # saved again where a pruned one was (rare): present once more
        if c.path in known and known[c.path] is not None:
            Checkpoint.objects.filter(job_id=pod.job_id, path=c.path).update(
                attempt=pod.attempt,
                step=c.step,
                size_bytes=c.size_bytes,
                checksum=c.checksum,
                pruned_at=None,
            )
    gone = pruned_gone(reports, [(i, p, step) for i, p, step, at in rows if at is None])
    if gone:
        Checkpoint.objects.filter(pk__in=gone, pruned_at__isnull=True).update(pruned_at=now)
    return len(new)


def pruned_gone(reports: list, live: list[tuple[int, str, int]]) -> list[int]:
    """Ids of live checkpoint rows (id, path, step) that a worker's scan shows are gone. Pure.

    The agent reports the committed checkpoints in the job's folder, newest first, at most
    limits.CHECKPOINTS_REPORTED: fewer means the list is complete; a full list still names every
    checkpoint newer than its oldest entry. Only rows older than the newest one reported
    count: the SDK prunes the oldest, and a newer row this worker cannot see (saved on
    another node's disk) proves nothing."""
    if not reports:
        return []
    present = {c.path for c in reports}
    newest = max(c.step for c in reports)
    floor = min(c.step for c in reports) if len(reports) >= limits.CHECKPOINTS_REPORTED else None
    return [
        row_id
        for row_id, path, step in live
        if path not in present and step < newest and (floor is None or step > floor)
    ]


def store_new_units(pod: Pod, units: Iterable, now: datetime) -> int:
    """Accepted units of a worker, each stored once (jobs.actions.results.store_units); a
    newly accepted unit is progress for the hang judge (docs/results.md), from an agent's
    report or the Kubernetes controller's promotion alike. Returns how many were new."""
    new = store_units(pod, units, now)
    if new:
        push_hang_deadlines([pod.job], now)
    return new


def store_worker_extras(pods: dict[int, Pod], reports: Iterable, now: datetime) -> None:
    """Progress and checkpoints of one heartbeat, before its exits are applied (so a
    checkpoint saved on SIGTERM is known before the job restarts from it)."""
    for report in reports:
        pod = pods.get(report.pod_id)
        if pod is None or pod.attempt != report.attempt:
            continue
        if report.checkpoints:
            store_checkpoints(pod, report.checkpoints, now)
        if report.progress is not None:
            store_progress(pod, report.progress, now)
        if report.facts is not None and may_report(pod):
            store_facts(pod, report.facts)
        if report.units and may_report(pod):
            store_new_units(pod, report.units, now)
        # Rank 0's validator outcome arrives with its exit, before the exit is judged.
        if report.validator is not None and may_report(pod):
            store_validator(pod, report.validator, now)


def log_activity(pod: Pod, lines: Iterable[str]) -> tuple[dict, bool]:
    """Without progress reports a job's hang clock moves on new distinct log lines only (a
    repeated identical warning is not progress). Returns the pod fields to write with the
    log sequence (the updated memory of recent distinct lines) and whether the lines were
    new, i.e. whether to call `log_progress` once they are stored."""
    if pod.progress_at is not None or not may_report(pod):
        return {}, False
    new, memory = distinct_lines(pod.recent_line_hashes or [], lines)
    fields = {"recent_line_hashes": memory} if memory != (pod.recent_line_hashes or []) else {}
    return fields, bool(new)


def log_progress(pod: Pod, now: datetime) -> None:
    """New distinct log lines of a job without progress reports push its hang deadline."""
    push_hang_deadlines([pod.job], now)


def worker_ft_fields(pod: Pod) -> dict:
    """What a worker spec carries for fault tolerance beyond the job's own fields (its
    checkpoint folder among them, policy.jobspec): where to resume from."""
    return {"resume_from": pod.job.resume_from}


# -- the hang monitor's claims (jobs.job_monitor) -----------------------------------------


def claim_hung_job(job_id: int, seen: datetime) -> bool:
    """Take a job whose hang deadline `seen` passed: clears the deadline it saw, so of two
    monitors only the one whose UPDATE matched acts; False if it progressed meanwhile."""
    return bool(
        Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, hang_deadline=seen).update(
            hang_deadline=None
        )
    )


def clear_stale_hang_deadlines(now: datetime) -> int:
    """Deadlines left on jobs that no longer run (finished, restarting) mean nothing."""
    return (
        Job.objects.filter(hang_deadline__lt=now)
        .exclude(status=JobStatus.RUNNING)
        .update(hang_deadline=None)
    )


def postpone_hang_check(job_id: int, seen: datetime, until: datetime) -> None:
    """Acting on a hang raised: look again later, so one bad row cannot crash-loop the
    monitor."""
    Job.objects.filter(pk=job_id, hang_deadline=seen).update(hang_deadline=until)
