"""The admission rules of a new job, plain: no database, no forms, no clock.

`check(raw, facts)` takes a job's fields as submitted (a page's POST or an API body:
strings, integers, booleans, an env object or KEY=VALUE lines) and what the database knows
about it (`Facts`: the quota, the user's workspaces it is bound to, the quota's nodes, its
tenant's lenders; loaded by `jobs.admission.facts`) and returns the cleaned values and the
problems, field → messages, in the order a reader meets them (`ALL`: the job as a whole).
Each field alone is read by the job's shape (`policy.jobspec`: its kind, default, bounds
and own rule); the rules here judge the job as a whole.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from policy import jobspec
from policy.admission.values import default_name  # noqa: F401 - the name rule, re-exported
from policy.scheduler.fit import QuotaSize, never_fits
from policy.scheduler.model import QuotaSnap
from policy.statuses import IdleResources
from protocol import words
from protocol.agent import job_problems

ALL = "__all__"  # a problem of the job as a whole (Django's NON_FIELD_ERRORS)
LINGJUN = "Lingjun"  # quotas.models.ResourceType.LINGJUN: idle jobs there pool lenders

SIZES = ("workers", "gpus_per_worker", "cpus_per_worker", "memory_gb_per_worker")
WORKER_SIZE = SIZES[1:]


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


def clean_fields(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Each field on its own (`policy.jobspec.clean`): (clean values, problems)."""
    return jobspec.clean(raw)


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
    if values.get("result_inputs_sha256") and not values.get("data") and "data" not in problems:
        add_problem(verdict, "result_inputs_sha256", "Needs data folders: their content is hashed.")
    if not values.get("name") and values.get("image"):
        values["name"] = jobspec.default_name(values["image"])
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


def _agent_accepts(verdict: Verdict) -> None:
    """The last gate: what every worker spec of this job would carry must pass the agent
    protocol's own schema, or the job could never run."""
    carried = {f.worker: f.name for f in jobspec.FIELDS if f.worker}
    clean = {
        name: verdict.values[name]
        for name in carried.values()
        if name in verdict.values and name not in verdict.problems
    }
    if len(clean) < len(carried):
        return  # a field already has its own problem
    for spec_field, message in job_problems(**jobspec.carried(clean)).items():
        add_problem(verdict, carried.get(spec_field), f"Agents would refuse this: {message}")
