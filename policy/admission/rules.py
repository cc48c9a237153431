"""The admission rules of a new job, plain: no database, no forms, no clock.

`check(raw, facts)` takes a job's fields as submitted (a page's POST or an API body:
strings, integers, booleans, an env object or KEY=VALUE lines) and what the database knows
about it (`Facts`: the quota, the user's workspaces it is bound to, the quota's nodes, its
tenant's lenders; loaded by `jobs.admission.facts`) and returns the cleaned values and the
problems, field → messages, in the order a reader meets them (`ALL`: the job as a whole).
The wording of missing, too long, not a number and unknown choice is Django's forms' own,
so the page and the API say what they always said.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.admission.env import EnvProblems, parse_env
from policy.faulttolerance.policy import FtConfig, HangAction, RestartPolicy, RunType
from policy.scheduler.fit import QuotaSize, never_fits
from policy.scheduler.model import QuotaSnap
from policy.statuses import IdleResources
from protocol import limits, words
from protocol.agent import job_problems
from protocol.text import name_problem, text_problem

ALL = "__all__"  # a problem of the job as a whole (Django's NON_FIELD_ERRORS)
LINGJUN = "Lingjun"  # quotas.models.ResourceType.LINGJUN: idle jobs there pool lenders

DEFAULTS = {
    "workers": 1,
    "gpus_per_worker": 1,
    "cpus_per_worker": 4,
    "memory_gb_per_worker": 16,
    "priority": 1,
    "max_restarts": 3,
    "hang_timeout": 1800,
}
# The bounded fields' labels, as the bounds' messages name them.
LABELS = {
    "workers": "Workers",
    "gpus_per_worker": "GPUs per worker",
    "cpus_per_worker": "CPUs per worker",
    "memory_gb_per_worker": "Memory (GB) per worker",
    "priority": "Priority",
    "max_runtime_seconds": "Max runtime (seconds)",
    "max_restarts": "Max restarts",
    "hang_timeout": "Hang timeout (seconds)",
}
CHOICES = {
    "idle_resources": (IdleResources, IdleResources.OFF),
    "run_type": (RunType, RunType.SYNCHRONOUS),
    "restart_policy": (RestartPolicy, RestartPolicy.EXIT_CODE_AND_ERROR_MSG),
    "hang_action": (HangAction, HangAction.RESTART),
}
SIZES = ("workers", "gpus_per_worker", "cpus_per_worker", "memory_gb_per_worker")
WORKER_SIZE = SIZES[1:]

REQUIRED = "This field is required."
NOT_A_NUMBER = "Enter a whole number."
_EMPTY = (None, "", [], (), {})
_DECIMAL = re.compile(r"\.0*\s*$")
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
# A checkpoint folder: plain path segments inside the job's workspace area.
CHECKPOINT_DIR = re.compile(limits.CHECKPOINT_DIR_PATTERN.removeprefix("^$|^").removesuffix("$"))


# -- facts ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaFacts:
    id: int
    name: str
    resource_type: str
    gpu_type: str
    gpus: int
    cpus: int = 0
    memory_gb: int = 0
    tenant_gpus: int = 0  # the tenant's quotas of the same kind together, this one included
    # Part of a quota tree (a parent, children or a limit): the never-fit check then needs
    # the tenant's quotas of the pool (docs/quota-tree.md "Refusals").
    in_tree: bool = False


@dataclass(frozen=True, slots=True)
class WorkspaceFacts:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """The quota's schedulable nodes: the largest of each resource, how many nodes take one
    worker of the job's size, and every node's GPU count (the never-fit check)."""

    count: int = 0
    most_gpus: int | None = None
    most_cpus: int | None = None
    most_memory: int | None = None
    fitting: int = 0
    node_gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Facts:
    quota: QuotaFacts | None = None  # None: no quota has that id or name
    workspaces: tuple[WorkspaceFacts, ...] = ()  # the user's, bound to the quota, by name
    pool: PoolFacts = field(default_factory=PoolFacts)
    lenders: tuple[int, ...] = ()  # GPUs of each same-kind quota of the tenant (needs_lenders)
    tree: tuple[QuotaSnap, ...] = ()  # the tenant's quotas of the pool (needs_tree)


@dataclass
class Verdict:
    values: dict[str, Any]  # the cleaned fields (a field with a problem is left out)
    problems: dict[str, list[str]]
    workspace: WorkspaceFacts | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


class Problem(ValueError):
    def __init__(self, *messages: str) -> None:
        super().__init__(*messages)
        self.messages = list(messages)


# -- one field at a time -------------------------------------------------------------------


def default_name(image: str) -> str:
    """A job name from its image: "nvcr.io/nvidia/pytorch:24.01-py3" → "pytorch"."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return repository.split(":", 1)[0] or "job"


def _text(value: Any, *, required: bool = False, max_length: int | None = None) -> str:
    text = "" if value in _EMPTY else str(value).strip()
    if not text:
        if required:
            raise Problem(REQUIRED)
        return ""
    messages = []
    if max_length is not None and len(text) > max_length:
        messages.append(
            f"Ensure this value has at most {max_length} characters (it has {len(text)})."
        )
    if "\x00" in text:
        messages.append("Null characters are not allowed.")
    if messages:
        raise Problem(*messages)
    return text


def _bounded(name: str) -> Callable[[Any], int | None]:
    low, high = limits.JOB_BOUNDS[name]

    def clean(value: Any) -> int | None:
        if value in _EMPTY:
            return DEFAULTS.get(name)
        try:
            number = int(_DECIMAL.sub("", str(value)))
        except (ValueError, TypeError):
            raise Problem(NOT_A_NUMBER) from None
        if not low <= number <= high:
            raise Problem(f"{LABELS[name]} must be between {low} and {high}.")
        return number

    return clean


def _choice(name: str) -> Callable[[Any], str]:
    kind, default = CHOICES[name]

    def clean(value: Any) -> str:
        text = "" if value in _EMPTY else str(value)
        if text and text not in {v.value for v in kind}:
            raise Problem(f"Select a valid choice. {text} is not one of the available choices.")
        return text or default.value

    return clean


def _flag(value: Any) -> bool:
    return not (isinstance(value, str) and value.lower() in ("false", "0")) and bool(value)


def clean_image(value: Any) -> str:
    image = _text(value, required=True, max_length=limits.IMAGE)
    if _WHITESPACE_OR_CONTROL.search(image):
        raise Problem("An image reference cannot contain spaces.")
    if not image.isascii() or not image.isprintable():
        raise Problem("An image reference is printable ASCII.")
    return image


def clean_command(value: Any) -> str:
    command = _text(value, required=True, max_length=limits.COMMAND)
    # Browsers submit a textarea with CRLF line endings; a shell would read each "\r" as
    # part of a word ("sleep: invalid time interval '4\r'").
    command = command.replace("\r\n", "\n").replace("\r", "\n").strip()
    if text_problem(command):
        raise Problem(f"The command {text_problem(command)}.")
    return command


def clean_name(value: Any) -> str:
    name = _text(value, max_length=limits.JOB_NAME)
    problem = name_problem(name)
    if problem:
        raise Problem(f"The name {problem}.")
    return name


def clean_checkpoint_dir(value: Any) -> str:
    folder = _text(value, max_length=limits.CHECKPOINT_DIR)
    if folder.startswith("/"):
        # Never silently turned into a relative one ("/etc" -> "etc"): say what it is.
        raise Problem(
            "Give a folder inside your workspace's checkpoint area (e.g. runs/exp1), "
            "not an absolute path."
        )
    folder = folder.rstrip("/")
    if not folder:
        return ""
    parts = folder.split("/")
    if not CHECKPOINT_DIR.fullmatch(folder) or any(p in (".", "..") for p in parts):
        raise Problem("Use a relative folder of letters, digits, '.', '_' and '-' (no '..').")
    return folder


def clean_env(value: Any) -> dict[str, str]:
    try:
        return parse_env(value)
    except EnvProblems as exc:
        raise Problem(*exc.messages) from None


# In the order the page lays the fields out (and the order their problems are listed).
FIELDS: dict[str, Callable[[Any], Any]] = {
    "quota": lambda value: _text(value, required=True),
    "workspace": _text,
    "name": clean_name,
    "image": clean_image,
    "command": clean_command,
    **{name: _bounded(name) for name in SIZES},
    "priority": _bounded("priority"),
    "idle_resources": _choice("idle_resources"),
    "env": clean_env,
    "max_runtime_seconds": _bounded("max_runtime_seconds"),
    "fault_tolerance": _flag,
    "run_type": _choice("run_type"),
    "max_restarts": _bounded("max_restarts"),
    "restart_policy": _choice("restart_policy"),
    "hang_detection": _flag,
    "hang_timeout": _bounded("hang_timeout"),
    "hang_action": _choice("hang_action"),
    "checkpoint_dir": clean_checkpoint_dir,
}


def clean_fields(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Each field on its own: (cleaned values, problems). Empty fields take their defaults."""
    values: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}
    for name, clean in FIELDS.items():
        try:
            values[name] = clean(raw.get(name))
        except Problem as exc:
            problems[name] = exc.messages
    return values, problems


def needs_lenders(quota: QuotaFacts, values: Mapping[str, Any]) -> bool:
    """Only a Lingjun idle job larger than its own quota pools lenders' whole workers: the
    never-fit check then needs each same-kind quota's GPUs."""
    if any(values.get(name) is None for name in ("idle_resources", "workers", "gpus_per_worker")):
        return False
    idle = values["idle_resources"] != IdleResources.OFF
    need = values["workers"] * values["gpus_per_worker"]
    return quota.resource_type == LINGJUN and idle and need > quota.gpus


def needs_tree(quota: QuotaFacts, values: Mapping[str, Any]) -> bool:
    """A quota of a tree is checked against its limits, own guarantee and borrowing scope."""
    return quota.in_tree or needs_lenders(quota, values)


def ft_config(values: Mapping[str, Any]) -> FtConfig:
    return FtConfig(
        enabled=bool(values.get("fault_tolerance")),
        run_type=RunType(values["run_type"]),
        max_restarts=values["max_restarts"],
        policy=RestartPolicy(values["restart_policy"]),
        hang_detection=bool(values.get("hang_detection")),
        hang_timeout=values["hang_timeout"],
        hang_action=HangAction(values["hang_action"]),
    )


# -- the job as a whole ----------------------------------------------------------------------


def check(raw: Mapping[str, Any], facts: Facts) -> Verdict:
    """Every rule, in the order a reader meets the problems: each field alone, then the
    job against its quota, workspaces and nodes, then what an agent would refuse."""
    values, problems = clean_fields(raw)
    if "quota" not in problems:
        quota_problem = _quota_problem(values["quota"], facts)
        if quota_problem:
            problems = {"quota": [quota_problem], **problems}
            del values["quota"]
        else:
            values["quota"] = facts.quota
    verdict = Verdict(values, problems)
    quota = values.get("quota")
    if quota is not None:
        verdict.workspace = _pick_workspace(verdict, quota, facts.workspaces)
        _fits_a_node(verdict, quota, facts.pool)
        _fits_the_quota(verdict, quota, facts)
    if not values.get("name") and values.get("image"):
        values["name"] = default_name(values["image"])[: limits.JOB_NAME]
    _agent_accepts(verdict)
    return verdict


def add_problem(verdict: Verdict, name: str | None, message: str) -> None:
    """A problem found across fields: the field's value no longer counts as clean."""
    verdict.problems.setdefault(name or ALL, []).append(message)
    if name:
        verdict.values.pop(name, None)


def _quota_problem(ref: str, facts: Facts) -> str | None:
    if facts.quota is None:
        return f"Unknown quota {ref[:100]!r}."
    if not facts.workspaces:
        return f"Quota {facts.quota.name} is not bound to any of your workspaces."
    return None


def _pick_workspace(
    verdict: Verdict, quota: QuotaFacts, candidates: tuple[WorkspaceFacts, ...]
) -> WorkspaceFacts | None:
    raw = (verdict.values.get("workspace") or "").strip()
    names = ", ".join(w.name for w in candidates)
    if raw:
        chosen = [w for w in candidates if str(w.id) == raw or w.name == raw]
        if len(chosen) != 1:
            add_problem(
                verdict, "workspace", f"Quota {quota.name} is bound to your workspaces: {names}."
            )
            return None
        return chosen[0]
    if len(candidates) > 1:
        add_problem(
            verdict,
            "workspace",
            f"Quota {quota.name} is bound to several of your workspaces ({names}); pick one.",
        )
        return None
    return candidates[0]


def _fits_a_node(verdict: Verdict, quota: QuotaFacts, pool: PoolFacts) -> None:
    """A worker must fit on one node of the quota's type, or it could never be placed."""
    wanted = {
        "gpus_per_worker": (pool.most_gpus, "GPUs"),
        "cpus_per_worker": (pool.most_cpus, "CPUs"),
        "memory_gb_per_worker": (pool.most_memory, "GB of memory"),
    }
    values = verdict.values
    sized = all(values.get(name) is not None for name in wanted)
    kind = f"{quota.resource_type} {quota.gpu_type}"
    if not pool.count:
        add_problem(
            verdict,
            "quota",
            f"No {kind} nodes are registered, so jobs on quota {quota.name} cannot run.",
        )
        return
    too_big = False
    for name, (largest, unit) in wanted.items():
        value = values.get(name)
        if value is not None and value > largest:
            too_big = True
            add_problem(
                verdict, name, f"No {kind} node has {value} {unit}; the largest has {largest}."
            )
    if too_big or not sized:
        return
    if not pool.fitting:
        add_problem(
            verdict,
            None,
            f"No single {kind} node has {words.gpus(values['gpus_per_worker'])}, "
            f"{values['cpus_per_worker']} CPUs and {values['memory_gb_per_worker']} GB at once.",
        )


def _fits_the_quota(verdict: Verdict, quota: QuotaFacts, facts: Facts) -> None:
    """A job that could never start on its quota is refused, never left waiting
    (docs/scheduling.md)."""
    values = verdict.values
    if any(values.get(name) is None for name in (*SIZES, "idle_resources")):
        return  # a field already has its own problem
    size = QuotaSize(
        name=quota.name,
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=quota.gpus,
        cpus=quota.cpus,
        memory_gb=quota.memory_gb,
        tenant_gpus=quota.tenant_gpus,
        tenant_quota_gpus=facts.lenders if needs_lenders(quota, values) else (),
        id=quota.id,
    )
    problem = never_fits(
        size,
        node_gpus=facts.pool.node_gpus,
        workers=values["workers"],
        gpus_per_worker=values["gpus_per_worker"],
        cpus_per_worker=values["cpus_per_worker"],
        memory_gb_per_worker=values["memory_gb_per_worker"],
        idle=values["idle_resources"],
        tree=facts.tree,
    )
    if problem:
        add_problem(verdict, "workers", problem)


# What each worker spec of the job carries (protocol.agent.JobRunSpec) → the field it is.
_AGENT_FIELDS = {
    "image": "image",
    "command": "command",
    "env": "env",
    "checkpoint_subdir": "checkpoint_dir",
}


def _agent_accepts(verdict: Verdict) -> None:
    """The last gate: what every worker spec of this job would carry must pass the agent
    protocol's own schema, or the job could never run."""
    values = {
        spec_field: verdict.values[name]
        for spec_field, name in _AGENT_FIELDS.items()
        if name in verdict.values and name not in verdict.problems
    }
    if len(values) < len(_AGENT_FIELDS):
        return  # a field already has its own problem
    for spec_field, message in job_problems(**values).items():
        add_problem(verdict, _AGENT_FIELDS.get(spec_field), f"Agents would refuse this: {message}")


# -- an existing job's fields (clone, restart) -------------------------------------------------


def fields_of_job(job: Any) -> dict[str, Any]:
    """The fields that would submit `job` again (a clone's form, a restart's re-check)."""
    return {
        "quota": str(job.quota_id),
        "workspace": str(job.workspace_id),
        "name": job.name,
        "image": job.image,
        "command": job.command,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "cpus_per_worker": job.cpus_per_worker,
        "memory_gb_per_worker": job.memory_gb_per_worker,
        "priority": job.priority,
        "idle_resources": job.idle_resources,
        "env": dict(job.env),
        "max_runtime_seconds": job.max_runtime_seconds,
        **ft_fields_of_job(job),
    }


def ft_fields_of_job(job: Any) -> dict[str, Any]:
    """The fault-tolerance fields of an existing job."""
    config = FtConfig.from_job(job.fault_tolerance, job.ft_config or {})
    return {
        "fault_tolerance": config.enabled,
        "run_type": config.run_type.value,
        "max_restarts": config.max_restarts,
        "restart_policy": config.policy.value,
        "hang_detection": config.hang_detection,
        "hang_timeout": config.hang_timeout,
        "hang_action": config.hang_action.value,
        # A clone is a new run, in a folder of its own (its default job-<id>); a Restart
        # keeps the original's folder itself (resubmit_job). docs/fault-tolerance.md.
        "checkpoint_dir": "",
    }
