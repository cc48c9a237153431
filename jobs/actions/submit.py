"""Submitting jobs: a new job, and a finished job submitted again as a new job (docs/statuses.md).

Validation happens before (jobs.admission, shared by the page and the API); these only
write, in one transaction, and ask for a scheduling cycle once it commits."""

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from django.db import transaction

from jobs.actions.insert import insert_row
from jobs.actions.results import carry_units, record_runs, resume_refusal
from jobs.actions.transitions import record_decision
from jobs.folders import claim_folders, output_dir_of
from jobs.hooks import JobNotice, Notice, announce, announce_one
from jobs.models import Checkpoint, Job, JobEvent
from jobs.triggers import request_scheduling
from policy.jobspec import JobSpec
from policy.results import check_inputs
from policy.statuses import FINAL_JOB_STATUSES, Actor, JobStatus


class JobStillActive(Exception):
    """The job is still active: only a finished job can be restarted."""


SUBMITTED_REASON = "submitted; waiting for the scheduler"


def _new_job(user, workspace, quota, spec: JobSpec) -> Job:
    return Job(
        workspace=workspace,
        quota=quota,
        owner=user,
        **spec.columns(),
        status=JobStatus.PENDING,
        status_reason=SUBMITTED_REASON,
    )


def create_job(*, user, workspace, quota, spec: JobSpec, claim_folder: bool = True) -> Job:
    """A new validated job. Its folder is judged again inside the transaction
    (jobs.folders.claim_folders: FolderRaced), except for a Restart's, which keeps the
    original's (`claim_folder=False`)."""
    with transaction.atomic():
        if claim_folder:
            claim_folders([(workspace.pk, spec.checkpoint_dir, output_dir_of(spec))])
        job = insert_row(_new_job(user, workspace, quota, spec))
        # Kept on the job: the response to the submission shows it without reading it back.
        job.submitted_event = insert_row(
            JobEvent(
                job=job,
                to_status=JobStatus.PENDING,
                reason="submitted",
                actor=Actor.USER,
                user=user,
            )
        )
        record_runs([job], [spec])  # its run identity (docs/results.md)
        announce_one(
            Notice.SUBMITTED,
            job,
            job.created_at,
            actor=Actor.USER,
            user=user,
            to_status=JobStatus.PENDING,
            reason="submitted",
        )
        request_scheduling()
    return job


def effective_checkpoint_dir(job: Job) -> str:
    """The job's checkpoint folder within its workspace's area (what the agent uses)."""
    return job.checkpoint_dir or f"job-{job.pk}"


def create_jobs(*, user, items: Sequence[tuple[Any, Any, JobSpec]]) -> list[Job]:
    """Many new jobs at once, each (workspace, quota, spec) already validated: one
    transaction, one INSERT of jobs and one of events (per 1,000 rows), one scheduling
    trigger. All or nothing: a failure rolls back every job of the batch (FolderRaced:
    a folder another submission took meanwhile, jobs.folders.claim_folders)."""
    if not items:
        return []
    with transaction.atomic():
        claim_folders([(ws.pk, s.checkpoint_dir, output_dir_of(s)) for ws, _, s in items])
        jobs = Job.objects.bulk_create(
            [_new_job(user, ws, quota, spec) for ws, quota, spec in items], batch_size=1000
        )
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job_id=job.pk,
                    to_status=JobStatus.PENDING,
                    reason="submitted",
                    actor=Actor.USER,
                    user=user,
                )
                for job in jobs
            ],
            batch_size=1000,
        )
        record_runs(jobs, [spec for _, _, spec in items])
        announce(
            [
                JobNotice(
                    kind=Notice.SUBMITTED,
                    job=job,
                    at=job.created_at,
                    actor=Actor.USER,
                    user=user,
                    to_status=JobStatus.PENDING,
                    reason="submitted",
                )
                for job in jobs
            ]
        )
        request_scheduling()
    return jobs


def _newest_checkpoint_of(job: Job) -> str:
    row = (
        Checkpoint.objects.filter(job=job, committed=True, pruned_at__isnull=True)
        .order_by("-step", "-id")
        .values_list("path", flat=True)
        .first()
    )
    return row or job.resume_from


class ResumeRefused(Exception):
    """A Restart would resume a run whose identity changed (docs/results.md)."""


def resubmit_job(job: Job, *, user, inputs: str | None = None, from_scratch: bool = False) -> Job:
    """ "Restart" of a finished job: a new job with the same parameters (docs/statuses.md). (A new
    attempt of the same job, by fault tolerance, is `actions.restarts.start_new_attempt`.)
    `inputs`: the inputs' version the restart reads when they changed (policy.jobspec
    `result_inputs`); ResumeRefused when units accepted from other inputs would carry.
    `from_scratch`: resume nothing: a folder of its own (the default `job-<new id>`), no
    checkpoint to start from, no accepted units carried (docs/results.md)."""
    if job.status not in FINAL_JOB_STATUSES:
        raise JobStillActive(f"the job is still {job.status}; stop it first")
    spec = JobSpec.from_job(job)
    if not from_scratch:
        # The same parameters, and the same folder of the same workspace's area: the
        # restart can resume from the original's checkpoints (default folder job-<id>).
        spec = replace(spec, checkpoint_dir=effective_checkpoint_dir(job))
    else:
        # A folder of its own (job-<new id>), also when the original's was named: that
        # one holds the original's checkpoints and accepted results; so does its declared
        # output folder, which the new run does not share either (docs/results.md).
        contract = {**spec.result_contract, "output_dir": ""}
        spec = replace(spec, checkpoint_dir="", result_contract=contract)
    if inputs is not None:
        contract = {**spec.result_contract, "inputs": check_inputs(inputs)}
        spec = replace(spec, result_contract=contract)
    if not from_scratch:
        refusal = resume_refusal(job, str(spec.result_contract.get("inputs") or ""))
        if refusal:
            raise ResumeRefused(refusal)
    with transaction.atomic():
        new_job = create_job(
            user=user, workspace=job.workspace, quota=job.quota, spec=spec, claim_folder=False
        )
        Job.objects.filter(pk=new_job.pk).update(
            cloned_from=job,
            # Resuming is what a Restart asks for: from the original's newest checkpoint
            # (its own rows stay the original's; docs/fault-tolerance.md).
            resume_from="" if from_scratch else _newest_checkpoint_of(job),
        )
        new_job.refresh_from_db()
        if not from_scratch:
            carry_units(job, new_job)  # the same result folder: its accepted units carry
        verb = "restarted from scratch" if from_scratch else "restarted"
        event = record_decision(job, f"{verb} as job #{new_job.pk}", actor=Actor.USER, user=user)
        announce_one(
            Notice.RESUBMITTED,
            job,
            event.created_at,
            reason=event.reason,
            actor=Actor.USER,
            user=user,
            detail={"new_job": new_job.pk},
        )
    return new_job
