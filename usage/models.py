"""Usage history's tables (docs/usage-history.md): buckets, totals, the roll-up's state."""

from django.db import models

_FIELDS = ("in_quota", "borrowed", "lent", "idle_held", "waiting")  # policy.usage_history.FIELDS


class UsageBucket(models.Model):
    """GPU-microseconds of one hour (span "h"), UTC day ("d") or UTC month ("m") for one
    quota (`workspace_id` and `user_id` 0) or one (quota, workspace, user): written only by
    the roll-up (usage.actions.rollup). Ids without foreign keys: history outlives what it
    counts."""

    span = models.CharField(max_length=1)
    start = models.DateTimeField()
    quota_id = models.IntegerField()
    workspace_id = models.IntegerField(default=0)
    user_id = models.IntegerField(default=0)
    gpu_type = models.CharField(max_length=40, blank=True)
    in_quota_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    lent_us = models.BigIntegerField(default=0)
    idle_held_us = models.BigIntegerField(default=0)
    waiting_us = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "start", "quota_id", "workspace_id", "user_id"],
                name="usage_bucket_unique",
            )
        ]
        indexes = [
            # The quota rows of a period, covering: the reports by quota read only the index
            # (docs/usage-history.md, "Speed").
            models.Index(
                fields=["span", "start", "quota_id", "workspace_id", *(f"{f}_us" for f in _FIELDS)],
                condition=models.Q(workspace_id=0),
                name="usage_bucket_quota_rows",
            )
        ]

    def __str__(self) -> str:
        return f"{self.span} {self.start:%Y-%m-%d %H:00} quota {self.quota_id}"


class JobUsageBucket(models.Model):
    """One job's GPU-microseconds of one hour ("h") or UTC day ("d"), with the job's quota,
    workspace, user and GPU type (the per-job report, docs/usage-history.md). `lent_us` is
    always 0 (lending is a quota's, not a job's). Written only by the roll-up."""

    span = models.CharField(max_length=1)
    start = models.DateTimeField()
    job_id = models.IntegerField()
    quota_id = models.IntegerField()
    workspace_id = models.IntegerField()
    user_id = models.IntegerField()
    gpu_type = models.CharField(max_length=40, blank=True)
    in_quota_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    lent_us = models.BigIntegerField(default=0)
    idle_held_us = models.BigIntegerField(default=0)
    waiting_us = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["span", "start", "job_id"], name="job_usage_unique")
        ]

    def __str__(self) -> str:
        return f"{self.span} {self.start:%Y-%m-%d %H:00} job {self.job_id}"


class UsageTotal(models.Model):
    """Each quota's GPU-microseconds of every final hour so far (the /metrics counters)."""

    quota_id = models.IntegerField(unique=True)
    in_quota_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    lent_us = models.BigIntegerField(default=0)
    idle_held_us = models.BigIntegerField(default=0)
    waiting_us = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"usage totals of quota {self.quota_id}"


class UsageRollup(models.Model):
    """The roll-up's one row: hours before `rolled_until` are final (closed and written).
    Its row lock serialises two copies of the roll-up."""

    rolled_until = models.DateTimeField(null=True, blank=True)
    ran_at = models.DateTimeField(null=True, blank=True)
    # How long the last run took: the periodic runs are paced by it (docs/usage-history.md).
    last_seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"usage rolled until {self.rolled_until}"
