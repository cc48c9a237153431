"""The job's shape (docs/job-shape.md): every field a researcher submits, written once.

`FIELDS` describes each field — its kind, label and help, the API's description, default,
choices, limits (the numbers and patterns themselves are `protocol.limits`'), its own rule,
the job row's column that stores it, where the API's JSON of a job shows it, whether a clone
copies it, the worker spec's field that carries it to the agent, and the create page's
section that shows it (`PAGE`). Everything else is built from these:

- `JobSpec`, the plain value a new job is written from (one attribute per stored column),
  with JSON in (`from_json`: the fields as submitted → a spec and the problems of each
  field) and out (`to_json`: what the API shows; `to_fields`: the fields that would submit
  it again; `worker_fields`: what each worker spec carries);
- the admission rules' field-by-field reading (`clean`, then `policy.admission.rules`
  checks the job as a whole against its quota and nodes);
- the create page's form (`web.forms`), the API's request and response schemas
  (`api.schemas`), the API's JSON of a job (`api.serializers`), the worker specs
  (`agents.actions`, `kube.controller`) and the simulator's job defaults
  (`simulator.scenario`).

The command line (`cli/`) imports nothing of ours: it passes a job file's fields on to the
API, which reads them with these. Django-free: plain values in and out.
"""

from collections.abc import Mapping
from dataclasses import field, make_dataclass
from enum import StrEnum
from typing import Any

from policy.admission import values
from policy.admission.values import Problem
from policy.faulttolerance.policy import HangAction, RestartPolicy, RunType
from policy.jobfield import JobField, Kind
from policy.jobspec_result import RESULT_FIELDS
from policy.rendezvous import Framework
from policy.statuses import IdleResources
from protocol import limits


def _ft(key: str) -> dict[str, str]:
    """Automatic Fault Tolerance's settings: a key of `Job.ft_config` (read by
    `policy.faulttolerance.policy.FtConfig.from_job`), shown in the API's "fault_tolerance"."""
    return {
        "section": FAULT_TOLERANCE,
        "stored": f"ft_config.{key}",
        "shown": f"fault_tolerance.{key}",
    }


def _distributed(key: str) -> dict[str, str]:
    """How the workers meet (policy.rendezvous.Shape): a key of `Job.distributed`, shown in
    the API's "distributed" (docs/distributed.md)."""
    return {"section": DISTRIBUTED, "stored": f"distributed.{key}", "shown": f"distributed.{key}"}


BASICS, RESOURCES, IDLE, DISTRIBUTED = ("Basics", "Resources", "Idle Resources", "Distributed")
FAULT_TOLERANCE, ADVANCED = "Automatic Fault Tolerance", "Advanced"
# In the order their problems are listed (the page's layout: `PAGE`).
# fmt: off
FIELDS: tuple[JobField, ...] = (
    JobField(
        "quota", Kind.REF, "Quota", section=BASICS, required=True, stored=None, shown=None,
        help="The quota the job runs against.", doc="Quota name or id.",
    ),
    JobField(
        "workspace", Kind.REF, "Workspace", section=BASICS, stored=None, shown=None,
        help="Only needed when the quota is bound to several of your workspaces.",
        doc="Needed only when the quota is bound to several of your workspaces.",
    ),
    JobField(
        "name", Kind.TEXT, "Name", section=BASICS, max_length=limits.JOB_NAME,
        check=values.name, help="Defaults to the image.", doc="Defaults to the image's name.",
    ),
    JobField(
        "image", Kind.TEXT, "Image", section=BASICS, required=True, max_length=limits.IMAGE,
        check=values.image, pattern=limits.IMAGE_PATTERN, worker="image",
    ),
    JobField(
        "command", Kind.TEXT, "Command", section=BASICS, required=True,
        max_length=limits.COMMAND, check=values.command, rows=3, worker="command",
    ),
    JobField(
        "workers", Kind.INT, "Workers", section=RESOURCES, default=1,
        bounds=limits.JOB_BOUNDS["workers"], doc="Workers,",
    ),
    JobField(
        "gpus_per_worker", Kind.INT, "GPUs per worker", section=RESOURCES, default=1,
        bounds=limits.JOB_BOUNDS["gpus_per_worker"], doc="GPUs per worker,",
    ),
    JobField(
        "cpus_per_worker", Kind.INT, "CPUs per worker", section=RESOURCES, default=4,
        bounds=limits.JOB_BOUNDS["cpus_per_worker"], doc="CPUs per worker,",
    ),
    JobField(
        "memory_gb_per_worker", Kind.INT, "Memory (GB) per worker", section=RESOURCES,
        default=16, bounds=limits.JOB_BOUNDS["memory_gb_per_worker"], doc="GB per worker,",
    ),
    JobField(
        "priority", Kind.INT, "Priority", section=IDLE, default=1,
        bounds=limits.JOB_BOUNDS["priority"], help="1 (lowest) to 9 (highest).", doc="Priority,",
    ),
    JobField(
        "idle_resources", Kind.CHOICE, "Idle resources", section=IDLE, choices=IdleResources,
        default=IdleResources.OFF,
    ),
    JobField(
        "framework", Kind.CHOICE, "Framework", choices=Framework, default=Framework.GENERIC,
        help="generic: RANK, WORLD_SIZE, MASTER_ADDR/PORT; pytorch: torchrun's variables; "
        "mpi: rank 0 launches mpirun over MPI_HOSTS; tensorflow: TF_CONFIG.",
        **_distributed("framework"),
    ),
    JobField(
        "nproc_per_node", Kind.INT, "Processes per worker", default=0,
        bounds=limits.NPROC_PER_NODE, help="torchrun's --nproc_per_node; 0: one per GPU.",
        doc="Processes per worker (0: one per GPU),", **_distributed("nproc_per_node"),
    ),
    JobField(
        "ps_workers", Kind.INT, "Parameter servers", default=0, bounds=limits.PS_WORKERS,
        help="tensorflow: how many workers after the chief are parameter servers.",
        doc="TensorFlow parameter servers,", **_distributed("ps_workers"),
    ),
    JobField(
        "env", Kind.ENV, "Environment", section=ADVANCED, rows=4,
        placeholder="KEY=VALUE, one per line", worker="env",
        doc=f"An object of strings, or KEY=VALUE lines; at most {limits.ENV_VARS}.",
    ),
    JobField(
        "data", Kind.DATA, "Data (read-only)", section=ADVANCED, rows=2,
        placeholder="name=folder, one per line", worker="data",
        help="Folders of your workspace's area, mounted read-only; the worker finds each in "
        "DATA_<NAME>.",
        doc=f"An object name → folder of your workspace's area, or name=folder lines; at most "
        f"{limits.DATA_MOUNTS}, mounted read-only.",
    ),
    JobField(
        "code_repo", Kind.TEXT, "Code repository", section=ADVANCED, default="",
        max_length=limits.CODE_REPO, check=values.code_repo, pattern=limits.CODE_REPO_PATTERN,
        stored="code.repo", shown="code.repo", worker="code_repo",
        help="A git repository the nodes reach (URL or path); checked out into CODE_DIR.",
        doc="A git repository the nodes reach; the agent checks it out into CODE_DIR.",
    ),
    JobField(
        "code_ref", Kind.TEXT, "Commit or branch", section=ADVANCED, default="",
        max_length=limits.CODE_REF, check=values.code_ref, pattern=limits.CODE_REF_PATTERN,
        stored="code.ref", shown="code.ref", worker="code_ref",
        help="Empty: the default branch. A branch resolves to its commit at start.",
    ),
    JobField(
        "max_runtime_seconds", Kind.INT, "Max runtime (seconds)", section=ADVANCED,
        bounds=limits.JOB_BOUNDS["max_runtime_seconds"], help="Empty: no limit.", doc="Seconds,",
    ),
    JobField(
        "fault_tolerance", Kind.FLAG, "Automatic Fault Tolerance", section=FAULT_TOLERANCE,
        shown="fault_tolerance.enabled",
    ),
    JobField(
        "run_type", Kind.CHOICE, "Run type", choices=RunType, default=RunType.SYNCHRONOUS,
        help="Synchronous: any worker failure restarts the whole job. "
        "Asynchronous: only the failed worker restarts.",
        **_ft("run_type"),
    ),
    JobField(
        "max_restarts", Kind.INT, "Max restarts", default=3,
        bounds=limits.JOB_BOUNDS["max_restarts"],
        help="Failure restarts; preemptions and lost nodes do not count.",
        doc="Failure restarts,", **_ft("max_restarts"),
    ),
    JobField(
        "restart_policy", Kind.CHOICE, "Restart policy", choices=RestartPolicy,
        default=RestartPolicy.EXIT_CODE_AND_ERROR_MSG,
        help="ExitCodeAndErrorMsg restarts only retryable failures (NCCL, CUDA, ECC, "
        "lost node, OOM); OnFailure restarts on any failure.",
        **_ft("policy"),
    ),
    JobField("hang_detection", Kind.FLAG, "Job hang detection", **_ft("hang_detection")),
    JobField(
        "hang_timeout", Kind.INT, "Hang timeout (seconds)", default=1800,
        bounds=limits.JOB_BOUNDS["hang_timeout"], help="No new progress step for this long.",
        doc="Seconds without progress,", **_ft("hang_timeout"),
    ),
    JobField(
        "hang_action", Kind.CHOICE, "On hang", choices=HangAction, default=HangAction.RESTART,
        **_ft("hang_action"),
    ),
    # A clone is a new run, in a folder of its own (its default job-<id>); a Restart keeps
    # the original's folder itself (jobs.actions.submit.resubmit_job).
    # docs/fault-tolerance.md.
    JobField(
        "checkpoint_dir", Kind.TEXT, "Checkpoint folder", section=ADVANCED, default="",
        max_length=limits.CHECKPOINT_DIR, check=values.checkpoint_dir,
        pattern=limits.CHECKPOINT_DIR_GIVEN, cloned=False,
        help="A folder of your workspace's checkpoint area; default job-<id>.",
        doc="A folder under your workspace's checkpoint area.", worker="checkpoint_subdir",
    ),
    *RESULT_FIELDS,  # the work contract (docs/results.md)
)
# fmt: on
FIELD: dict[str, JobField] = {f.name: f for f in FIELDS}

# The create page (web.views_create): each field's section, sections in the order their
# first field comes. The page folds the "Automatic Fault Tolerance" section (its first field
# turns it on) and shows "Advanced" last; the others before them. A section shows its fields
# in FIELDS' order, except the ones pinned here first (the page's layout, older than the
# order the problems are listed in).
_SHOWN_FIRST = {
    IDLE: ("idle_resources", "priority"),
    ADVANCED: ("checkpoint_dir", "max_runtime_seconds", "env"),
}


def _page() -> tuple[tuple[str, tuple[str, ...]], ...]:
    sections: dict[str, list[str]] = {}
    for spec_field in FIELDS:
        sections.setdefault(spec_field.section, []).append(spec_field.name)
    return tuple(
        (title, (*pinned, *(n for n in names if n not in pinned)))
        for title, names in sections.items()
        for pinned in [_SHOWN_FIRST.get(title, ())]
    )


PAGE: tuple[tuple[str, tuple[str, ...]], ...] = _page()


# -- JSON in -------------------------------------------------------------------------------


def clean(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Each field on its own: (clean values, problems: field → messages). An empty field
    takes its default; a field with a problem is left out of the values."""
    clean_values: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}
    for spec_field in FIELDS:
        try:
            clean_values[spec_field.name] = spec_field.clean(raw.get(spec_field.name))
        except Problem as exc:
            problems[spec_field.name] = exc.messages
    return clean_values, problems


def default_name(image: str) -> str:
    """The name of a job that names none: its image's ("…/pytorch:24.01-py3" → "pytorch")."""
    return values.default_name(image)[: limits.JOB_NAME]


# -- the plain value a job is written from ---------------------------------------------------


def _column(spec_field: JobField) -> tuple[str, str]:
    column, _, key = (spec_field.stored or "").partition(".")
    return column, key


_STORED = tuple(f for f in FIELDS if f.stored is not None)
_CARRIED = tuple(f for f in FIELDS if f.worker)
_TYPES = {
    Kind.TEXT: str,
    Kind.INT: int,
    Kind.CHOICE: str,
    Kind.FLAG: bool,
    Kind.ENV: dict,
    Kind.DATA: dict,
}
_MAPPINGS = (Kind.ENV, Kind.DATA)


def _attributes() -> list[tuple[str, Any, Any]]:
    """JobSpec's attributes: one per stored column, in the fields' order."""
    attributes: dict[str, tuple[str, Any, Any]] = {}
    for spec_field in _STORED:
        column, key = _column(spec_field)
        kind = _TYPES[spec_field.kind]
        if key:  # a key of a JSON column: the column is one attribute
            attributes.setdefault(column, (column, dict, field(default_factory=dict)))
        elif spec_field.default is None and spec_field.kind is Kind.TEXT:
            attributes[column] = (column, kind, field())  # must be given
        elif isinstance(spec_field.default, dict):
            attributes[column] = (column, kind, field(default_factory=dict))
        else:
            optional = kind | None if spec_field.default is None else kind
            attributes[column] = (column, optional, field(default=spec_field.default))
    return list(attributes.values())


_ATTRIBUTES = _attributes()
_JSON_COLUMNS = frozenset(name for name, kind, _ in _ATTRIBUTES if kind is dict)


# Where each stored field lives on a row: (field, column, key of a JSON column or "").
_PLACES = tuple((f, *_column(f)) for f in _STORED)
# Where the API's JSON of a job shows each: (object or name, key inside it or "", field).
_SHOWN = tuple((*f.shown.partition(".")[::2], f.name) for f in _STORED if f.shown is not None)


def _read(row: Any, spec_field: JobField, column: str, key: str) -> Any:
    """One stored field of a job row or a JobSpec (the same attributes); a JSON column's
    missing key reads as its default, as `FtConfig.from_job` reads it."""
    value = getattr(row, column)
    if key:
        value = (value or {}).get(key, spec_field.default)
    if isinstance(value, StrEnum):
        return value.value
    return dict(value or {}) if spec_field.kind in _MAPPINGS else value


def values_of(row: Any) -> dict[str, Any]:
    """Each stored field's value by field name, from a job row or a JobSpec."""
    return {f.name: _read(row, f, column, key) for f, column, key in _PLACES}


def to_json(row: Any) -> dict[str, Any]:
    """What the API's JSON of a job shows of its shape (api.serializers.job_json), from a
    job row or a JobSpec."""
    read = values_of(row)
    body: dict[str, Any] = {}
    for group, key, name in _SHOWN:
        if key:
            body.setdefault(group, {})[key] = read[name]
        else:
            body[group] = read[name]
    return body


def carried(clean_values: Mapping[str, Any]) -> dict[str, Any]:
    """Values by field name → what each worker spec carries of them (the fields of
    protocol.agent.JobRunSpec; env: strings only)."""
    spec: dict[str, Any] = {}
    for spec_field in _CARRIED:
        if spec_field.name in clean_values:
            value = clean_values[spec_field.name]
            if spec_field.kind in _MAPPINGS:
                value = {str(k): str(v) for k, v in (value or {}).items()}
            spec[spec_field.worker] = value
    return spec


def worker_fields(row: Any) -> dict[str, Any]:
    """What each worker spec of a job carries of its fields (agents.actions.worker_spec,
    kube.controller), from its row or its JobSpec."""
    return carried({f.name: _read(row, f, *_column(f)) for f in _CARRIED})


def _from_values(cls, clean_values: Mapping[str, Any]) -> "JobSpec":
    """A spec from clean values by field name (`clean`'s, with the name filled in)."""
    columns: dict[str, Any] = {}
    for spec_field in _STORED:
        column, key = _column(spec_field)
        value = clean_values.get(spec_field.name, spec_field.default)
        if key:
            columns.setdefault(column, {})[key] = value
        else:
            columns[column] = value
    return cls(**columns)


def _from_json(cls, raw: Mapping[str, Any]) -> tuple["JobSpec | None", dict[str, list[str]]]:
    """The fields as submitted (a page's strings or the API's JSON) → (the spec, None
    while a field has a problem; the problems: field → messages)."""
    clean_values, problems = clean(raw)
    if problems:
        return None, problems
    clean_values["name"] = clean_values["name"] or default_name(clean_values["image"])
    return cls.from_values(clean_values), {}


def _from_job(cls, job: Any) -> "JobSpec":
    """The spec a job row was written from (its stored columns; JSON ones copied)."""
    return cls(
        **{
            name: dict(getattr(job, name) or {}) if name in _JSON_COLUMNS else getattr(job, name)
            for name, *_ in _ATTRIBUTES
        }
    )


def _columns(self) -> dict[str, Any]:
    """The job row's columns (`Job(**spec.columns(), …)`)."""
    return {name: getattr(self, name) for name, *_ in _ATTRIBUTES}


def _to_fields(self, *, clone: bool = False) -> dict[str, Any]:
    """The fields that would submit this job again (`from_json` reads them back); a clone
    leaves out what a new run must not share (its checkpoint folder)."""
    read = values_of(self)
    return {f.name: read[f.name] if f.cloned or not clone else f.default for f in _STORED}


JobSpec = make_dataclass(
    "JobSpec",
    _ATTRIBUTES,
    kw_only=True,
    namespace={
        "__doc__": "What a researcher asks for, as a job row stores it (one attribute per "
        "column; fault tolerance's settings in `ft_config`). Validated before it is written.",
        "__module__": __name__,
        "from_values": classmethod(_from_values),
        "from_json": classmethod(_from_json),
        "from_job": classmethod(_from_job),
        "values": values_of,
        "columns": _columns,
        "to_fields": _to_fields,
        "to_json": to_json,
        "worker_fields": worker_fields,
    },
)


def fields_of_job(job: Any) -> dict[str, Any]:
    """The fields that would submit `job` again as a clone (a clone's form, a restart's
    re-check): its quota and workspace by id, and its spec's fields."""
    return {
        "quota": str(job.quota_id),
        "workspace": str(job.workspace_id),
        **JobSpec.from_job(job).to_fields(clone=True),
    }


def fields_by_kind(kind: Kind) -> tuple[JobField, ...]:
    return tuple(f for f in FIELDS if f.kind is kind)


def shown_groups() -> dict[str, tuple[JobField, ...]]:
    """The objects of the API's JSON of a job that gather several fields ("fault_tolerance")."""
    groups: dict[str, list[JobField]] = {}
    for spec_field in FIELDS:
        if spec_field.shown and "." in spec_field.shown:
            groups.setdefault(spec_field.shown.partition(".")[0], []).append(spec_field)
    return {name: tuple(members) for name, members in groups.items()}
