"""Stopping jobs: graceful stop (Stopped), terminate (Terminated, no grace) and preemption
(Preempted), docs/statuses.md. A placed job keeps its status, shown "Stopping…", until every worker
has exited; `actions.workers.reconcile_job` then ends it with the final status asked for.

Concurrency: the stop request is a compare-and-set on the job's status and on
`stop_requested_at IS NULL`; a race lost to the scheduler or an agent is retried on the
status it lost to (a few times at most).
"""

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs import triggers
from jobs.actions.transitions import TransitionConflict, record_decision, transition
from jobs.hooks import Notice, announce_one
from jobs.models import Job, Pod, PodDesired
from policy.statuses import (
    ACTIVE_POD_STATUSES,
    FINAL_JOB_STATUSES,
    WAITING_JOB_STATUSES,
    Actor,
    JobStatus,
    PodStatus,
)
from protocol import limits
from protocol.text import fit


class JobNotActive(Exception):
    """The job has already finished: it cannot be stopped or terminated."""


def stop_pods(
    job: Job | int,
    *,
    reason: str,
    stop_as: PodStatus,
    grace: int | None = None,
    now: datetime | None = None,
) -> int:
    """Order every live worker of the job to stop (SIGTERM, then the grace, then SIGKILL);
    the agent converges on it. `stop_as` is how each ends once it has exited."""
    job_id = job if isinstance(job, int) else job.pk
    ordered = Pod.objects.filter(job_id=job_id, status__in=list(ACTIVE_POD_STATUSES)).update(
        desired=PodDesired.STOP,
        stop_reason=fit(reason, limits.REASON),
        stop_as=stop_as,
        stop_grace_seconds=settings.DEFAULT_STOP_GRACE if grace is None else grace,
        stop_requested_at=now or timezone.now(),
    )
    if ordered:
        triggers.wake_agents()  # their agents hear it now, not at the next poll
    return ordered


# How the workers of a job stopped for each reason end (docs/simulator.md pod statuses).
_POD_STATUS_FOR_STOP = {
    JobStatus.STOPPED: PodStatus.STOPPED,
    JobStatus.TERMINATED: PodStatus.TERMINATED,
    JobStatus.PREEMPTED: PodStatus.PREEMPTED,
}


def request_stop(
    job: Job,
    *,
    user=None,
    actor: Actor = Actor.USER,
    reason: str | None = None,
    final_status: JobStatus = JobStatus.STOPPED,
    grace: int | None = None,
) -> Job:
    """Stop gracefully (Stopped), at once (Terminated, grace 0), or for preemption
    (Preempted: the scheduler reclaims the GPUs; workers get SIGTERM and the grace).

    A job without workers (Pending, Inqueue) ends at once. A placed job keeps its status,
    shown as "Stopping…", until every worker has exited; then the pod reconciler ends it with
    `final_status`. Races with the scheduler are retried on the status they lost to.
    """
    who = f"by {user.get_username()}" if user else f"by the {actor}"
    reason = reason or f"{final_status.lower()} {who}"
    pod_status = _POD_STATUS_FOR_STOP[final_status]
    if final_status == JobStatus.TERMINATED:
        grace = 0
    for _ in range(5):
        job.refresh_from_db()
        status = JobStatus(job.status)
        if status in FINAL_JOB_STATUSES:
            raise JobNotActive(f"the job is already {status}")
        try:
            with transaction.atomic():
                if status in WAITING_JOB_STATUSES:
                    transition(job, final_status, reason=reason, actor=actor, user=user)
                    _announce(job, final_status, reason, actor, user)
                    return job
                now = timezone.now()
                claimed = Job.objects.filter(
                    pk=job.pk, status=status, stop_requested_at__isnull=True
                ).update(
                    stop_requested_at=now,
                    stop_reason=reason,
                    stop_final_status=final_status,
                    updated_at=now,
                )
                if not claimed:
                    job.refresh_from_db()
                    if job.stop_requested_at and job.status == status:
                        if final_status == JobStatus.TERMINATED:
                            # Escalate a graceful stop in progress to an immediate kill.
                            Job.objects.filter(pk=job.pk).update(stop_final_status=final_status)
                            stop_pods(job, reason=reason, stop_as=pod_status, grace=0)
                            _announce(job, final_status, reason, actor, user)
                        return job  # a stop is already under way
                    raise TransitionConflict(job.pk, status)
                stop_pods(job, reason=reason, stop_as=pod_status, grace=grace)
                record_decision(job, f"stop requested: {reason}", actor=actor, user=user)
                _announce(job, final_status, reason, actor, user)
                job.refresh_from_db()
                return job
        except TransitionConflict:
            continue  # the scheduler or an agent moved it meanwhile: look again
    raise TransitionConflict(job.pk, job.status)


SHUTDOWN_REASON = "the console was shut down"


def stop_for_shutdown(node_id: int, *, reason: str = SHUTDOWN_REASON) -> list[int]:
    """The embedded console is stopping and its local node goes with it: every job with
    live workers there is stopped gracefully (SIGTERM, then the grace a user's stop gives).
    A job without Automatic Fault Tolerance ends Stopped with `reason`, not Failed; one with
    it is preempted and so resumes from its last checkpoint as a new attempt when the
    console starts again (preemptions never use the failure budget). Returns the job ids."""
    from policy.faulttolerance.policy import config_of

    jobs = Job.objects.filter(
        status__in=[JobStatus.STARTING, JobStatus.RUNNING],
        pods__node_id=node_id,
        pods__status__in=list(ACTIVE_POD_STATUSES),
    ).distinct()
    stopped = []
    for job in jobs:
        resumes = config_of(job).enabled
        try:
            request_stop(
                job,
                actor=Actor.SYSTEM,
                reason=(
                    f"{reason}; resumes from its last checkpoint when it starts again"
                    if resumes
                    else reason
                ),
                final_status=JobStatus.PREEMPTED if resumes else JobStatus.STOPPED,
            )
        except (JobNotActive, TransitionConflict):
            continue  # it ended meanwhile
        stopped.append(job.pk)
    return stopped


def live_workers_on(node_id: int) -> int:
    """Workers on the node that have not reported their end yet."""
    return Pod.objects.filter(node_id=node_id, status__in=list(ACTIVE_POD_STATUSES)).count()


def _announce(job: Job, final_status: JobStatus, reason: str, actor: Actor, user) -> None:
    announce_one(
        Notice.STOP_REQUESTED,
        job,
        timezone.now(),
        reason=reason,
        actor=actor,
        user=user,
        detail={"final_status": str(final_status)},
    )
