"""The cluster's inventory: GPU nodes and their devices (docs/domain.md).

Written by the agent API (agents.actions) from each node's heartbeats and by operators
(cordon, drain); read by the scheduler. Nothing here knows about jobs.
"""

from django.db import models
from django.db.models import Q

from protocol import limits
from quotas.models import ResourceType


class NodeState(models.TextChoices):
    READY = "Ready", "Ready"
    NOT_READY = "NotReady", "NotReady"
    LOST = "Lost", "Lost"


# The nodes a job's admission counts (jobs.admission.facts): Ready or NotReady, not Lost.
POOL_STATES = (NodeState.READY, NodeState.NOT_READY)
# What admission reads of each such node: a change of any makes its cached facts stale.
POOL_FIELDS = ("resource_type", "gpu_type", "gpus", "cpus", "memory_gb")


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
    # A drain: cordoned so that the work running here finishes and nothing new comes; the
    # node is drained once no live worker is left on it.
    drain_requested_at = models.DateTimeField(null=True, blank=True)
    runtime = models.CharField(max_length=20, default="process")
    # Where the node's peers reach it (docs/distributed.md): what its agent advertises, else
    # the address it registered from; and the ports it lends to rendezvous, inclusive.
    address = models.CharField(max_length=limits.ADDRESS, blank=True)
    rendezvous_port_first = models.PositiveIntegerField(default=limits.RENDEZVOUS_PORTS[0])
    rendezvous_port_last = models.PositiveIntegerField(default=limits.RENDEZVOUS_PORTS[1])
    agent_version = models.CharField(max_length=40, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # A digest of the facts and GPUs the last applied heartbeat reported
    # (agents.decisions.report_digest): a heartbeat reporting the same is one UPDATE of the
    # times below, compared in SQL (cluster.actions.note_node_seen). Empty: write them all.
    report_digest = models.CharField(max_length=64, blank=True)
    # Console receive time + NODE_NOT_READY_AFTER; the node monitor selects `< now`.
    heartbeat_deadline = models.DateTimeField(null=True, blank=True)
    token_prefix = models.CharField(max_length=8, unique=True, null=True, blank=True)
    token_digest = models.CharField(max_length=64, blank=True)
    token_revoked_at = models.DateTimeField(null=True, blank=True)
    # An operator allowed the next registration of this name to replace its token (admin
    # action "Allow re-registration"); cleared by that registration.
    reregistration_allowed_at = models.DateTimeField(null=True, blank=True)
    # sha256 of the key its last registration carried (RegisterRequest.registration_key): the
    # same key repeated soon after, by the same bootstrap token, is that registration's
    # retry after a lost reply, not a takeover (docs/agent-protocol.md).
    registration_key_digest = models.CharField(max_length=64, blank=True)
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
    # NULL: unknown (MIG mode, NVML could not read it, not reported), never "idle".
    utilization = models.PositiveSmallIntegerField(default=0, null=True, blank=True)
    temperature = models.SmallIntegerField(null=True, blank=True)
    power_watts = models.FloatField(null=True, blank=True)
    ecc_errors = models.PositiveIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    health_reason = models.CharField(max_length=200, blank=True)
    # The agent's current Xid mark on this GPU (0: none), and the newest mark an operator
    # cleared: the heartbeat reply asks the agent to drop a mark while cleared >= mark.
    health_mark = models.BigIntegerField(default=0)
    health_cleared_mark = models.BigIntegerField(default=0)
    health_cleared_at = models.DateTimeField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    # A GPU in MIG mode is split into MIG devices (listed as the agent reported them); the
    # scheduler, which places whole GPUs, leaves it alone.
    mig_enabled = models.BooleanField(default=False)
    mig_instances = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"
