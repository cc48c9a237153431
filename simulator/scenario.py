"""Scenario files for `manage.py simulate` (docs/simulator.md): parse and validate, pure.

Every error names the offending field ("jobs[2].quota: unknown quota 'team-z'") so a quota
owner can fix the file; nothing runs until the whole scenario is valid.
"""

import math
from dataclasses import dataclass, field

from policy.faulttolerance.policy import FtConfig
from policy.jobspec import FIELD
from policy.statuses import IdleResources
from protocol import words
from simulator.scenario_tree import (
    TREE_FIELDS,
    ScenarioError,
    check_tree,
    inherit_parents,
    tree_fields,
)

RESOURCE_TYPES = ("Lingjun", "General-purpose")
PREEMPTION = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM_WITHIN_TREE = ("Any", "LowerPriority", "Never")
# Extension (not in docs/simulator.md's list): cordon/uncordon a node (no new work; its pods run
# on).
NODE_ACTIONS = ("node_down", "node_up", "cordon", "uncordon")
ACTION_KINDS = ("stop", "terminate", "restart", *NODE_ACTIONS)


@dataclass(frozen=True)
class Settings:
    start_delay: float = 30
    stop_grace: float = 30
    node_lost_timeout: float = 300
    min_runtime_before_reclaim: float = 0
    # Extension (not in docs/simulator.md's list, optional): the starvation rule's wait, seconds.
    reserve_after: float = 600
    # Extension (docs/simulator.md): 1 turns weighted fair-share preemption on for every
    # tenant (Tenant.fair_share_preemption; docs/quota-tree.md). Default 0: off.
    fair_share_preemption: float = 0


@dataclass(frozen=True)
class NodeSpec:
    name: str
    resource_type: str
    gpu_type: str
    gpus: int


@dataclass(frozen=True)
class QuotaSpec:
    name: str
    tenant: str
    resource_type: str
    gpu_type: str
    gpus: int
    preemption: str = "Never"
    # The quota tree (docs/quota-tree.md, docs/simulator.md); all optional.
    parent: str | None = None
    max_gpus: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    # The sharing options (docs/scheduling.md, the decision table); defaults: today's rules.
    reclaim_within_tree: str = "Any"
    borrow_within_tree_max_priority: int | None = None


@dataclass(frozen=True)
class FailureSpec:
    after_work: float
    worker: int
    exit_code: int | None = None
    message: str = ""
    hang: bool = False
    attempt: int | None = None  # None: every attempt


@dataclass(frozen=True)
class JobSpec:
    name: str
    submit_at: float
    quota: str
    workers: int
    gpus_per_worker: int
    work: float
    priority: int = 1
    idle_resources: IdleResources = IdleResources.OFF
    checkpoint_every: float = 0
    ft: FtConfig | None = None
    failures: tuple[FailureSpec, ...] = ()


@dataclass(frozen=True)
class ActionSpec:
    at: float
    kind: str
    target: str
    new_name: str = ""  # restart: the new job's name


@dataclass(frozen=True)
class Scenario:
    settings: Settings
    tenants: tuple[str, ...]
    nodes: tuple[NodeSpec, ...]
    quotas: tuple[QuotaSpec, ...]
    jobs: tuple[JobSpec, ...]
    actions: tuple[ActionSpec, ...] = field(default=())


# -- field readers ------------------------------------------------------------------------------
def _obj(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _num(d: dict, key: str, where: str, default=None, *, minimum: float = 0, integer=False):
    if key not in d:
        if default is None:
            raise ScenarioError(f"{where}.{key}: required")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and v != int(v)):
        kind = "an integer" if integer else "a number"
        raise ScenarioError(f"{where}.{key}: expected {kind}, got {v!r}")
    if not math.isfinite(v):  # NaN passed every bound below, and int() of it raised
        raise ScenarioError(f"{where}.{key}: expected a finite number, got {v!r}")
    if v < minimum:
        raise ScenarioError(f"{where}.{key}: must be at least {minimum}, got {v!r}")
    return int(v) if integer else float(v)


def _str(d: dict, key: str, where: str, default: str | None = None) -> str:
    if key not in d:
        if default is None:
            raise ScenarioError(f"{where}.{key}: required")
        return default
    v = d[key]
    if not isinstance(v, str) or not v.strip():
        raise ScenarioError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


def _enum(d: dict, key: str, where: str, choices, default: str | None = None) -> str:
    v = _str(d, key, where, default)
    allowed = [str(c) for c in choices]
    if v not in allowed:
        raise ScenarioError(f"{where}.{key}: {v!r} is not one of {', '.join(allowed)}")
    return v


def _unknown(d: dict, known: set[str], where: str) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise ScenarioError(f"{where}.{extra[0]}: unknown field")


# -- sections -----------------------------------------------------------------------------------
def _settings(raw) -> Settings:
    d = _obj(raw or {}, "settings")
    _unknown(d, set(Settings.__dataclass_fields__), "settings")
    base = Settings()
    return Settings(**{k: _num(d, k, "settings", getattr(base, k)) for k in d})


def _nodes(raw) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    for i, item in enumerate(_list(raw, "nodes")):
        where = f"nodes[{i}]"
        d = _obj(item, where)
        _unknown(d, {"name", "count", "resource_type", "gpu_type", "gpus"}, where)
        name = _str(d, "name", where)
        rt = _enum(d, "resource_type", where, RESOURCE_TYPES, "Lingjun")
        gpu_type = _str(d, "gpu_type", where, "H200")
        gpus = _num(d, "gpus", where, 8, integer=True)
        count = _num(d, "count", where, 0, integer=True)
        names = [f"{name}-{k}" for k in range(count)] if "count" in d else [name]
        nodes.extend(NodeSpec(n, rt, gpu_type, gpus) for n in names)
    seen: set[str] = set()
    for i, n in enumerate(nodes):
        if n.name in seen:
            raise ScenarioError(f"nodes[{i}].name: duplicate node {n.name!r}")
        seen.add(n.name)
    return nodes


def _quotas(raw, tenants: tuple[str, ...]) -> list[QuotaSpec]:
    quotas: list[QuotaSpec] = []
    items = [_obj(item, f"quotas[{i}]") for i, item in enumerate(_list(raw, "quotas"))]
    for i, d in enumerate(inherit_parents(items)):
        where = f"quotas[{i}]"
        known = {"name", "tenant", "resource_type", "gpu_type", "gpus", "preemption", *TREE_FIELDS,
                 "reclaim_within_tree", "borrow_within_tree_max_priority"}  # fmt: skip
        _unknown(d, known, where)
        if "parent" in d and d["parent"] not in {o.get("name") for o in items}:
            raise ScenarioError(f"{where}.parent: unknown quota {d['parent']!r}")
        tenant = _str(d, "tenant", where)
        if tenant not in tenants:
            raise ScenarioError(f"{where}.tenant: unknown tenant {tenant!r}")
        q = QuotaSpec(
            name=_str(d, "name", where),
            tenant=tenant,
            resource_type=_enum(d, "resource_type", where, RESOURCE_TYPES, "Lingjun"),
            gpu_type=_str(d, "gpu_type", where, "H200"),
            gpus=_num(d, "gpus", where, integer=True),
            preemption=_enum(d, "preemption", where, PREEMPTION, "Never"),
            reclaim_within_tree=_enum(d, "reclaim_within_tree", where, RECLAIM_WITHIN_TREE, "Any"),
            borrow_within_tree_max_priority=_threshold(d, where),
            **tree_fields(d, where),
        )
        if any(o.name == q.name for o in quotas):
            raise ScenarioError(f"{where}.name: duplicate quota {q.name!r}")
        quotas.append(q)
    check_tree(quotas)
    return quotas


def _threshold(d: dict, where: str) -> int | None:
    """`borrow_within_tree_max_priority`: an integer priority (may be negative), or absent."""
    v = d.get("borrow_within_tree_max_priority")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScenarioError(
            f"{where}.borrow_within_tree_max_priority: expected an integer, got {v!r}"
        )
    return v


def _ft(raw, where: str) -> FtConfig | None:
    """A job's Automatic Fault Tolerance: the console's choices and defaults (policy.jobspec),
    in the scenario's own nesting (docs/simulator.md)."""
    if raw is None:
        return None
    d = _obj(raw, where)
    _unknown(d, {"run_type", "max_restarts", "policy", "hang_detection"}, where)
    hang = d.get("hang_detection")
    hang_cfg = {}
    if hang is not None:
        h, at = _obj(hang, f"{where}.hang_detection"), f"{where}.hang_detection"
        _unknown(h, {"timeout", "action"}, at)
        hang_cfg = {
            "hang_detection": True,
            "hang_timeout": _num(h, "timeout", at, FIELD["hang_timeout"].default, integer=True),
            "hang_action": _choice(h, "action", at, "hang_action"),
        }
    return FtConfig(
        enabled=True,
        run_type=_choice(d, "run_type", where, "run_type"),
        max_restarts=_num(d, "max_restarts", where, FIELD["max_restarts"].default, integer=True),
        policy=_choice(d, "policy", where, "restart_policy"),
        **hang_cfg,
    )


def _choice(d: dict, key: str, where: str, name: str):
    """One of a job field's choices (its default when absent), as its enum member."""
    choices, default = FIELD[name].choices, FIELD[name].default
    return choices(_enum(d, key, where, choices, default.value))


def _failures(raw, where: str, workers: int) -> tuple[FailureSpec, ...]:
    out = []
    for i, item in enumerate(_list(raw, where)):
        w = f"{where}[{i}]"
        d = _obj(item, w)
        _unknown(d, {"after_work", "worker", "exit_code", "message", "hang", "attempt"}, w)
        worker = _num(d, "worker", w, 0, integer=True)
        if worker >= workers:
            raise ScenarioError(f"{w}.worker: the job has {workers} workers (0-{workers - 1})")
        hang = d.get("hang", False)
        if not isinstance(hang, bool):
            raise ScenarioError(f"{w}.hang: expected true or false, got {hang!r}")
        if not hang and "exit_code" not in d:
            raise ScenarioError(f"{w}.exit_code: required unless hang is true")
        exit_code = None
        if "exit_code" in d:
            exit_code = _num(d, "exit_code", w, minimum=-255, integer=True)
        out.append(
            FailureSpec(
                after_work=_num(d, "after_work", w),
                worker=worker,
                exit_code=exit_code,
                message=str(d.get("message", "")),
                hang=hang,
                attempt=_num(d, "attempt", w, 1, minimum=1, integer=True)
                if "attempt" in d
                else None,
            )
        )
    return tuple(sorted(out, key=lambda f: f.after_work))


def _size(d: dict, key: str, where: str) -> int:
    """A job's size field: the console's default and lower bound (policy.jobspec); no upper
    bound, so a what-if may try any size its nodes allow."""
    described = FIELD[key]
    return _num(d, key, where, described.default, minimum=described.bounds[0], integer=True)


def _jobs(raw, quotas: dict[str, QuotaSpec], nodes: list[NodeSpec]) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    names: set[str] = set()
    for i, item in enumerate(_list(raw, "jobs")):
        where = f"jobs[{i}]"
        d = _obj(item, where)
        known = {
            "name", "submit_at", "quota", "workers", "gpus_per_worker", "work", "priority",
            "idle_resources", "checkpoint_every", "fault_tolerance", "failures",
        }  # fmt: skip
        _unknown(d, known, where)
        name = _str(d, "name", where)
        if name in names:
            raise ScenarioError(f"{where}.name: duplicate job {name!r}")
        names.add(name)
        quota = _str(d, "quota", where)
        if quota not in quotas:
            raise ScenarioError(f"{where}.quota: unknown quota {quota!r}")
        q = quotas[quota]
        workers = _size(d, "workers", where)
        gpus = _size(d, "gpus_per_worker", where)
        pool = [n for n in nodes if (n.resource_type, n.gpu_type) == (q.resource_type, q.gpu_type)]
        largest = max((n.gpus for n in pool), default=0)
        if gpus > largest:
            raise ScenarioError(
                f"{where}.gpus_per_worker: {words.gpus(gpus)} is more than any "
                f"{q.resource_type} {q.gpu_type} node has ({largest})"
            )
        priority = d.get("priority", FIELD["priority"].default)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ScenarioError(f"{where}.priority: expected an integer, got {priority!r}")
        jobs.append(
            JobSpec(
                name=name,
                submit_at=_num(d, "submit_at", where, 0),
                quota=quota,
                workers=workers,
                gpus_per_worker=gpus,
                work=_num(d, "work", where),
                priority=priority,
                idle_resources=_choice(d, "idle_resources", where, "idle_resources"),
                checkpoint_every=_num(d, "checkpoint_every", where, 0),
                ft=_ft(d.get("fault_tolerance"), f"{where}.fault_tolerance"),
                failures=_failures(d.get("failures"), f"{where}.failures", workers),
            )
        )
    return jobs


def _actions(raw, jobs: set[str], nodes: set[str]) -> list[ActionSpec]:
    out: list[ActionSpec] = []
    known_jobs = set(jobs)
    for i, item in enumerate(_list(raw, "actions")):
        where = f"actions[{i}]"
        d = _obj(item, where)
        kinds = [k for k in ACTION_KINDS if k in d]
        if len(kinds) != 1:
            raise ScenarioError(f"{where}: needs exactly one of {', '.join(ACTION_KINDS)}")
        kind = kinds[0]
        _unknown(d, {"at", kind, "as"} if kind == "restart" else {"at", kind}, where)
        target = _str(d, kind, where)
        pool = nodes if kind in NODE_ACTIONS else known_jobs
        if target not in pool:
            what = "node" if kind in NODE_ACTIONS else "job"
            raise ScenarioError(f"{where}.{kind}: unknown {what} {target!r}")
        new_name = ""
        if kind == "restart":
            new_name = _str(d, "as", where, f"{target}-restart-{i}")
            if new_name in known_jobs:
                raise ScenarioError(f"{where}.as: job {new_name!r} already exists")
            known_jobs.add(new_name)
        out.append(ActionSpec(_num(d, "at", where), kind, target, new_name))
    return sorted(out, key=lambda a: a.at)


def parse(raw) -> Scenario:
    d = _obj(raw, "scenario")
    _unknown(d, {"settings", "tenants", "nodes", "quotas", "jobs", "actions"}, "scenario")
    tenants = tuple(_list(d.get("tenants"), "tenants"))
    for i, t in enumerate(tenants):
        if not isinstance(t, str) or not t:
            raise ScenarioError(f"tenants[{i}]: expected a name, got {t!r}")
    nodes = _nodes(d.get("nodes"))
    quotas = _quotas(d.get("quotas"), tenants)
    jobs = _jobs(d.get("jobs"), {q.name: q for q in quotas}, nodes)
    actions = _actions(d.get("actions"), {j.name for j in jobs}, {n.name for n in nodes})
    return Scenario(
        settings=_settings(d.get("settings")),
        tenants=tenants,
        nodes=tuple(nodes),
        quotas=tuple(quotas),
        jobs=tuple(jobs),
        actions=tuple(actions),
    )
