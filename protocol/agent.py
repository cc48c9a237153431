"""The agent protocol (DESIGN §7): pydantic schemas shared by the console and the agent.

No Django imports: the agent imports this module on GPU nodes without the console.

Direction matters for strictness. Everything an agent sends is hostile input to the console:
unknown fields are rejected and every string and list is bounded. What the console sends back
ignores unknown fields, so a console upgraded before its agents can add reply fields without
breaking them (rolling upgrades), while known fields are still validated.

The protocol is level-triggered: every heartbeat carries the node's full picture (all workers
it knows, including exited ones not yet reported) and every reply carries the full desired
state, so a lost request or reply is repaired by the next one.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

PROTOCOL_VERSION = 1
# The longest log line the console stores; the agent splits longer output at 16 KiB of bytes,
# which decodes to at most 16 KiB of characters plus a few carried-over bytes.
MAX_LOG_LINE = 32 * 1024
MAX_LINES_PER_BATCH = 1000
MAX_LINES_PER_REQUEST = 10_000
MAX_GPUS = 64
MAX_WORKERS = 1024
MAX_ERROR_TAIL = 8000

# Mirrors quotas.models.ResourceType (kept Django-free; a test checks they agree).
ResourceTypeName = Literal["General-purpose", "Lingjun"]
RuntimeName = Literal["process", "docker"]

NodeName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", max_length=200)
]
Short = Annotated[str, StringConstraints(max_length=200)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")]
PodId = Annotated[int, Field(ge=1, le=2**62)]
Attempt = Annotated[int, Field(ge=1, le=1_000_000)]
Seq = Annotated[int, Field(ge=0, le=2**62)]
ExitCode = Annotated[int, Field(ge=-1024, le=1024)]


class _FromAgent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _FromConsole(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# --- agent → console ---------------------------------------------------------------------


MAX_MIG_INSTANCES = 16
GpuUuid = Annotated[str, StringConstraints(pattern=r"^GPU-[A-Za-z0-9-]{1,90}$")]
# An agent's health mark: when it was set (ms since the epoch), so ids never repeat across
# agent restarts; 0 = no mark the operator can clear.
HealthMark = Annotated[int, Field(ge=0, le=2**62)]
Percent = Annotated[int, Field(ge=0, le=100)]


class MigInstance(_FromAgent):
    """One MIG device of a GPU in MIG mode (what CUDA in a container would see)."""

    uuid: Annotated[str, StringConstraints(max_length=100)] = ""
    name: Annotated[str, StringConstraints(max_length=100)] = ""
    memory_total_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    memory_used_mb: Annotated[int, Field(ge=0, le=10**8)] = 0


class GpuReport(_FromAgent):
    index: Annotated[int, Field(ge=0, lt=MAX_GPUS)]
    uuid: Annotated[str, StringConstraints(max_length=100)] = ""
    name: Annotated[str, StringConstraints(max_length=100)] = ""
    memory_total_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    memory_used_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    utilization: Percent | None = 0  # None: unknown (MIG mode, or NVML could not say)
    temperature: Annotated[int, Field(ge=-100, le=300)] | None = None
    power_watts: Annotated[float, Field(ge=0, le=100_000)] | None = None
    ecc_errors: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    healthy: bool = True
    health_reason: Short = ""
    # Additive (real GPU nodes): older agents send none of these.
    health_mark: HealthMark = 0  # an Xid mark the operator may clear (HeartbeatReply)
    pci_bus_id: Annotated[str, StringConstraints(max_length=32)] = ""
    mig_enabled: bool = False
    mig_instances: Annotated[list[MigInstance], Field(max_length=MAX_MIG_INSTANCES)] = []


class NodeFacts(_FromAgent):
    hostname: Annotated[str, StringConstraints(max_length=255)] = ""
    agent_version: Annotated[str, StringConstraints(max_length=40)] = ""
    runtime: RuntimeName = "process"
    resource_type: ResourceTypeName = "Lingjun"
    gpu_type: Annotated[str, StringConstraints(max_length=40)] = ""
    cpus: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    memory_gb: Annotated[int, Field(ge=0, le=10**7)] = 0
    gpus: Annotated[list[GpuReport], Field(max_length=MAX_GPUS)] = []

    @model_validator(mode="after")
    def _unique_indices(self) -> "NodeFacts":
        indices = [g.index for g in self.gpus]
        if len(indices) != len(set(indices)):
            raise ValueError("GPU indices must be unique")
        return self


class RegisterRequest(_FromAgent):
    """Sent with `Authorization: Bearer <bootstrap token>`."""

    name: NodeName
    facts: NodeFacts


MAX_CHECKPOINTS_REPORTED = 8
MetricName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")]


class ProgressReport(_FromAgent):
    """The newest progress the worker wrote through the SDK (agents.sdk.progress)."""

    step: Annotated[int, Field(ge=0, le=2**62)]
    total: Annotated[int, Field(ge=0, le=2**62)] | None = None
    phase: Annotated[str, StringConstraints(max_length=100)] = ""
    metrics: Annotated[
        dict[MetricName, Annotated[float, Field(allow_inf_nan=False)]], Field(max_length=32)
    ] = {}


class CheckpointReport(_FromAgent):
    """A committed checkpoint (complete manifest) found in the job's checkpoint dir."""

    step: Annotated[int, Field(ge=0, le=2**62)]
    path: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    size_bytes: Annotated[int, Field(ge=0, le=2**62)] = 0
    checksum: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{0,100}$")] = ""
    attempt: Annotated[int, Field(ge=0, le=1_000_000)] | None = None  # from the manifest


class GpuUsage(_FromAgent):
    """A running worker's GPU use: its assigned devices as NVML last sampled them (the
    scheduler gives each device to one worker, so the devices' numbers are the worker's)."""

    gpus: Annotated[int, Field(ge=1, le=MAX_GPUS)]
    utilization: Percent | None  # mean over its GPUs whose utilization is known; None: none is
    memory_used_mb: Annotated[int, Field(ge=0, le=10**9)]  # sum over its GPUs


class WorkerReport(_FromAgent):
    pod_id: PodId
    attempt: Attempt
    state: Literal["running", "exited"]
    exit_code: ExitCode | None = None
    error: Annotated[str, StringConstraints(max_length=MAX_ERROR_TAIL)] = ""  # log tail
    container_id: Annotated[str, StringConstraints(max_length=100)] = ""
    # Additive (fault tolerance): older agents send neither.
    progress: ProgressReport | None = None
    checkpoints: Annotated[list[CheckpointReport], Field(max_length=MAX_CHECKPOINTS_REPORTED)] = []
    gpu: GpuUsage | None = None  # additive (metrics): sent about twice a minute

    @model_validator(mode="after")
    def _exit_code_only_when_exited(self) -> "WorkerReport":
        if self.state == "running" and self.exit_code is not None:
            raise ValueError("a running worker has no exit code")
        return self


class Heartbeat(_FromAgent):
    facts: NodeFacts
    workers: Annotated[list[WorkerReport], Field(max_length=MAX_WORKERS)] = []

    @model_validator(mode="after")
    def _unique_pods(self) -> "Heartbeat":
        ids = [w.pod_id for w in self.workers]
        if len(ids) != len(set(ids)):
            raise ValueError("each pod may be reported once per heartbeat")
        return self


LogLine = Annotated[str, StringConstraints(max_length=MAX_LOG_LINE)]


class LogLines(_FromAgent):
    """Consecutive lines of one worker: line i has sequence number first_seq + i."""

    pod_id: PodId
    attempt: Attempt
    first_seq: Seq
    lines: Annotated[list[LogLine], Field(min_length=1, max_length=MAX_LINES_PER_BATCH)]
    # Indices of lines that continue on the next one: the worker wrote them as one line,
    # longer than the agent's line limit, and the agent cut it (additive: older agents send
    # none). The raw log joins them again without a newline.
    continued: Annotated[list[int], Field(max_length=MAX_LINES_PER_BATCH)] = []

    @model_validator(mode="after")
    def _no_newlines(self) -> "LogLines":
        if any("\n" in line for line in self.lines):
            raise ValueError("a log line may not contain a newline")
        if self.continued != sorted(set(self.continued)) or any(
            not 0 <= i < len(self.lines) for i in self.continued
        ):
            raise ValueError("continued must be increasing indices of this batch's lines")
        return self


class LogBatch(_FromAgent):
    batches: Annotated[list[LogLines], Field(min_length=1, max_length=256)]

    @model_validator(mode="after")
    def _bounded(self) -> "LogBatch":
        if sum(len(b.lines) for b in self.batches) > MAX_LINES_PER_REQUEST:
            raise ValueError(f"at most {MAX_LINES_PER_REQUEST} lines per request")
        return self


# --- console → agent ---------------------------------------------------------------------


class RegisterResponse(_FromConsole):
    node_id: int
    node_token: str
    heartbeat_interval: float


class WorkerSpec(_FromConsole):
    pod_id: PodId
    job_id: int
    attempt: Attempt
    rank: Annotated[int, Field(ge=0)]
    world_size: Annotated[int, Field(ge=1)]
    image: Annotated[str, StringConstraints(max_length=500)]
    command: Annotated[str, StringConstraints(min_length=1, max_length=100_000)]
    env: Annotated[
        dict[EnvName, Annotated[str, StringConstraints(max_length=32_768)]], Field(max_length=512)
    ] = {}
    gpu_indices: Annotated[
        list[Annotated[int, Field(ge=0, lt=MAX_GPUS)]], Field(max_length=MAX_GPUS)
    ] = []
    # Additive: the UUIDs of those GPUs when the console placed the worker, in the same
    # order. The agent requests devices by UUID and refuses a launch whose index and UUID
    # no longer match (the GPU order changed). Empty from older consoles: the agent maps
    # the indices itself.
    gpu_uuids: Annotated[list[GpuUuid], Field(max_length=MAX_GPUS)] = []
    cpus: Annotated[int, Field(ge=0)] = 0
    memory_gb: Annotated[int, Field(ge=0)] = 0
    log_next_seq: Seq = 0
    # Additive (fault tolerance): where the worker resumes from (newest committed checkpoint
    # when its attempt was created) and its checkpoint folder under the agent's checkpoint
    # root (empty: job-<job id>). Older agents ignore both.
    resume_from: Annotated[str, StringConstraints(max_length=1000)] = ""
    checkpoint_subdir: Annotated[
        str, StringConstraints(pattern=r"^$|^[A-Za-z0-9_.-]{1,100}(/[A-Za-z0-9_.-]{1,100}){0,7}$")
    ] = ""

    @model_validator(mode="after")
    def _uuids_match_indices(self) -> "WorkerSpec":
        if self.gpu_uuids and len(self.gpu_uuids) != len(self.gpu_indices):
            raise ValueError("gpu_uuids must name the same GPUs as gpu_indices")
        return self


class StopOrder(_FromConsole):
    pod_id: PodId
    attempt: Attempt
    grace_seconds: Annotated[float, Field(ge=0, le=86_400)]
    reason: str = ""


class ClearHealthMark(_FromConsole):
    """An operator cleared this GPU's health mark in the console: the agent drops the mark
    if it is still that one (or older), never a newer one set since."""

    uuid: str
    mark: HealthMark


class HeartbeatReply(_FromConsole):
    heartbeat_interval: float
    run: list[WorkerSpec] = []
    stop: list[StopOrder] = []
    clear_health_marks: list[ClearHealthMark] = []  # additive; repeated until no longer reported


class LogAck(_FromConsole):
    # pod_id → the next sequence number the console expects (everything below is stored).
    acks: dict[int, int] = {}
    # pod_id → why the console will never accept lines for it (not this node's pod, stale
    # attempt, unknown pod): the agent drops them instead of re-sending forever.
    rejected: dict[int, str] = {}


class ErrorBody(_FromConsole):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(_FromConsole):
    error: ErrorBody
