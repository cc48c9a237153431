"""GPU nodes, their devices, and the tokens agents authenticate with (DESIGN §3, §7)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from quotas.models import ResourceType


class NodeState(models.TextChoices):
    READY = "Ready", "Ready"
    NOT_READY = "NotReady", "NotReady"
    LOST = "Lost", "Lost"


class Node(models.Model):
    name = models.CharField(max_length=200, unique=True)
    resource_type = models.CharField(
        max_length=20, choices=ResourceType.choices, default=ResourceType.LINGJUN
    )
    gpu_type = models.CharField(max_length=40, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    memory_gb = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=10, choices=NodeState.choices, default=NodeState.READY)
    cordoned = models.BooleanField(default=False, help_text="No new work is placed here")
    runtime = models.CharField(max_length=20, default="process")
    agent_version = models.CharField(max_length=40, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Console receive time + NODE_NOT_READY_AFTER; the node monitor selects `< now`.
    heartbeat_deadline = models.DateTimeField(null=True, blank=True)
    token_prefix = models.CharField(max_length=8, unique=True, null=True, blank=True)
    token_digest = models.CharField(max_length=64, blank=True)
    token_revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=0), name="node_gpus_non_negative"),
        ]
        indexes = [
            models.Index(
                fields=["heartbeat_deadline"],
                condition=Q(state="Ready"),
                name="node_ready_deadline",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.state == NodeState.READY and not self.cordoned


class GpuDevice(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100, blank=True)
    memory_total_mb = models.PositiveIntegerField(default=0)
    memory_used_mb = models.PositiveIntegerField(default=0)
    utilization = models.PositiveSmallIntegerField(default=0)
    temperature = models.SmallIntegerField(null=True, blank=True)
    power_watts = models.FloatField(null=True, blank=True)
    ecc_errors = models.PositiveIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    health_reason = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class BootstrapToken(models.Model):
    """Lets a new agent register once; shown once to the admin who creates it."""

    note = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=8, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    single_use = models.BooleanField(default=True)
    used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bootstrap {self.prefix} ({self.note})"


class WorkerGpuSample(models.Model):
    """A running worker's GPU use over time (agents.protocol.GpuUsage), at the console's
    receive time."""

    pod = models.ForeignKey("jobs.Pod", on_delete=models.CASCADE, related_name="gpu_samples")
    at = models.DateTimeField()
    gpus = models.PositiveSmallIntegerField()
    utilization = models.PositiveSmallIntegerField()
    memory_used_mb = models.PositiveIntegerField()

    class Meta:
        ordering = ["pod", "at"]
        indexes = [models.Index(fields=["pod", "at"], name="gpu_sample_pod_at")]

    def __str__(self) -> str:
        return f"pod {self.pod_id} at {self.at:%H:%M:%S}: {self.utilization}%"
