"""Counted results (docs/results.md): a job's run identity written at submission, the run
facts and accepted units its workers report, and the verdict on its result after exit 0.

Writes: the run record is inserted once per job (its configuration never changes); units
are inserted once per (job, unit) (unique constraint, conflicts ignored: the same unit
again is a no-op), a unit reported with other checksums is inserted once per (job, unit,
digest) as a conflict (the first acceptance stays); the run's counters are recounted from
the rows after each insert, so two reports of one unit never count it twice.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection
from django.db.models import Count, F, Sum

from jobs.models import AttemptFacts, Job, Pod, ResultConflict, ResultUnit, RunRecord
from jobs.result_reads import identity_of
from policy import results as rules
from policy.derive import JobChange
from policy.jobspec import JobSpec
from policy.statuses import JobStatus
from protocol import limits
from protocol.agent import RunFacts
from protocol.text import fit


def _identity(job: Job, spec: JobSpec | None = None) -> RunRecord:
    config, digest, run_id = identity_of(job, spec)
    return RunRecord(job_id=job.pk, run_id=run_id, config=config, config_sha256=digest)


def record_runs(jobs: Sequence[Job], specs: Sequence[JobSpec] | None = None) -> None:
    """The run identity of new jobs (one INSERT), in the submission's transaction."""
    records = [_identity(j, specs[i] if specs else None) for i, j in enumerate(jobs)]
    RunRecord.objects.bulk_create(records, batch_size=1000, ignore_conflicts=True)
    for job, record in zip(jobs, records, strict=True):
        job.run = record  # the response to the submission shows it without reading it back


def _update_run(job: Job, **fields) -> None:
    """Write the job's run record; one is made first for a job that has none (a job
    submitted before results were counted)."""
    if not RunRecord.objects.filter(job_id=job.pk).update(**fields):
        record_runs([job])
        RunRecord.objects.filter(job_id=job.pk).update(**fields)


# -- what workers report ---------------------------------------------------------------------


def fill_image_digest(pod: Pod, digest: str) -> bool:
    """The image's id learnt once the worker runs (Kubernetes: the pod status's
    `imageID`): set on the attempt's facts where none is recorded, never changed after."""
    digest = digest[:200]
    row = AttemptFacts.objects.filter(job_id=pod.job_id, attempt=pod.attempt, rank=pod.rank)
    if row.filter(image_digest="").update(image_digest=digest):
        return True
    if row.exists():
        return False
    store_facts(pod, RunFacts(image_digest=digest))  # none recorded yet: the row is made
    return True


def store_facts(pod: Pod, facts) -> None:
    """What the agent resolved when it started this worker: recorded once, never changed
    (a second report is ignored)."""
    if facts is None:
        return
    AttemptFacts.objects.bulk_create(
        [
            AttemptFacts(
                job_id=pod.job_id,
                attempt=pod.attempt,
                rank=pod.rank,
                image=pod.job.image,
                image_digest=facts.image_digest,
                executable=facts.executable,
                executable_sha256=facts.executable_sha256,
                code_version=facts.code_version,
                inputs_fingerprint=facts.inputs_fingerprint,
                inputs_files=facts.inputs_files,
                inputs_bytes=facts.inputs_bytes,
                inputs_sha256=facts.inputs_sha256,
                result_dir=facts.result_dir,
            )
        ],
        ignore_conflicts=True,
    )


def store_units(pod: Pod, units: Iterable, now: datetime) -> int:
    """Accepted units of a worker (protocol.agent.UnitReport): each stored once; the same
    checksums again change nothing, other checksums are a conflict (the first stays).
    Returns how many units are new (the caller counts them as progress).

    One INSERT … ON CONFLICT DO NOTHING RETURNING for the batch (no model instances: 500
    units a report), the run's counters moved by what it returned; the units it did not
    insert are read back only to compare their checksums."""
    reports = {u.unit: u for u in units}
    if not reports:
        return 0
    files = {unit: [f.model_dump() for f in r.files] for unit, r in reports.items()}
    digests = {unit: rules.unit_digest(rows) for unit, rows in files.items()}
    offered = [u for u, r in reports.items() if not r.conflict]
    inserted = _insert_units(
        pod, [(u, reports[u].items, files[u], digests[u]) for u in offered], now
    )
    rest = [u for u in reports if u not in inserted]
    known = dict(
        ResultUnit.objects.filter(job_id=pod.job_id, unit__in=rest).values_list("unit", "digest")
        if rest
        else []
    )
    clashes = [
        ResultConflict(
            job_id=pod.job_id,
            unit=unit,
            digest=digests[unit],
            files=files[unit],
            attempt=pod.attempt,
            created_at=now,
        )
        for unit in rest
        if reports[unit].conflict or known.get(unit, digests[unit]) != digests[unit]
    ]
    if clashes:
        ResultConflict.objects.bulk_create(clashes, ignore_conflicts=True)
        recount(pod.job)
    elif inserted:
        moved = RunRecord.objects.filter(job_id=pod.job_id).update(
            units_accepted=F("units_accepted") + len(inserted),
            items_accepted=F("items_accepted") + sum(inserted.values()),
        )
        if not moved:
            recount(pod.job)
    return len(inserted)


def _insert_units(pod: Pod, rows: list[tuple[str, int, list, str]], now: datetime) -> dict:
    """Insert the units no row holds yet; returns {unit: items} of those inserted."""
    if not rows:
        return {}
    meta = ResultUnit._meta
    qn = connection.ops.quote_name
    columns = ("job_id", "unit", "items", "files", "digest", "attempt", "accepted_at")
    files_field, at_field = meta.get_field("files"), meta.get_field("accepted_at")
    at = at_field.get_db_prep_save(now, connection)
    params: list = []
    for unit, items, unit_files, digest in rows:
        files_value = files_field.get_db_prep_save(unit_files, connection)
        params += [pod.job_id, unit, items, files_value, digest, pod.attempt, at]
    marks = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(rows))
    sql = (  # names from the model, every value a parameter
        f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(c) for c in columns)}) "  # noqa: S608
        f"VALUES {marks} ON CONFLICT ({qn('job_id')}, {qn('unit')}) DO NOTHING "
        f"RETURNING {qn('unit')}, {qn('items')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def carry_units(original: Job, new_job: Job) -> int:
    """A Restart (a new job in the original's checkpoint folder, so the same result folder)
    carries the original's accepted units: its program skips them (ACCEPTED_UNITS_FILE) and
    its result is judged with them. Their attempt numbers stay the original's."""
    rows = [
        ResultUnit(
            job_id=new_job.pk,
            unit=unit.unit,
            items=unit.items,
            files=unit.files,
            digest=unit.digest,
            attempt=unit.attempt,
            accepted_at=unit.accepted_at,
        )
        for unit in ResultUnit.objects.filter(job_id=original.pk).order_by("pk")
    ]
    if rows:
        ResultUnit.objects.bulk_create(rows, batch_size=1000, ignore_conflicts=True)
        recount(new_job)
    return len(rows)


def resume_refusal(original: Job, inputs: str) -> str:
    """Why a Restart of `original` with these inputs may not carry its accepted units
    (policy.results.resume_refusal), or "". The run's inputs are those its identity
    recorded at submission."""
    record = RunRecord.objects.filter(job_id=original.pk).only("run_id", "config").first()
    if record is None:
        return ""
    carried = ResultUnit.objects.filter(job_id=original.pk).count()
    contract = rules.Contract.of(original.result_contract)
    words = contract.plural() if contract else "units"
    run_inputs = str(record.config.get("result_inputs") or "")
    return rules.resume_refusal(record.run_id, run_inputs, inputs, carried, words)


def recount(job: Job) -> None:
    """The run's counters from its rows (two queries and one UPDATE)."""
    totals = ResultUnit.objects.filter(job_id=job.pk).aggregate(n=Count("id"), items=Sum("items"))
    conflicts = ResultConflict.objects.filter(job_id=job.pk).values("unit").distinct().count()
    _update_run(
        job, units_accepted=totals["n"], items_accepted=totals["items"] or 0, conflicts=conflicts
    )


def store_validator(pod: Pod, report, now: datetime) -> None:
    """The validator's outcome (protocol.agent.ValidatorReport) on rank 0's exit: kept on
    the run for the verdict and the result report."""
    if report is None or pod.rank != 0:
        return
    _update_run(
        pod.job,
        validator_exit_code=report.exit_code,
        validator_output=report.output,
        validator_at=now,
        validator_attempt=pod.attempt,
    )


def store_phase(job_id: int, phase: str) -> None:
    """The program's newest phase (agents.sdk.phase), written only when it changes."""
    RunRecord.objects.filter(job_id=job_id).exclude(phase=phase).update(
        phase=fit(phase, limits.PHASE)
    )


# -- the verdict after exit 0 ----------------------------------------------------------------


def verdict_of(job: Job, contract: rules.Contract | None) -> rules.Verdict:
    """The result's verdict from the job's contract and its accepted units (pure rule:
    policy.results.judge)."""
    if contract is None:
        return rules.judge(None, {})
    accepted = dict(ResultUnit.objects.filter(job_id=job.pk).values_list("unit", "items"))
    conflicts = ResultConflict.objects.filter(job_id=job.pk).values_list("unit", flat=True)
    outcome = None
    if contract.validator:
        # Only this attempt's outcome: an earlier attempt's says nothing of this result.
        reported = RunRecord.objects.filter(
            job_id=job.pk, validator_at__isnull=False, validator_attempt=job.attempt
        )
        found = reported.values_list("validator_exit_code", "validator_output").first()
        outcome = (found[0], found[1]) if found else None
    return rules.judge(contract, accepted, list(conflicts), outcome)


def completion(job: Job, change: JobChange, now: datetime) -> JobChange:
    """Every worker exited 0 (`change` says Completed): the result decides. Accepted or no
    contract → Completed (its reason says which); rejected → Failed `result_rejected`, which
    fault tolerance never retries (the failure is not a worker's)."""
    contract = rules.Contract.of(job.result_contract)
    verdict = verdict_of(job, contract)
    if contract is not None:  # without one "unchecked" is derived: nothing to write
        _update_run(
            job,
            result_state=verdict.state,
            result_code=verdict.code,
            result_reason=fit(verdict.reason, limits.REASON),
            judged_at=now,
        )
    if verdict.state == rules.RESULT_REJECTED:
        return JobChange(JobStatus.FAILED, fit(verdict.reason, limits.REASON), change.exit_code)
    return JobChange(
        change.to_status, fit(f"{change.reason}; {verdict.reason}", limits.REASON), change.exit_code
    )
