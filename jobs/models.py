"""Jobs, their pods (one per worker per attempt), events, logs and checkpoints (DESIGN §3).

Only `Job.status` and `Pod.status` are stored state machines; everything a user sees beyond
them ("Stopping…", "Unknown (node not reachable)") is derived in `jobs.display`.
"""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from jobs.statuses import (
    ACTIVE_JOB_STATUSES,
    ACTIVE_POD_STATUSES,
    Actor,
    IdleResources,
    JobStatus,
    PodStatus,
)


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value) for member in enum]


class Job(models.Model):
    workspace = models.ForeignKey("quotas.Workspace", on_delete=models.PROTECT, related_name="jobs")
    quota = models.ForeignKey("quotas.Quota", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    image = models.CharField(max_length=500)
    command = models.TextField()
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=1)
    cpus_per_worker = models.PositiveIntegerField(default=4)
    memory_gb_per_worker = models.PositiveIntegerField(default=16)
    priority = models.IntegerField(default=1)
    idle_resources = models.CharField(
        max_length=24, choices=_choices(IdleResources), default=IdleResources.OFF
    )
    # Automatic Fault Tolerance (DESIGN §6). Stored as columns so the monitor can query them.
    fault_tolerance = models.BooleanField(default=False)
    ft_config = models.JSONField(default=dict, blank=True)
    checkpoint_dir = models.CharField(max_length=500, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)

    status = models.CharField(max_length=12, choices=_choices(JobStatus), default=JobStatus.PENDING)
    status_reason = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    restart_count = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    # A graceful stop in progress: the job keeps its status until every worker has exited.
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=300, blank=True)
    stop_final_status = models.CharField(max_length=12, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_positive"),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="job_attempt_positive"),
        ]
        indexes = [
            # The scheduler's queue: active unplaced jobs by priority then submit time.
            models.Index(
                F("priority").desc(),
                "created_at",
                name="job_queue_order",
                condition=Q(status__in=["Pending", "Inqueue"]),
            ),
            models.Index(fields=["workspace", "-created_at"], name="job_workspace_recent"),
            models.Index(fields=["status"], name="job_status"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_JOB_STATUSES

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker


class PodDesired(models.TextChoices):
    RUN = "Run", "Run"
    STOP = "Stop", "Stop"


class Pod(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="pods")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    node = models.ForeignKey(
        "agents.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="pods"
    )
    gpu_indices = models.JSONField(default=list)
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    memory_gb = models.PositiveIntegerField(default=0)
    charged_quota = models.ForeignKey(
        "quotas.Quota", on_delete=models.PROTECT, related_name="charged_pods"
    )
    in_quota = models.BooleanField(default=True)
    status = models.CharField(
        max_length=20, choices=_choices(PodStatus), default=PodStatus.STARTING
    )
    status_reason = models.CharField(max_length=300, blank=True)
    # What the console wants the agent to do with this worker; the agent converges on it.
    desired = models.CharField(max_length=4, choices=PodDesired.choices, default=PodDesired.RUN)
    stop_grace_seconds = models.PositiveIntegerField(default=30)
    stop_reason = models.CharField(max_length=300, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # The final pod status once a stopped worker exits (Stopped, Resource Preempted, …).
    stop_as = models.CharField(max_length=20, choices=_choices(PodStatus), blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    container_id = models.CharField(max_length=100, blank=True)
    # Next log sequence number the console expects from the agent for this pod.
    log_next_seq = models.PositiveBigIntegerField(default=0)
    progress_step = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_phase = models.CharField(max_length=100, blank=True)
    progress_metrics = models.JSONField(default=dict, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "attempt", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "rank"], name="pod_unique_rank_per_attempt"
            ),
            # Exactly one live copy of each worker: a rank of a job can be active in at
            # most one attempt at a time (old attempts must be final before a new one runs).
            models.UniqueConstraint(
                fields=["job", "rank"],
                condition=Q(status__in=sorted(s.value for s in ACTIVE_POD_STATUSES)),
                name="pod_one_active_copy_per_rank",
            ),
            models.CheckConstraint(condition=Q(gpus__gte=0), name="pod_gpus_non_negative"),
        ]
        indexes = [
            # The scheduler's usage query and the agent's desired-state query.
            models.Index(
                fields=["node"],
                condition=Q(status__in=sorted(s.value for s in ACTIVE_POD_STATUSES)),
                name="pod_active_by_node",
            ),
            models.Index(
                fields=["charged_quota"],
                condition=Q(status__in=sorted(s.value for s in ACTIVE_POD_STATUSES)),
                name="pod_active_by_quota",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name} worker {self.rank} (attempt {self.attempt})"


class JobEvent(models.Model):
    """Append-only log of every status change and decision: the timeline and audit trail."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True)
    attempt = models.PositiveIntegerField(default=1)
    from_status = models.CharField(max_length=12, blank=True)
    to_status = models.CharField(max_length=12, blank=True)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=10, choices=_choices(Actor))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["job", "created_at"], name="jobevent_job_time")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status or '∅'} → {self.to_status} ({self.reason})"


class LogChunk(models.Model):
    """Consecutive log lines [seq_start, seq_end] of one pod, stored once (DESIGN §3)."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.PositiveIntegerField()
    seq_start = models.PositiveBigIntegerField()
    seq_end = models.PositiveBigIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pod", "seq_start"]
        constraints = [
            models.UniqueConstraint(fields=["pod", "seq_start"], name="logchunk_unique_seq"),
            models.CheckConstraint(
                condition=Q(seq_end__gte=F("seq_start")), name="logchunk_range_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"pod {self.pod_id} lines {self.seq_start}-{self.seq_end}"


class Checkpoint(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    attempt = models.PositiveIntegerField()
    step = models.BigIntegerField()
    path = models.CharField(max_length=1000)
    size_bytes = models.PositiveBigIntegerField(default=0)
    checksum = models.CharField(max_length=100, blank=True)
    committed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "-step"]
        constraints = [
            models.UniqueConstraint(fields=["job", "path"], name="checkpoint_unique_path")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} step {self.step}"
