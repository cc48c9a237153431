"""Jobs, their pods (one per worker per attempt), events, logs and checkpoints (docs/domain.md).

Only `Job.status` and `Pod.status` are stored state machines; everything a user sees beyond
them ("Stopping…", "Unknown (node not reachable)") is derived in `policy.display`.
"""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from jobs.fields import CleanTextField, FittedCharField
from policy.statuses import (
    ACTIVE_JOB_STATUSES,
    ACTIVE_POD_STATUSES,
    Actor,
    IdleResources,
    JobStatus,
    PodStatus,
)
from protocol import limits


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value) for member in enum]


class Job(models.Model):
    # No index of its own: job_workspace_recent (workspace, -created_at) serves it, and every
    # status change rewrites each index of a job row (the first cycle updates thousands).
    workspace = models.ForeignKey(
        "quotas.Workspace", on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    quota = models.ForeignKey("quotas.Quota", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=limits.JOB_NAME)
    image = models.CharField(max_length=limits.IMAGE)
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
    # Automatic Fault Tolerance (docs/fault-tolerance.md). Stored as columns so the monitor can
    # query them.
    fault_tolerance = models.BooleanField(default=False)
    ft_config = models.JSONField(default=dict, blank=True)
    checkpoint_dir = models.CharField(max_length=limits.CHECKPOINT_DIR, blank=True)
    # The work contract (docs/results.md; policy.jobspec's result_* fields).
    result_contract = models.JSONField(default=dict, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Restart budgets counted separately (docs/traps.md): `restart_count` holds failure restarts
    # (they consume `max_restarts`); preemptions and node losses never exhaust it.
    preemption_count = models.PositiveIntegerField(default=0)
    node_loss_count = models.PositiveIntegerField(default=0)
    # Crash-loop backoff: the scheduler leaves a Pending restart alone until this time.
    restart_not_before = models.DateTimeField(null=True, blank=True)
    # Hang detection (jobs.job_monitor): when the job is declared hung unless it makes progress
    # first. Set only while it runs with hang detection on; pushed forward by new progress
    # steps or, without progress reports, by new distinct log lines.
    hang_deadline = models.DateTimeField(null=True, blank=True)
    # The newest committed checkpoint when the current attempt was created: its workers get
    # it as RESUME_FROM (fixed per attempt, so every worker resumes from the same one).
    resume_from = models.CharField(max_length=limits.PATH, blank=True)
    # Nodes this job's workers must not be placed on again (a `retry_elsewhere` failure:
    # ECC/Xid): [{"id": node id, "name": node name, "rule": rule}]. Names are stored with
    # the ids so the page and the API show them without another query.
    excluded_nodes = models.JSONField(default=list, blank=True)
    # Distributed jobs (docs/distributed.md): how the workers meet (policy.jobspec's
    # "distributed" fields: framework, processes per worker, parameter servers) and the
    # current attempt's rendezvous, written by the scheduling cycle that places the attempt:
    # rank 0's node, the port reserved there (held while the job is live: the cycle never
    # gives a port of a live job's node to another), and each rank's node address.
    distributed = models.JSONField(default=dict, blank=True)
    data = models.JSONField(default=dict, blank=True)  # read-only folders: name → folder
    code = models.JSONField(default=dict, blank=True)  # {"repo", "ref"}: checked out by the agent
    rendezvous_node = models.ForeignKey(
        "cluster.Node", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    rendezvous_port = models.PositiveIntegerField(null=True, blank=True)
    rendezvous_attempt = models.PositiveIntegerField(null=True, blank=True)
    rendezvous_hosts = models.JSONField(default=list, blank=True)

    status = models.CharField(max_length=12, choices=_choices(JobStatus), default=JobStatus.PENDING)
    status_reason = CleanTextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    restart_count = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    # A graceful stop in progress: the job keeps its status until every worker has exited.
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_reason = FittedCharField(max_length=limits.REASON, blank=True)
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
            # The hang monitor's query: `hang_deadline < now` among jobs that have one.
            models.Index(
                fields=["hang_deadline"],
                name="job_hang_deadline",
                condition=Q(hang_deadline__isnull=False),
            ),
            # Usage history's roll-up: jobs that ended in a window (set once, at the end).
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="job_finished_at",
            ),
            # Expected start (jobs.forecast): how long past runs of the same name took.
            models.Index(
                "name",
                F("finished_at").desc(),
                name="job_completed_runs",
                condition=Q(status="Completed"),
            ),
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
        "cluster.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="pods"
    )
    gpu_indices = models.JSONField(default=list)
    # The same GPUs by UUID when they were placed (cluster.GpuDevice.uuid), in the same
    # order: what the agent requests, and how it notices the node's GPU order changed.
    gpu_uuids = models.JSONField(default=list, blank=True)
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
    status_reason = FittedCharField(max_length=limits.REASON, blank=True)
    # What the console wants the agent to do with this worker; the agent converges on it.
    desired = models.CharField(max_length=4, choices=PodDesired.choices, default=PodDesired.RUN)
    stop_grace_seconds = models.PositiveIntegerField(default=30)
    stop_reason = FittedCharField(max_length=limits.REASON, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # The final pod status once a stopped worker exits (Stopped, Resource Preempted, …).
    stop_as = models.CharField(max_length=20, choices=_choices(PodStatus), blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error_message = CleanTextField(blank=True)
    container_id = FittedCharField(max_length=limits.CONTAINER_ID, blank=True)
    # Next log sequence number the console expects from the agent for this pod.
    log_next_seq = models.PositiveBigIntegerField(default=0)
    # The agent's exit report said every log line of this worker was acknowledged: a log
    # follower stops at once rather than waiting for late lines (jobs.logview.follow).
    logs_delivered = models.BooleanField(default=False)
    # Who ended the worker when its exit does not tell (protocol.agent.WorkerReport.ended_by):
    # "agent_shutdown", its node's agent stopped it while shutting down (the node left:
    # docs/fault-tolerance.md, "A node leaving").
    ended_by = models.CharField(max_length=16, blank=True, default="")
    progress_step = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_phase = FittedCharField(max_length=limits.PHASE, blank=True)
    progress_metrics = models.JSONField(default=dict, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)  # console time of a new step
    progress_rate = models.FloatField(null=True, blank=True)  # steps/s between the last two
    # The worker's own clock at progress_step (ProgressReport.at), when its agent sends it.
    progress_clock = models.FloatField(null=True, blank=True)
    # Hashes of the last distinct log lines (policy.faulttolerance.hang.distinct_lines): a
    # repeated identical line is not progress.
    recent_line_hashes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The last report that changed this worker's state; while it runs as known, its node's
    # last heartbeat (cluster.Node.last_heartbeat_at) says when it was last heard of.
    last_report_at = models.DateTimeField(null=True, blank=True)
    # The last report or log lines of this worker the console refused (or repaired), and
    # when: the agent sets a refused item aside after a few tries (docs/agent-protocol.md).
    report_refused = FittedCharField(max_length=limits.REASON, blank=True)
    report_refused_at = models.DateTimeField(null=True, blank=True)

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
            # Usage history's roll-up (usage.actions.rollup): the pods that ended in a window.
            # Partial: a pod enters it once, when it ends (no cost to the cycle's inserts).
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="pod_finished_at",
            ),
            # Job lists' "has an Unknown worker" (jobs.access.visible_jobs): the few pods of
            # silent nodes, not every pod, whatever plan the database picks for the EXISTS.
            models.Index(
                fields=["job"],
                condition=Q(status=PodStatus.UNKNOWN.value),
                name="pod_unknown_by_job",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name} worker {self.rank} (attempt {self.attempt})"


class HeldGpu(models.Model):
    """One GPU of a node held by a live pod (Starting, Running, Unknown), one row per GPU.

    Written only by database triggers on the pod table (migration 0008), never by Python:
    a row appears when a pod with a node becomes live and goes when it ends, moves or is
    deleted. Its unique (node, index) is the rule that no two live pods hold the same GPU,
    kept by the database whatever the writer, lock or race (the scheduler's advisory lock
    is the first line; this is the last).

    No foreign-key constraints: the triggers are the only writers and delete a pod's rows
    with it, and PostgreSQL's deferred FK checks on a cycle's ~20,000 new rows cost more at
    commit than the rest of the cycle's writes (bench/scheduler.py --db --profile)."""

    pod = models.ForeignKey(Pod, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    node = models.ForeignKey(
        "cluster.Node",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the unique (node, index) serves lookups by node
        related_name="+",
    )
    gpu_index = models.IntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "gpu_index"], name="held_gpu_once_per_node")
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} of node {self.node_id} held by pod {self.pod_id}"


class JobEvent(models.Model):
    """Append-only log of every status change and decision: the timeline and audit trail."""

    # No index of its own: jobevent_job_time (job, created_at) serves it (one index less to
    # write per event; a cycle writes thousands).
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)
    attempt = models.PositiveIntegerField(default=1)
    from_status = models.CharField(max_length=12, blank=True)
    to_status = models.CharField(max_length=12, blank=True)
    reason = CleanTextField(blank=True)
    actor = models.CharField(max_length=10, choices=_choices(Actor))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["job", "created_at"], name="jobevent_job_time"),
            # The dashboard's "recent failures and preemptions": newest first, few rows.
            models.Index(
                F("created_at").desc(),
                name="jobevent_trouble_recent",
                condition=Q(to_status__in=["Failed", "Preempted"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status or '∅'} → {self.to_status} ({self.reason})"


class LogChunk(models.Model):
    """Consecutive log lines [seq_start, seq_end] of one pod, stored once (docs/domain.md)."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.PositiveIntegerField()
    seq_start = models.PositiveBigIntegerField()
    seq_end = models.PositiveBigIntegerField()
    text = CleanTextField()
    # Sequence numbers of lines that continue on the next one without a newline: the
    # worker wrote one line longer than the agent's limit and the agent cut it. The raw
    # download joins them back, so it has the worker's lines whole.
    joins = models.JSONField(default=list, blank=True)
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
    path = models.CharField(max_length=limits.PATH)
    size_bytes = models.PositiveBigIntegerField(default=0)
    checksum = models.CharField(max_length=100, blank=True)
    committed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the agent's scan no longer found it (the SDK pruned it). The row stays (audit);
    # a pruned checkpoint is never resumed from.
    pruned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "-step"]
        constraints = [
            models.UniqueConstraint(fields=["job", "path"], name="checkpoint_unique_path")
        ]
        # Who recorded a path (jobs.actions.progress.store_checkpoints: another job's).
        indexes = [models.Index(fields=["path"], name="checkpoint_by_path")]

    def __str__(self) -> str:
        return f"{self.job_id} step {self.step}"


class RestartKind(models.TextChoices):
    FAILURE = "failure", "Failure"
    HANG = "hang", "Hang"
    PREEMPTION = "preemption", "Preemption"
    NODE_LOST = "node_lost", "Node lost"
    NODE_REFUSED = "node_refused", "Node refused"


class RestartRecord(models.Model):
    """One Automatic Fault Tolerance restart (like PAI's restart records): why, which worker
    on which node, and how long until the new attempt ran."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="restarts")
    from_attempt = models.PositiveIntegerField()
    to_attempt = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    kind = models.CharField(max_length=12, choices=RestartKind.choices)
    worker_rank = models.PositiveIntegerField(null=True, blank=True)
    node_name = FittedCharField(max_length=limits.NODE_NAME, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error_excerpt = CleanTextField(blank=True)
    rule = FittedCharField(max_length=limits.RULE, blank=True)
    reason = CleanTextField(blank=True)
    whole_job = models.BooleanField(default=True)  # False: Asynchronous, one worker only
    restarts_used = models.PositiveIntegerField(default=0)
    restarts_max = models.PositiveIntegerField(default=0)
    backoff_seconds = models.FloatField(default=0)
    running_at = models.DateTimeField(null=True, blank=True)  # the new attempt ran

    class Meta:
        ordering = ["job", "created_at", "id"]
        indexes = [models.Index(fields=["job", "to_attempt"], name="restart_job_attempt")]

    def __str__(self) -> str:
        return f"{self.job_id}: attempt {self.from_attempt} → {self.to_attempt} ({self.kind})"

    @property
    def restart_seconds(self) -> float | None:
        if self.running_at is None:
            return None
        return max((self.running_at - self.created_at).total_seconds(), 0.0)


class WorkerGpuSample(models.Model):
    """A running worker's GPU use over time (protocol.agent.GpuUsage), at the console's
    receive time."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="gpu_samples")
    at = models.DateTimeField()
    gpus = models.PositiveSmallIntegerField()
    utilization = models.PositiveSmallIntegerField(null=True)  # NULL: unknown (MIG)
    memory_used_mb = models.PositiveIntegerField()

    class Meta:
        ordering = ["pod", "at"]
        indexes = [models.Index(fields=["pod", "at"], name="gpu_sample_pod_at")]

    def __str__(self) -> str:
        util = "unknown" if self.utilization is None else f"{self.utilization}%"
        return f"pod {self.pod_id} at {self.at:%H:%M:%S}: {util}"


class ProgressSample(models.Model):
    """A worker's progress over time (each new step the SDK reports, at the console's
    receive time): the job page's progress, step-rate and metric charts."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="progress_samples")
    at = models.DateTimeField()
    step = models.BigIntegerField()
    total = models.BigIntegerField(null=True, blank=True)
    rate = models.FloatField(null=True, blank=True)  # steps/s since the previous step
    metrics = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["pod", "at"]
        indexes = [models.Index(fields=["pod", "at"], name="progress_sample_pod_at")]

    def __str__(self) -> str:
        return f"pod {self.pod_id} step {self.step} at {self.at:%H:%M:%S}"


# Usage history's tables live in their own module (this one would pass 500 lines).


class ChargeMove(models.Model):
    """A live pod's charge changed (a charge move, docs/quota-tree.md): what it was charged
    to until `at`. Usage history splits the pod's interval here (docs/usage-history.md)."""

    pod = models.ForeignKey("jobs.Pod", on_delete=models.CASCADE, related_name="charge_moves")
    at = models.DateTimeField()
    from_quota_id = models.IntegerField()
    from_in_quota = models.BooleanField()
    to_quota_id = models.IntegerField()
    to_in_quota = models.BooleanField()

    class Meta:
        indexes = [models.Index(fields=["pod", "at"], name="charge_move_pod_at")]

    def __str__(self) -> str:
        return f"pod {self.pod_id}: quota {self.from_quota_id} → {self.to_quota_id}"


# Counted results (docs/results.md): their tables live in their own module.
from jobs.result_models import AttemptFacts, ResultConflict, ResultUnit, RunRecord  # noqa: E402, F401
from jobs.template_models import JobTemplate  # noqa: E402, F401
