"""Submitting jobs: a new job, and a finished job submitted again as a new job (DESIGN §4).

Validation happens before (jobs.forms.JobForm, shared by the page and the API); these only
write, in one transaction, and ask for a scheduling cycle once it commits."""

from dataclasses import dataclass, field

from django.db import transaction

from jobs.actions.transitions import record_decision
from jobs.models import Job
from jobs.statuses import (
    FINAL_JOB_STATUSES,
    Actor,
    IdleResources,
    JobStatus,
)
from jobs.triggers import request_scheduling


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


def effective_checkpoint_dir(job: Job) -> str:
    """The job's checkpoint folder within its workspace's area (what the agent uses)."""
    return job.checkpoint_dir or f"job-{job.pk}"


def resubmit_job(job: Job, *, user) -> Job:
    """ "Restart" of a finished job: a new job with the same parameters (DESIGN §4). (A new
    attempt of the same job, by fault tolerance, is `actions.restarts.start_new_attempt`.)"""
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
            # The same folder of the same workspace's area: the restart can resume from the
            # original's checkpoints (its default folder is job-<original id>).
            checkpoint_dir=effective_checkpoint_dir(job),
        )
        new_job.refresh_from_db()
        record_decision(job, f"restarted as job #{new_job.pk}", actor=Actor.USER, user=user)
    return new_job
