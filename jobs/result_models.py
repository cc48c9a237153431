"""Counted results' tables (docs/results.md): a job's run identity, what each attempt's
workers resolved at start, its accepted units and conflicting reports. Imported by
`jobs.models` (Django finds the models there); written only by `jobs.actions.results`."""

from django.db import models

from protocol import limits


class RunRecord(models.Model):
    """A job's run identity, written once at submission (the effective configuration and its
    sha256 never change), and the verdict on its result after exit 0. Counters of accepted
    units and items are kept here so a list of jobs shows them without counting rows."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="run")
    run_id = models.CharField(max_length=80, unique=True)
    config = models.JSONField(default=dict)
    config_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    units_accepted = models.PositiveIntegerField(default=0)
    items_accepted = models.PositiveBigIntegerField(default=0)
    conflicts = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=limits.PHASE, blank=True)  # agents.sdk.phase
    # "" (not judged yet), accepted, rejected, unchecked (policy.results)
    result_state = models.CharField(max_length=12, blank=True)
    result_code = models.CharField(max_length=40, blank=True)
    result_reason = models.CharField(max_length=limits.REASON, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    # The validator's outcome (docs/results.md), as rank 0's agent reported it; None
    # `validator_at`: not reported.
    validator_exit_code = models.IntegerField(null=True, blank=True)
    validator_output = models.TextField(blank=True)
    validator_at = models.DateTimeField(null=True, blank=True)
    validator_attempt = models.PositiveIntegerField(default=0)  # the attempt it judged

    def __str__(self) -> str:
        return self.run_id


class AttemptFacts(models.Model):
    """What the agent resolved when it started one worker of an attempt: never changed."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="attempt_facts")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField(default=0)
    image = models.CharField(max_length=limits.IMAGE, blank=True)
    image_digest = models.CharField(max_length=200, blank=True)
    executable = models.CharField(max_length=limits.PATH, blank=True)
    executable_sha256 = models.CharField(max_length=64, blank=True)
    code_version = models.CharField(max_length=64, blank=True)
    # The job's data folders as the agent found them (docs/results.md, "Run identity").
    inputs_fingerprint = models.CharField(max_length=64, blank=True)
    inputs_files = models.PositiveBigIntegerField(default=0)
    inputs_bytes = models.PositiveBigIntegerField(default=0)
    # Their content (the job's result_inputs_sha256): the sha256 of the manifest the agent
    # wrote before the start; files and bytes above are the manifest's.
    inputs_sha256 = models.CharField(max_length=64, blank=True)
    result_dir = models.CharField(max_length=limits.PATH, blank=True)  # on the node
    reported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "rank"], name="jobs_attemptfacts_once"
            )
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} rank {self.rank}"


class ResultUnit(models.Model):
    """One accepted unit: stored once; the same checksums again change nothing."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="result_units")
    unit = models.CharField(max_length=limits.RESULT_UNIT)
    items = models.PositiveBigIntegerField(default=0)
    files = models.JSONField(default=list)  # [{"path", "size", "sha256"}]
    digest = models.CharField(max_length=64)  # policy.results.unit_digest
    attempt = models.PositiveIntegerField()
    accepted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "unit"], name="jobs_resultunit_once")]

    def __str__(self) -> str:
        return f"job {self.job_id} unit {self.unit}"


class ResultConflict(models.Model):
    """A unit reported again with other checksums: the first acceptance stays, and the job
    cannot be accepted while this row exists."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="result_conflicts")
    unit = models.CharField(max_length=limits.RESULT_UNIT)
    digest = models.CharField(max_length=64)
    files = models.JSONField(default=list)
    attempt = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "unit", "digest"], name="jobs_resultconflict_once"
            )
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} unit {self.unit} (conflict)"
