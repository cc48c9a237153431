"""Counted results, read (docs/results.md): what the job page, list, API and CLI show of a
run — its verdict, its progress line, its units page and the files it names."""

import stat
from collections.abc import Sequence
from pathlib import Path

from django.db.models import Count

from jobs.models import AttemptFacts, Job, Pod, ResultConflict, ResultUnit, RunRecord
from policy import results as rules
from policy import run_compare as compare
from policy.jobspec import JobSpec
from policy.statuses import FINAL_JOB_STATUSES, PodStatus
from protocol import limits
from protocol.units import ResumeIdentity


def result_state(job: Job) -> str:
    """accepted | rejected | unchecked once judged; pending while the job runs; an ended job
    that was never judged (it failed or was stopped) is "unchecked"."""
    run = job.run if has_run(job) else None
    if run is not None and run.result_state:
        return run.result_state
    return rules.PENDING if job.status not in FINAL_JOB_STATUSES else rules.UNCHECKED


def progress_line(job: Job) -> str:
    """ "phase write · 5 of 8 partitions accepted · 2,500 of 4,000 items" ("" when nothing
    is counted); `job.run` joined by the caller (jobs.access.visible_jobs)."""
    run = getattr(job, "run", None) if has_run(job) else None
    contract = rules.Contract.of(job.result_contract)
    if run is None:
        return rules.progress_text(contract, 0, 0)
    return rules.progress_text(contract, run.units_accepted, run.items_accepted, run.phase)


def has_run(job: Job) -> bool:
    try:
        job.run  # noqa: B018 - a reverse one-to-one raises when there is none
    except RunRecord.DoesNotExist:
        return False
    return True


def _time(value) -> str | None:
    return value.isoformat() if value else None


def _identity(job: Job, run: RunRecord | None) -> dict:
    attempts = [
        {
            "attempt": f.attempt,
            "rank": f.rank,
            "image": f.image,
            "image_digest": f.image_digest,
            "executable": f.executable,
            "executable_sha256": f.executable_sha256,
            "code_version": f.code_version,
            "inputs_fingerprint": f.inputs_fingerprint,
            "inputs_files": f.inputs_files,
            "inputs_bytes": f.inputs_bytes,
            "inputs_sha256": f.inputs_sha256,
            "reported_at": _time(f.reported_at),
        }
        for f in AttemptFacts.objects.filter(job_id=job.pk).order_by("attempt", "rank")
    ]
    return {
        "run_id": run.run_id if run else None,
        "config": run.config if run else {},
        "config_sha256": run.config_sha256 if run else None,
        "created_at": _time(run.created_at) if run else None,
        "attempts": attempts,
    }


def result_report(job: Job, *, after: int = 0, limit: int = limits.RESULT_UNITS_PAGE) -> dict:
    """The result API's JSON (docs/results.md): a page of units ordered by acceptance."""
    run = job.run if has_run(job) else None
    contract = rules.Contract.of(job.result_contract)
    rows = list(ResultUnit.objects.filter(job_id=job.pk, pk__gt=after).order_by("pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    missing: list[str] = []
    have: set[str] | None = None  # the accepted ids, read once when something needs them
    if contract is not None and contract.ids:
        have = set(ResultUnit.objects.filter(job_id=job.pk).values_list("unit", flat=True))
        missing = [u for u in contract.ids if u not in have][:1000]
    conflicts = sorted(
        set(ResultConflict.objects.filter(job_id=job.pk).values_list("unit", flat=True))
    )
    page = [
        {
            "unit": r.unit,
            "items": r.items,
            "attempt": r.attempt,
            "accepted_at": _time(r.accepted_at),
            "files": [{**f, "unit": r.unit} for f in r.files],
        }
        for r in rows
    ]
    state = result_state(job)
    return {
        "job": job.pk,
        "state": state,
        "reason": (
            run.result_reason if run and run.result_state else _pending_reason(job, state, have)
        ),
        "reason_code": run.result_code if run else "",
        "progress": progress_line(job),
        "units": {
            "unit_name": contract.unit if contract else "unit",
            "expected": contract.count if contract else None,
            "accepted": run.units_accepted if run else 0,
            "items_expected": contract.items if contract else None,
            "items_accepted": run.items_accepted if run else 0,
            "missing": missing,
            "conflicts": conflicts,
            "page": page,
            "next_after": rows[-1].pk if more else None,
        },
        "run": _identity(job, run),
        "files": [f for unit in page for f in unit["files"]],
        "validator": _validator(contract, run, job.attempt),
    }


def _validator(contract: "rules.Contract | None", run, attempt: int) -> dict | None:
    """The validator's report: None when the job has none; its command, exit code and last
    lines once rank 0's agent reported them for the job's attempt (exit_code None until
    then)."""
    if contract is None or not contract.validator:
        return None
    reported = run is not None and run.validator_at is not None
    reported = reported and run.validator_attempt == attempt
    return {
        "command": contract.validator,
        "reported": reported,
        "exit_code": run.validator_exit_code if reported else None,
        "output": run.validator_output if reported else "",
    }


def _pending_reason(job: Job, state: str, have: set[str] | None = None) -> str:
    if state == rules.PENDING:
        return "the job is still running; the result is judged after exit 0"
    if have is None:
        have = set(ResultUnit.objects.filter(job_id=job.pk).values_list("unit", flat=True))
    return rules.ended_unjudged(job.status, rules.Contract.of(job.result_contract), have)


def accepted_file(job: Job, relative: str) -> tuple[Path, dict, str] | None:
    """(path on disk, its recorded entry, a problem or "") of one accepted file, or None
    when no accepted unit of the job names `relative`. Never a staging file: only the run's
    result folder, the path resolved inside it, a regular file (not a link)."""
    entry = None
    for files in ResultUnit.objects.filter(job_id=job.pk).values_list("files", flat=True):
        entry = next((f for f in files if f.get("path") == relative), None)
        if entry is not None:
            break
    if entry is None:
        return None
    folder = (
        AttemptFacts.objects.filter(job_id=job.pk)
        .exclude(result_dir="")
        .order_by("-attempt")
        .values_list("result_dir", flat=True)
        .first()
    )
    if not folder:
        return Path(relative), entry, "the agent reported no result folder for this job"
    root = Path(folder)
    path = root / relative
    try:
        real_root = root.resolve(strict=True)
        inside = path.resolve(strict=True).is_relative_to(real_root)
        info = path.lstat()
    except OSError:
        return path, entry, f"the result folder {folder} cannot be read from the console"
    if not inside or path.is_symlink() or not stat.S_ISREG(info.st_mode):
        return None
    if info.st_size != entry["size"]:
        return path, entry, "the file no longer has its recorded size"
    return path, entry, ""


# -- compare with run… ------------------------------------------------------------------------


def identity_of(job: Job, spec: JobSpec | None = None) -> tuple[dict, str, str]:
    """(effective configuration, its sha256, run id) of a job: what its run record holds
    (written once at submission by jobs.actions.results)."""
    spec = spec if spec is not None else JobSpec.from_job(job)
    values = {**spec.values(), "quota": job.quota_id, "workspace": job.workspace_id}
    config, digest = rules.effective_config(values)
    return config, digest, rules.run_id(job.name, job.pk)


def run_comparison(job: Job, other: Job) -> dict:
    """What differs between two runs' identities (docs/results.md, "Compare with run…"):
    the effective configuration key by key, then what the runtime resolved at the start."""
    mine, theirs = _compared(job), _compared(other)
    found = compare.changes(mine["values"], theirs["values"])
    return {
        "job": job.pk,
        "run_id": mine["run_id"],
        "config_sha256": mine["config_sha256"],
        "with_job": other.pk,
        "with_run_id": theirs["run_id"],
        "with_config_sha256": theirs["config_sha256"],
        "identical": not found,
        "changes": [c.as_json() for c in found],
    }


def _compared(job: Job) -> dict:
    """A run's identity as compared: its stored record (or, for a job submitted before
    results were counted, the configuration its spec resolves to now)."""
    run = job.run if has_run(job) else None
    if run is not None:
        config, digest, run_id = run.config, run.config_sha256, run.run_id
    else:
        config, digest, run_id = identity_of(job)
    facts = AttemptFacts.objects.filter(job_id=job.pk).values("attempt", "rank", *compare.RESOLVED)
    return {
        "run_id": run_id,
        "config_sha256": digest,
        "values": {**config, **compare.resolved(facts)},
    }


# -- what a resumed run must still be ---------------------------------------------------------


def resume_identities(pods: Sequence[Pod]) -> dict[int, ResumeIdentity]:
    """Pod id → the run whose accepted units it carries, for the Starting workers of jobs
    that carry units (docs/results.md, "Resume without duplicates"): the job's own first
    attempt when an earlier one started, else the original's a Restart carried from. At
    most three queries, none without Starting workers."""
    starting = [p for p in pods if p.status == PodStatus.STARTING]
    if not starting:
        return {}
    job_ids = {p.job_id for p in starting}
    carried = dict(
        ResultUnit.objects.filter(job_id__in=job_ids)
        .values("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
    if not carried:
        return {}
    jobs = {p.job_id: p.job for p in starting if p.job_id in carried}
    runs = set(jobs) | {j.cloned_from_id for j in jobs.values() if j.cloned_from_id}
    first: dict[int, AttemptFacts] = {}
    for facts in AttemptFacts.objects.filter(job_id__in=runs, rank=0).order_by("attempt"):
        first.setdefault(facts.job_id, facts)
    run_ids = dict(RunRecord.objects.filter(job_id__in=runs).values_list("job_id", "run_id"))
    found: dict[int, ResumeIdentity] = {}
    for pod in starting:
        job = jobs.get(pod.job_id)
        if job is None:
            continue
        own = first.get(job.pk)
        source = own if own is not None and own.attempt < pod.attempt else None
        source = source or first.get(job.cloned_from_id or 0)
        if source is None:
            continue
        contract = rules.Contract.of(job.result_contract)
        found[pod.pk] = ResumeIdentity(
            run_id=run_ids.get(source.job_id, "")[:80],
            carried=carried[job.pk],
            units=(contract.plural() if contract else "units")[:40],
            code_version=source.code_version,
            executable_sha256=source.executable_sha256,
            inputs_fingerprint=source.inputs_fingerprint,
            inputs_sha256=source.inputs_sha256,
            image_digest=source.image_digest,
        )
    return found
