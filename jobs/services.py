"""Action functions: every user-initiated write to jobs goes through here (views stay thin)."""

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from console.triggers import request_scheduling
from jobs.lifecycle import TransitionConflict, record_decision, transition
from jobs.models import Job, Pod, PodDesired
from jobs.statuses import (
    ACTIVE_POD_STATUSES,
    FINAL_JOB_STATUSES,
    Actor,
    IdleResources,
    JobStatus,
    PodStatus,
)


class JobNotActive(Exception):
    """The job has already finished: it cannot be stopped or terminated."""


class JobStillActive(Exception):
    """The job is still active: only a finished job can be restarted."""


@dataclass
class JobSpec:
    """What a researcher asks for; validated by `jobs.forms.JobForm` before it gets here."""

    name: str
    image: str
    command: str
    workers: int = 1
    gpus_per_worker: int = 1
    cpus_per_worker: int = 4
    memory_gb_per_worker: int = 16
    priority: int = 1
    idle_resources: str = IdleResources.OFF
    env: dict[str, str] = field(default_factory=dict)
    max_runtime_seconds: int | None = None
    # Automatic Fault Tolerance (jobs.faulttolerance.policy.FtConfig.to_dict()).
    fault_tolerance: bool = False
    ft_config: dict = field(default_factory=dict)
    checkpoint_dir: str = ""


def create_job(*, user, workspace, quota, spec: JobSpec) -> Job:
    with transaction.atomic():
        job = Job.objects.create(
            workspace=workspace,
            quota=quota,
            owner=user,
            name=spec.name,
            image=spec.image,
            command=spec.command,
            env=spec.env,
            workers=spec.workers,
            gpus_per_worker=spec.gpus_per_worker,
            cpus_per_worker=spec.cpus_per_worker,
            memory_gb_per_worker=spec.memory_gb_per_worker,
            priority=spec.priority,
            idle_resources=spec.idle_resources,
            max_runtime_seconds=spec.max_runtime_seconds,
            fault_tolerance=spec.fault_tolerance,
            ft_config=spec.ft_config,
            checkpoint_dir=spec.checkpoint_dir,
            status=JobStatus.PENDING,
            status_reason="submitted; waiting for the scheduler",
        )
        job.events.create(
            to_status=JobStatus.PENDING, reason="submitted", actor=Actor.USER, user=user
        )
        request_scheduling()
    return job


def _stop_pods(job: Job, *, reason: str, stop_as: PodStatus, grace: int | None = None) -> int:
    """Order every live worker of the job to stop; the agent converges on it."""
    from django.conf import settings

    return Pod.objects.filter(job=job, status__in=list(ACTIVE_POD_STATUSES)).update(
        desired=PodDesired.STOP,
        stop_reason=reason,
        stop_as=stop_as,
        stop_grace_seconds=settings.DEFAULT_STOP_GRACE if grace is None else grace,
        stop_requested_at=timezone.now(),
    )


# How the workers of a job stopped for each reason end (SCENARIOS.md pod statuses).
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
                if status in (JobStatus.PENDING, JobStatus.INQUEUE):
                    transition(job, final_status, reason=reason, actor=actor, user=user)
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
                            _stop_pods(job, reason=reason, stop_as=pod_status, grace=0)
                        return job  # a stop is already under way
                    raise TransitionConflict(job.pk, status)
                _stop_pods(job, reason=reason, stop_as=pod_status, grace=grace)
                record_decision(job, f"stop requested: {reason}", actor=actor, user=user)
                job.refresh_from_db()
                return job
        except TransitionConflict:
            continue  # the scheduler or an agent moved it meanwhile: look again
    raise TransitionConflict(job.pk, job.status)


def restart_job(job: Job, *, user) -> Job:
    """Restarting a finished job creates a new job with the same parameters (DESIGN §4)."""
    if job.status not in FINAL_JOB_STATUSES:
        raise JobStillActive(f"the job is still {job.status}; stop it first")
    spec = JobSpec(
        name=job.name,
        image=job.image,
        command=job.command,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        cpus_per_worker=job.cpus_per_worker,
        memory_gb_per_worker=job.memory_gb_per_worker,
        priority=job.priority,
        idle_resources=job.idle_resources,
        env=dict(job.env),
        max_runtime_seconds=job.max_runtime_seconds,
    )
    with transaction.atomic():
        new_job = create_job(user=user, workspace=job.workspace, quota=job.quota, spec=spec)
        Job.objects.filter(pk=new_job.pk).update(
            cloned_from=job,
            fault_tolerance=job.fault_tolerance,
            ft_config=job.ft_config,
            checkpoint_dir=job.checkpoint_dir,
        )
        new_job.refresh_from_db()
        record_decision(job, f"restarted as job #{new_job.pk}", actor=Actor.USER, user=user)
    return new_job
