"""The agent protocol (docs/agent-protocol.md): pydantic schemas shared by the console and the
agent.

No Django imports: the agent imports this module on GPU nodes without the console.

Direction matters for strictness. Everything an agent sends is hostile input to the console:
unknown fields are rejected and every string and list is bounded. What the console sends back
ignores unknown fields, so a console upgraded before its agents can add reply fields without
breaking them (rolling upgrades), while known fields are still validated.

The protocol is level-triggered: every heartbeat carries the node's full picture (all workers
it knows, including exited ones not yet reported) and every reply carries the full desired
state, so a lost request or reply is repaired by the next one.
"""

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    model_serializer,
    model_validator,
)

from protocol import limits
from protocol.base import (
    Attempt,
    EnvName,
    EnvValue,
    ExitCode,
    HealthMark,
    NodeName,
    Percent,
    PodId,
    Seq,
    Tail,
    Text,
    _FromAgent,
    _FromConsole,
)
from protocol.logs import LogAck, LogBatch, LogLine, LogLines  # noqa: F401 - re-exported
from protocol.nodefacts import (  # noqa: F401 - re-exported
    MAX_MIG_INSTANCES,
    GpuReport,
    MigInstance,
    NodeFacts,
)
from protocol.text import fit, text_problem
from protocol.units import (  # noqa: F401
    ResumeIdentity,
    RunFacts,
    Sha256,
    UnitFile,
    UnitId,
    UnitReport,
    ValidatorReport,
)

# --- agent → console ---------------------------------------------------------------------


GpuUuid = Annotated[str, StringConstraints(pattern=r"^GPU-[A-Za-z0-9-]{1,90}$")]


class RegisterRequest(_FromAgent):
    """Sent with `Authorization: Bearer <bootstrap token>`."""

    name: NodeName
    facts: NodeFacts
    # Additive: a secret the agent draws before its first attempt and keeps until it is
    # registered; an attempt repeated after a lost reply carries it and gets the node its
    # first attempt made, not a 409 (docs/agent-protocol.md, "A registration repeated").
    registration_key: (
        Annotated[str, StringConstraints(pattern=limits.REGISTRATION_KEY_PATTERN)] | None
    ) = None


MetricName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")]


class ProgressReport(_FromAgent):
    """The newest progress the worker wrote through the SDK (agents.sdk.progress)."""

    step: Annotated[int, Field(ge=0, le=2**62)]
    total: Annotated[int, Field(ge=0, le=2**62)] | None = None
    phase: Text(limits.PHASE) = ""
    metrics: Annotated[
        dict[MetricName, Annotated[float, Field(allow_inf_nan=False)]],
        Field(max_length=limits.METRICS),
    ] = {}
    # Additive: when the worker reached this step, by its own clock (seconds since the epoch,
    # agents.sdk.progress). The step rate is measured on it: heartbeats come at irregular
    # times (a stop sends two in a second), which would turn one step into a spike.
    at: Annotated[float, Field(ge=0, le=2**40, allow_inf_nan=False)] | None = None


class CheckpointReport(_FromAgent):
    """A committed checkpoint (complete manifest) found in the job's checkpoint dir."""

    step: Annotated[int, Field(ge=0, le=2**62)]
    path: Annotated[str, StringConstraints(min_length=1, max_length=limits.PATH)]
    size_bytes: Annotated[int, Field(ge=0, le=2**62)] = 0
    checksum: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{0,100}$")] = ""
    attempt: Annotated[int, Field(ge=0, le=1_000_000)] | None = None  # from the manifest


class GpuUsage(_FromAgent):
    """A running worker's GPU use: its assigned devices as NVML last sampled them (the
    scheduler gives each device to one worker, so the devices' numbers are the worker's)."""

    gpus: Annotated[int, Field(ge=1, le=limits.GPUS)]
    utilization: Percent | None  # mean over its GPUs whose utilization is known; None: none is
    memory_used_mb: Annotated[int, Field(ge=0, le=10**9)]  # sum over its GPUs


AGENT_SHUTDOWN: Literal["agent_shutdown"] = "agent_shutdown"  # WorkerReport.ended_by
# The agent refused to start the worker on this node (not enough free space for its output,
# docs/results.md "Before a long run"): a node's condition, not the job's failure.
NODE_REFUSED: Literal["node_refused"] = "node_refused"
# The agent refused to resume a run whose code or program changed since its accepted units
# were made (protocol.units.resume_refusal): the job's condition, never retried.
RESUME_REFUSED: Literal["resume_refused"] = "resume_refused"
EndedBy = Literal["agent_shutdown", "node_refused", "resume_refused"]
ENDED_BY: tuple[str, ...] = (AGENT_SHUTDOWN, NODE_REFUSED, RESUME_REFUSED)


class WorkerReport(_FromAgent):
    pod_id: PodId
    attempt: Attempt
    state: Literal["running", "exited"]
    exit_code: ExitCode | None = None
    error: Tail(limits.ERROR_TAIL) = ""  # log tail
    container_id: Text(limits.CONTAINER_ID) = ""
    # Additive (fault tolerance): older agents send neither.
    progress: ProgressReport | None = None
    checkpoints: Annotated[
        list[CheckpointReport], Field(max_length=limits.CHECKPOINTS_REPORTED)
    ] = []
    gpu: GpuUsage | None = None  # additive (metrics): sent about twice a minute
    # Additive (log follow): an exited worker whose every log line the console has already
    # acknowledged, so a follower may stop at once instead of waiting for stragglers.
    logs_delivered: bool = False
    # Additive (node leaving): who ended an exited worker when its own exit does not tell.
    # "agent_shutdown": the agent stopped it because the agent itself is shutting down (a
    # graceful stop of the agent, e.g. SIGTERM): the node left, the job did nothing wrong
    # (docs/fault-tolerance.md, "A node leaving"). Sent only when set: an older console
    # refuses an unknown field.
    ended_by: EndedBy | None = None
    # Additive (results, docs/results.md): units accepted since the last delivered report,
    # and the worker's run facts. Sent only when there are some (an older console refuses
    # an unknown field).
    units: Annotated[list[UnitReport], Field(max_length=limits.RESULT_UNITS_REPORTED)] = []
    facts: RunFacts | None = None
    # Additive (results): the validator's outcome, on rank 0's exit when the job has one.
    validator: ValidatorReport | None = None

    @model_serializer(mode="wrap")
    def _additive_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if data.get("ended_by") is None:
            data.pop("ended_by", None)
        if not data.get("units"):
            data.pop("units", None)
        if data.get("facts") is None:
            data.pop("facts", None)
        if data.get("validator") is None:
            data.pop("validator", None)
        return data

    @model_validator(mode="after")
    def _exit_code_only_when_exited(self) -> "WorkerReport":
        if self.state == "running" and self.exit_code is not None:
            raise ValueError("a running worker has no exit code")
        if self.state == "running" and self.ended_by is not None:
            raise ValueError("a running worker has not ended")
        return self


class Heartbeat(_FromAgent):
    facts: NodeFacts
    workers: Annotated[list[WorkerReport], Field(max_length=limits.WORKERS)] = []
    # Additive (logs ride along): the last lines of workers that exited, sent only to a
    # console whose reply said `takes_logs`; stored before the reports, acked in
    # `HeartbeatReply.logs`. Same limits as a `LogBatch`.
    logs: Annotated[list[LogLines], Field(max_length=limits.STREAMS_PER_REQUEST)] = []

    @model_serializer(mode="wrap")
    def _no_empty_logs(self, handler: SerializerFunctionWrapHandler) -> dict:
        """Sent only when there are some: an older console refuses an unknown field."""
        data = handler(self)
        if not data.get("logs"):
            data.pop("logs", None)
        return data

    @model_validator(mode="after")
    def _unique_pods(self) -> "Heartbeat":
        ids = [w.pod_id for w in self.workers]
        if len(ids) != len(set(ids)):
            raise ValueError("each pod may be reported once per heartbeat")
        return self


# --- console → agent ---------------------------------------------------------------------


class RegisterResponse(_FromConsole):
    node_id: int
    node_token: str
    heartbeat_interval: float


def _runnable(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _image(value: str) -> str:
    # Image references (registry, repository, tag, digest) are printable ASCII.
    if not all("!" <= char <= "~" for char in value):
        raise ValueError("an image reference is printable ASCII, without spaces")
    return value


def _folder(value: str) -> str:
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError("a checkpoint folder cannot name '.' or '..'")
    return value


Image = Annotated[str, StringConstraints(max_length=limits.IMAGE), AfterValidator(_image)]
Command = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.COMMAND),
    AfterValidator(_runnable),
]
Env = Annotated[
    dict[EnvName, Annotated[EnvValue, AfterValidator(_runnable)]],
    Field(max_length=limits.ENV_VARS),
]
CheckpointSubdir = Annotated[
    str,
    StringConstraints(pattern=limits.CHECKPOINT_DIR_PATTERN, max_length=limits.CHECKPOINT_DIR),
    AfterValidator(_folder),
]


CodeRepo = Annotated[
    str, StringConstraints(pattern=r"^$|^[!-~]{1,500}$"), AfterValidator(_image)
]  # a git URL or a path on the node: printable ASCII
CodeRef = Annotated[str, StringConstraints(pattern=r"^$|^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")]


class JobRunSpec(_FromConsole):
    """The parts of a job every worker spec carries: what the agent refuses here it would
    refuse in a WorkerSpec, so the job form checks a submission with this (job_problems)."""

    image: Image
    command: Command
    env: Env = {}
    checkpoint_subdir: CheckpointSubdir = ""
    # Additive: read-only data folders, name → a folder of the workspace's area (confined
    # like the checkpoint folder; process runtime: its path in DATA_<NAME>; docker: a
    # read-only bind mount at /data/<name>).
    data: Annotated[
        dict[Annotated[str, StringConstraints(pattern=limits.DATA_NAME_PATTERN)], CheckpointSubdir],
        Field(max_length=limits.DATA_MOUNTS),
    ] = {}

    # Additive: the job's code, checked out by the agent (docs/distributed.md).
    code_repo: CodeRepo = ""
    code_ref: CodeRef = ""
    # Additive (results, docs/results.md): the validator command rank 0's agent runs after
    # the program exited 0, with RESULT_DIR set. Older agents ignore it.
    result_validator: Annotated[str, StringConstraints(max_length=limits.RESULT_VALIDATOR)] = ""
    # Additive (results): GB of free space the output folder needs before the start (None:
    # limits.OUTPUT_FREE_FLOOR_MB). Older agents ignore it.
    expected_output_gb: (
        Annotated[int, Field(ge=1, le=limits.JOB_BOUNDS["result_expected_output_gb"][1])] | None
    ) = None
    # Additive (results): the preflight's time limit (docs/results.md, "Before a long run"):
    # a run starting from nothing first runs the command with RUN_PREFLIGHT=1. Older agents
    # ignore it.
    preflight_seconds: (
        Annotated[int, Field(ge=1, le=limits.JOB_BOUNDS["result_preflight_seconds"][1])] | None
    ) = None
    # Additive (results): hash the data folders' content before the start into a manifest
    # (docs/results.md, "Run identity": RunFacts.inputs_sha256). Older agents ignore it.
    hash_inputs: bool = False
    # Additive (results, docs/results.md): the run's result folder, relative to the
    # workspace's area and confined like the checkpoint folder (empty: `output/result/` in
    # the checkpoint folder). Staging stays beside the checkpoint folder. Older agents
    # ignore it (the result_dir they report says where the result is).
    output_subdir: CheckpointSubdir = ""


class WorkerSpec(JobRunSpec):
    pod_id: PodId
    job_id: int
    attempt: Attempt
    rank: Annotated[int, Field(ge=0)]
    world_size: Annotated[int, Field(ge=1)]
    gpu_indices: Annotated[
        list[Annotated[int, Field(ge=0, lt=limits.GPUS)]], Field(max_length=limits.GPUS)
    ] = []
    # Additive: the UUIDs of those GPUs when the console placed the worker, in the same
    # order. The agent requests devices by UUID and refuses a launch whose index and UUID
    # no longer match (the GPU order changed). Empty from older consoles: the agent maps
    # the indices itself.
    gpu_uuids: Annotated[list[GpuUuid], Field(max_length=limits.GPUS)] = []
    cpus: Annotated[int, Field(ge=0)] = 0
    memory_gb: Annotated[int, Field(ge=0)] = 0
    log_next_seq: Seq = 0
    # Additive (fault tolerance): where the worker resumes from (newest committed checkpoint
    # when its attempt was created) and its checkpoint folder, relative to its workspace's
    # area of the agent's checkpoint root (empty: job-<job id>). Older agents ignore them.
    resume_from: Annotated[str, StringConstraints(max_length=limits.PATH)] = ""
    # Additive (isolation): whose checkpoint area the worker's folder is in. 0 (an older
    # console): the folder is directly under the checkpoint root, as before.
    workspace_id: Annotated[int, Field(ge=0, le=2**62)] = 0
    # Additive (distributed jobs, docs/distributed.md): the variables that let the job's
    # workers meet (MASTER_ADDR/PORT of this attempt, NNODES, NODE_RANK, PET_*, TF_CONFIG,
    # OMPI_*…), set by the agent over its own defaults. Empty from an older console.
    rendezvous: Env = {}
    # Additive (results, docs/results.md): the run whose accepted units this worker carries;
    # the agent refuses the start when the code or program changed since (resume_refusal).
    resume_identity: ResumeIdentity | None = None


def job_problems(**fields: Any) -> dict[str, str]:
    """What an agent would refuse in a job's image, command, env or checkpoint folder:
    {field: message}, empty when it would take them."""
    try:
        JobRunSpec.model_validate(fields)
    except ValidationError as exc:
        problems: dict[str, str] = {}
        for error in exc.errors(include_input=False, include_url=False):
            field = str(error["loc"][0]) if error["loc"] else "__all__"
            problems.setdefault(field, _message(error, skip=1))
        return problems
    return {}


def _message(error, skip: int = 0) -> str:
    """A pydantic error as one line, without the input, long keys shortened."""
    where = ".".join(
        (part[:40] + "…" if len(part) > 40 else part) if isinstance(part, str) else str(part)
        for part in error["loc"][skip:]
    )
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def error_reason(exc: ValidationError) -> str:
    """The first error of a validation failure as a reason that fits a reason column."""
    errors = exc.errors(include_input=False, include_url=False)
    return fit(_message(errors[0]) if errors else "invalid", limits.REASON)

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


class UnusableSpec(_FromConsole):
    """A worker spec in the console's reply that this agent cannot use (it names its pod):
    the agent reports that worker ended with the reason instead of failing the reply."""

    pod_id: int
    attempt: int
    reason: str


def _pod_ids(item: Any) -> tuple[int, int] | None:
    if not isinstance(item, dict):
        return None
    pod_id, attempt = item.get("pod_id"), item.get("attempt")
    if type(pod_id) is not int or type(attempt) is not int or pod_id < 1 or attempt < 1:
        return None
    return pod_id, attempt


class HeartbeatReply(_FromConsole):
    heartbeat_interval: float
    run: list[WorkerSpec] = []
    stop: list[StopOrder] = []
    clear_health_marks: list[ClearHealthMark] = []  # additive; repeated until no longer reported
    # Additive (isolation): pod id → why the console refused (or repaired) that worker's
    # report in the heartbeat. The agent counts refusals and sets a report aside after
    # limits.REFUSALS_BEFORE_SET_ASIDE.
    refused: dict[int, str] = {}
    # Additive (fencing): how long after this heartbeat was sent the node's workers may run
    # without another applied heartbeat, and the grace between SIGTERM and SIGKILL then.
    # None (an older console): no fence.
    lease_seconds: Annotated[float, Field(gt=0, le=86_400)] | None = None
    fence_grace: Annotated[float, Field(ge=0, le=3600)] = 0.0
    # Additive (wake): a short token of the node's desired state as this reply saw it.
    # The agent holds `wait/` open with it, and the console answers as soon as the desired
    # state differs (a pod placed, a stop requested). None (an older console): no waking.
    desired_version: Annotated[str, StringConstraints(max_length=limits.DESIRED_VERSION)] | None = (
        None
    )
    # Additive (logs ride along): this console stores log lines sent in a heartbeat
    # (`Heartbeat.logs`), and `logs` acknowledges the ones this heartbeat carried (None:
    # it carried none). An older console sends neither: the agent ships them alone.
    takes_logs: bool = False
    logs: LogAck | None = None
    # Additive (end of stream): this console takes `LogLines.end`, the agent's word that a
    # worker's log is complete. An older console omits it: the agent never sends `end`.
    log_end: bool = False
    # Filled while parsing (never sent): run items this agent cannot use.
    unusable: Annotated[list[UnusableSpec], Field(exclude=True)] = []

    @model_validator(mode="before")
    @classmethod
    def _each_item_alone(cls, data: Any) -> Any:
        """One spec the agent cannot use must not make the whole reply unusable (the node
        would stop converging): it is set aside with its reason, and so is a bad stop."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        unusable: list[dict] = []
        for key, model in (("run", WorkerSpec), ("stop", StopOrder)):
            items = data.get(key)
            if not isinstance(items, list):
                continue
            usable = []
            for item in items:
                try:
                    model.model_validate(item)
                except ValidationError as exc:
                    ids = _pod_ids(item)
                    if key == "run" and ids is not None:
                        unusable.append(
                            {"pod_id": ids[0], "attempt": ids[1], "reason": error_reason(exc)}
                        )
                    continue
                usable.append(item)
            data[key] = usable
        data["unusable"] = unusable
        return data


class WaitRequest(_FromAgent):
    """Hold the request until the node's desired state differs from `known` (the
    `desired_version` of the last heartbeat reply), or at most `timeout` seconds."""

    known: Annotated[str, StringConstraints(max_length=limits.DESIRED_VERSION)]
    timeout: Annotated[float, Field(ge=0, le=limits.WAIT_TIMEOUT)] = limits.WAIT_TIMEOUT


class WaitReply(_FromConsole):
    # True: the desired state changed, heartbeat now. False: nothing changed in `timeout`.
    changed: bool
    # Set when the console cannot hold the request now (all its wait slots taken): the
    # agent waits this long before asking again (six heartbeat intervals; its heartbeats go
    # on meanwhile and learn of new work).
    retry_after: Annotated[float, Field(ge=0, le=3600)] | None = None
    # Additive: the token that differed from `known` (None: unchanged, or an older
    # console). An agent whose heartbeat reply already carried it knows that state (the
    # change was its own exits) and waits again instead of sending a heartbeat for nothing.
    desired_version: Annotated[str, StringConstraints(max_length=limits.DESIRED_VERSION)] | None = (
        None
    )


class ErrorBody(_FromConsole):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(_FromConsole):
    error: ErrorBody
