"""Request and response shapes of /api/v1/ (the OpenAPI document is generated from these).

Requests are strict about JSON types (no "2" for 2, no true for 1, no unknown fields: a
typo is an error, not a silent default). Everything beyond types — bounds, the user's
quotas and workspaces, whether a worker fits a node — is `jobs.admission`'s, the same
rules as the create page's; the limits the document shows (ranges, lengths, choices,
patterns) are the ones those rules read (`protocol.limits` via the job's shape), so the
document refuses nothing the rules accept.

A job's own fields come from its shape (`policy.jobspec.FIELDS`): `JobCreate` takes them,
`Job` shows them (`shown`), each with the JSON type of its kind.
"""

from copy import deepcopy
from typing import Annotated, Any

from ninja import Schema
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
)

from api.result_fields import RESULT_FIELDS
from api.schemas_workers import Progress, Rendezvous, Worker
from policy.admission import values
from policy.jobspec import FIELDS, JobField, Kind, shown_groups
from policy.statuses import JobStatus
from protocol import limits


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


# -- requests ------------------------------------------------------------------------------

# A field of the job's shape (policy.jobspec) in a request: its JSON type, by kind.
REQUEST_TYPES: dict[Kind, Any] = {
    Kind.REF: StrictInt | StrictStr,
    Kind.TEXT: StrictStr,
    Kind.INT: StrictInt,
    Kind.CHOICE: StrictStr,
    Kind.FLAG: StrictBool,
    Kind.ENV: dict[str, StrictStr] | StrictStr,
    Kind.DATA: dict[str, StrictStr] | StrictStr,
}


# An environment sent as an object (policy.admission.env): its variables' names and values.
ENV_OBJECT = {
    "maxProperties": limits.ENV_VARS,
    "propertyNames": {"pattern": limits.ENV_NAME_PATTERN},
    "additionalProperties": {"maxLength": limits.ENV_VALUE, "pattern": values.NO_NUL},
}


# Read-only data folders sent as an object: name → a folder of the workspace's area.
DATA_OBJECT = {
    "maxProperties": limits.DATA_MOUNTS,
    "propertyNames": {"pattern": limits.DATA_NAME_PATTERN},
    "additionalProperties": {"maxLength": limits.CHECKPOINT_DIR, "pattern": values.NO_NUL},
}


def field_limits(described: JobField) -> dict[str, dict[str, Any]]:
    """One field's limits as JSON Schema keywords, by the JSON type its value is sent as,
    from its kind and its description in the job's shape (bounds, lengths, choices,
    patterns: `protocol.limits`' numbers, which the admission rules read too)."""
    if described.kind is Kind.INT:
        low, high = described.bounds
        return {"integer": {"minimum": low, "maximum": high}}
    if described.kind is Kind.CHOICE:
        return {"string": {"enum": [choice.value for choice in described.choices]}}
    if described.kind is Kind.ENV:
        return {"object": ENV_OBJECT, "string": {"pattern": values.NO_NUL}}
    if described.kind is Kind.DATA:
        return {"object": DATA_OBJECT, "string": {"pattern": values.NO_NUL}}
    if described.kind in (Kind.TEXT, Kind.REF):
        text: dict[str, Any] = {"pattern": values.as_submitted(described.pattern)}
        if described.required:
            text["minLength"] = 1
        if described.max_length is not None:
            text["maxLength"] = described.max_length
        return {"string": text}
    return {}


def _merged(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merged(into[key], value)
        else:
            into[key] = deepcopy(value)


def with_limits(by_type: dict[str, dict[str, Any]]):
    """A `json_schema_extra` that writes each JSON type's limits into the member of that
    type (of `anyOf`, or the schema itself): never beside a null the API accepts."""

    def extra(schema: dict[str, Any]) -> None:
        for member in schema.get("anyOf", [schema]):
            _merged(member, by_type.get(member.get("type"), {}))

    return extra


def _request_field(described: JobField) -> tuple[Any, Any]:
    """(type, default) of one field: required ones have no default; the others are None
    when absent. Its limits are in the document (`field_limits`)."""
    kind, description = REQUEST_TYPES[described.kind], described.doc or None
    if described.kind is Kind.INT:
        low, high = described.bounds
        description = f"{described.doc} {low} to {high}.".strip()
    elif described.kind is Kind.CHOICE:
        description = described.doc  # even "": the document has always carried it
    default = ... if described.required else None
    extra = with_limits(field_limits(described))
    info = Field(default, description=description, json_schema_extra=extra)
    return (kind, info) if described.required else (kind | None, info)


JobCreate = create_model(
    "JobCreate",
    __base__=Strict,
    __doc__="A new job: the create page's fields, with the same names and rules.",
    **{f.name: _request_field(f) for f in FIELDS},
)


MAX_BATCH = 1000


class JobBatchCreate(Strict):
    """Independent jobs: each is validated on its own; the invalid ones are reported and
    the valid ones created."""

    # Any JSON value here, each validated as a JobCreate by the endpoint, item by item: one
    # of the wrong type, with an unknown field or not an object at all is refused alone.
    # The document still says JobCreate (api.main.ConsoleApi).
    jobs: list[Any] = Field(min_length=1, max_length=MAX_BATCH)


class JobArrayCreate(Strict):
    """`count` copies of one job (a sweep): job i gets ARRAY_INDEX=i and ARRAY_COUNT in its
    environment and the name "<name>-<i>". All are created, or none."""

    count: StrictInt = Field(json_schema_extra={"minimum": 1, "maximum": MAX_BATCH})
    job: JobCreate


# -- responses -----------------------------------------------------------------------------


class ErrorDetail(Schema):
    code: str = Field(description="Stable machine code, e.g. validation_error, not_found.")
    message: str
    field: str | None
    fields: dict[str, list[str]] | None = None


class ErrorBody(Schema):
    error: ErrorDetail


class NamedRef(Schema):
    id: int
    name: str


class Restart(Schema):
    from_attempt: int
    to_attempt: int
    at: str | None
    kind: str
    whole_job: bool
    worker_rank: int | None
    node: str | None
    exit_code: int | None
    error_excerpt: str
    rule: str
    reason: str
    restarts_used: int
    restarts_max: int
    backoff_seconds: float
    running_at: str | None
    restart_seconds: float | None


class Checkpoint(Schema):
    attempt: int
    step: int
    path: str
    size_bytes: int
    checksum: str
    committed: bool
    created_at: str | None
    pruned_at: str | None


class Event(Schema):
    id: int | None = None
    at: str | None
    attempt: int
    from_status: str | None
    to_status: str | None
    reason: str
    actor: str
    user: str | None


JobStatusName = Annotated[str, Field(json_schema_extra={"enum": [s.value for s in JobStatus]})]


class ExpectedStart(Schema):
    """Always an estimate: a what-if run of the scheduler's plan() from the current state."""

    estimate: bool = True
    at: str | None = Field(description="When the job is expected to start, if it can be said.")
    basis: str = Field(description="What the estimate rests on, or why there is none.")


# A field of the job's shape in the API's JSON of a job: its JSON type, by kind.
RESPONSE_TYPES: dict[Kind, Any] = {
    Kind.TEXT: str,
    Kind.INT: int,
    Kind.CHOICE: str,
    Kind.FLAG: bool,
    Kind.ENV: dict[str, str],
    Kind.DATA: dict[str, str],
}


def _shown_type(described: JobField) -> Any:
    kind = RESPONSE_TYPES[described.kind]
    return kind | None if described.default is None and described.kind is Kind.INT else kind


def _key(described: JobField) -> str:
    return described.shown.partition(".")[2]


# The objects gathering several fields ("fault_tolerance" → FaultTolerance).
GROUPS = {
    name: create_model(
        name.title().replace("_", ""),
        __base__=Schema,
        **{_key(f): (_shown_type(f), ...) for f in members},
    )
    for name, members in shown_groups().items()
}


def _shape_fields() -> dict[str, Any]:
    """The job's shape as the API shows it (policy.jobspec's `shown`), in its order."""
    shown: dict[str, Any] = {}
    for described in FIELDS:
        if described.shown is None:
            continue
        name = described.shown.partition(".")[0]
        shown.setdefault(
            name, (GROUPS[name], ...) if name in GROUPS else (_shown_type(described), ...)
        )
    return shown


Job = create_model(
    "Job",
    __base__=Schema,
    id=(int, ...),
    workspace=(NamedRef, ...),
    quota=(NamedRef, ...),
    owner=(str, ...),
    **_shape_fields(),
    status=(JobStatusName, ...),
    display_status=(str, ...),
    status_reason=(str, ...),
    # the reason shown with display_status (a stop under way)
    display_reason=(str, ""),
    stop_requested_at=(str | None, ...),
    queue_position=(int | None, ...),
    attempt=(int, ...),
    restart_count=(int, ...),
    exit_code=(int | None, ...),
    created_at=(str | None, ...),
    started_at=(str | None, ...),
    finished_at=(str | None, ...),
    cloned_from=(int | None, ...),
    preemption_count=(int, ...),
    node_loss_count=(int, ...),
    restart_not_before=(str | None, ...),
    hang_deadline=(str | None, ...),
    resume_from=(str, ...),
    excluded_nodes=(list[str], ...),
    roles=(dict[str, int], Field(description="How many workers have each role, rank 0's first.")),
    rendezvous=(Rendezvous | None, Field(None, description="The current attempt's rendezvous.")),
    **RESULT_FIELDS,  # counted results (docs/results.md)
    expected_start=(
        ExpectedStart | None,
        Field(None, description="For a waiting job: when it is expected to start (an estimate)."),
    ),
)


class JobDetail(Job):
    pods: list[Worker]
    restarts: list[Restart]
    events: list[Event]
    checkpoints: list[Checkpoint]


class JobPage(Schema):
    jobs: list[Job]
    next_cursor: str | None


class JobList(Schema):
    jobs: list[Job]


class BatchItemError(Schema):
    index: int
    error: ErrorDetail


class BatchResult(Schema):
    jobs: list[Job]
    errors: list[BatchItemError]


class LogLine(Schema):
    seq: int
    rank: int
    attempt: int
    text: str


class Logs(Schema):
    job: int
    rank: int
    attempt: int | None
    lines: list[LogLine]
    next_after: int
    complete: bool = Field(
        description="The job is final, this is the worker's last attempt, its agent said "
        "the worker's log ended (or its node was lost: see log_gap) and every line has been "
        "read."
    )
    log_gap: str = Field(
        "",
        description="Why this worker's log may lack its last lines (its node was lost), "
        "once its log has ended; empty when it is whole.",
    )
    worker_final: bool = Field(description="This worker of this attempt has ended.")
    newer_attempt: int | None = Field(
        description="A later attempt that has this rank: follow it next."
    )


class EventPage(Schema):
    events: list[Event]
    next_after: int | None


class RestartList(Schema):
    restarts: list[Restart]


class CheckpointList(Schema):
    checkpoints: list[Checkpoint]


class GpuSample(Schema):
    at: str
    gpus: int
    utilization: int
    memory_used_mb: int


class WorkerMetrics(Schema):
    rank: int
    attempt: int
    node: str | None
    status: str
    progress: Progress | None
    progress_rate: float | None
    gpu: list[GpuSample]


class Metrics(Schema):
    job: int
    attempt: int
    since: str
    workers: list[WorkerMetrics]


class QuotaUsage(Schema):
    """The scheduler's own numbers (the dashboard and the Quotas page show the same)."""

    size: int = Field(description="Guaranteed GPUs.")
    used: int = Field(
        description="GPUs charged to the quota: its own jobs and other quotas' idle jobs."
    )
    in_quota: int = Field(description="Of used: its own jobs' In Quota workers.")
    idle_own: int = Field(description="Of used: its own idle jobs' Not in Quota workers.")
    lent: int = Field(description="Of used: other quotas' idle jobs (reclaimable).")
    borrowed: int = Field(description="GPUs its jobs use of other quotas (not in used).")
    free: int = Field(description="own - used")
    starved: bool = Field(description="A job waits although the guarantee has room for it.")
    own: int = Field(description="Its own guarantee: size less its children's sizes.")
    subtree_used: int = Field(description="GPUs its subtree's jobs hold, in quota or borrowed.")
    subtree_lent: int = Field(description="GPUs of its subtree held by jobs from outside it.")
    subtree_borrowed: int = Field(description="GPUs its subtree's jobs hold outside it.")


class QueueSummary(Schema):
    waiting: int
    waiting_gpus: int
    mine: list[int] = Field(description="Positions of your waiting jobs, by job id order.")


class Quota(Schema):
    id: int
    name: str
    tenant: str
    resource_type: str
    gpu_type: str
    preemption: str
    parent: str | None = Field(description="The parent quota's name (None: a root).")
    own_gpus: int = Field(description="Its own guarantee: its GPUs less its children's.")
    max_gpus: int | None = Field(description="Limit on its subtree's jobs (None: no limit).")
    lending_limit: int | None = Field(description="Most its subtree lends out (None: all).")
    weight: float = Field(description="Its share of idle GPUs when quotas compete.")
    workspaces: list[str]
    usage: QuotaUsage
    queue: QueueSummary


class QuotaList(Schema):
    quotas: list[Quota]


class QueueEntry(Schema):
    position: int | None
    job: int | None = Field(description="The job id when it is in one of your workspaces.")
    name: str | None
    owner: str | None
    workspace: str
    status: str
    priority: int
    gpus: int
    submitted_at: str | None
    reason: str
    mine: bool


class Queue(Schema):
    quota: str
    jobs: list[QueueEntry]


class WhyPending(Schema):
    job: int
    status: str
    waiting: bool
    reason: str
    queue_position: int | None
    quota: str
    quota_usage: QuotaUsage
    needs_gpus: int
    expected_start: ExpectedStart


class Node(Schema):
    name: str
    state: str
    cordoned: bool
    resource_type: str
    gpu_type: str
    gpus: int
    used_gpus: int
    cpus: int
    memory_gb: int
    last_heartbeat_at: str | None


class NodeList(Schema):
    nodes: list[Node]


class Me(Schema):
    username: str
    is_admin: bool
    workspaces: list[str]
    quotas: list[str]
    rate_limit: str
