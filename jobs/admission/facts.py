"""The database side of a job's admission: load the facts `policy.admission.rules` needs, in
at most four queries whatever the request (the quota with its tenant's GPUs of the same
kind; the user's workspaces it is bound to; its nodes grouped by GPU count; its tenant's
same-kind quotas, only for a Lingjun idle job larger than its quota), run the rules, and
hand a valid request over as a `JobSpec` with its quota and workspace rows.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Subquery, Sum

from cluster.models import POOL_STATES, Node
from jobs.admission.cache import Versioned
from jobs.folders import FIELD_OF, folder_conflict, folders_of
from policy.admission import rules
from policy.admission.rules import Facts, PoolFacts, QuotaFacts, Verdict, WorkspaceFacts
from policy.folders import Claim
from policy.jobspec import JobSpec
from policy.scheduler.model import QuotaSnap
from quotas.models import Quota, Workspace


@dataclass
class Checked:
    """A request checked against the database: the rules' verdict and the rows it names."""

    verdict: Verdict
    quota: Quota | None = None
    workspace: Workspace | None = None

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def problems(self) -> dict[str, list[str]]:
        return self.verdict.problems

    @property
    def values(self) -> dict[str, Any]:
        return self.verdict.values

    def spec(self) -> JobSpec:
        return JobSpec.from_values(self.values)


def member_workspaces(user) -> QuerySet[Workspace]:
    return Workspace.objects.filter(memberships__user=user)


def _quota(ref: str) -> Quota | None:
    """By id or by name, with its tenant's GPUs of the same kind (the never-fit check), in
    one query."""
    by_id = ref.isascii() and ref.isdigit() and len(ref) <= 18  # fits a bigint
    lookup = {"pk": int(ref)} if by_id else {"name": ref}
    tenant_gpus = (
        Quota.objects.filter(
            tenant_id=OuterRef("tenant_id"),
            resource_type=OuterRef("resource_type"),
            gpu_type=OuterRef("gpu_type"),
        )
        .values("tenant_id")
        .annotate(total=Sum("gpus"))
        .values("total")
    )
    return (
        Quota.objects.filter(**lookup)
        .annotate(
            tenant_gpus=Subquery(tenant_gpus),
            has_children=Exists(Quota.objects.filter(parent_id=OuterRef("pk"))),
        )
        .first()
    )


def _pool(quota: Quota, values: Mapping[str, Any]) -> PoolFacts:
    """The quota's schedulable nodes in one query, grouped by GPU count (a few rows)."""
    sized = all(values.get(name) is not None for name in rules.WORKER_SIZE)
    fitting = (
        Q(
            gpus__gte=values["gpus_per_worker"],
            cpus__gte=values["cpus_per_worker"],
            memory_gb__gte=values["memory_gb_per_worker"],
        )
        if sized
        else Q(pk__in=[])
    )
    rows = list(
        Node.objects.filter(
            gpu_type=quota.gpu_type,
            resource_type=quota.resource_type,
            state__in=POOL_STATES,
        )
        .values("gpus")
        .annotate(
            count=Count("pk"),
            most_cpus=Max("cpus"),
            most_memory=Max("memory_gb"),
            fitting=Count("pk", filter=fitting),
        )
        .order_by("gpus")
    )
    return PoolFacts(
        count=sum(r["count"] for r in rows),
        most_gpus=max((r["gpus"] for r in rows), default=None),
        most_cpus=max((r["most_cpus"] for r in rows), default=None),
        most_memory=max((r["most_memory"] for r in rows), default=None),
        fitting=sum(r["fitting"] for r in rows),
        node_gpus=tuple(r["gpus"] for r in rows for _ in range(r["count"])),
    )


def quota_facts(quota: Quota) -> QuotaFacts:
    return QuotaFacts(
        id=quota.pk,
        name=quota.name,
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=quota.gpus,
        cpus=quota.cpus,
        memory_gb=quota.memory_gb,
        tenant_gpus=getattr(quota, "tenant_gpus", None) or 0,
        in_tree=quota.parent_id is not None
        or bool(getattr(quota, "has_children", False))
        or quota.max_gpus is not None
        or quota.lending_limit is not None,
    )


class FactsLoader:
    """The database facts of admission, each loaded once per loader: a batch of jobs checks
    every item with one loader, so items of the same quota and worker size cost no more
    queries than one (the batch boundary rule still judges each item alone). With a
    version store they are also cached per process (jobs.admission.cache)."""

    def __init__(self, user, workspaces: QuerySet | None = None) -> None:
        self.user = user
        self.workspaces = workspaces
        self._memo: dict[tuple, Any] = {}
        self._cache = Versioned()
        # The folders the batch's valid items claim so far, per workspace: a later item may
        # not overlap them (policy.folders).
        self.claimed: dict[int, list[Claim]] = {}

    def _once(self, key: tuple, load, shared: bool = True):
        if key not in self._memo:
            self._memo[key] = self._cache.get(key, load) if shared else load()
        return self._memo[key]

    def quota(self, ref: str) -> Quota | None:
        return self._once(("quota", ref), lambda: _quota(ref))

    def bound(self, quota: Quota) -> list[Workspace]:
        def load() -> list[Workspace]:
            mine = self.workspaces if self.workspaces is not None else member_workspaces(self.user)
            return list(quota.workspaces.filter(pk__in=mine).order_by("name"))

        # The caller's own workspaces queryset (the page's) is not a key the cache can hold.
        key = ("bound", quota.pk, self.user.pk)
        return self._once(key, load, shared=self.workspaces is None)

    def pool(self, quota: Quota, values: Mapping[str, Any]) -> PoolFacts:
        size = tuple(values.get(name) for name in rules.WORKER_SIZE)
        key = ("pool", quota.resource_type, quota.gpu_type, size)
        return self._once(key, lambda: _pool(quota, values))

    def tree(self, quota: Quota) -> tuple[QuotaSnap, ...]:
        return self._once(("tree", quota.pk), lambda: _tree(quota))


def check_job(
    raw: Mapping[str, Any],
    user,
    workspaces: QuerySet | None = None,
    loader: FactsLoader | None = None,
) -> Checked:
    """Check a new job of `user` (`raw`: its fields as submitted) against the rules and the
    database. `workspaces`: the user's workspaces, when the caller has the queryset already;
    `loader`: the facts already loaded for other items of the same batch."""
    loader = loader or FactsLoader(user, workspaces)
    values, problems = rules.clean_fields(raw)
    if "quota" in problems:
        return Checked(rules.check(raw, Facts()))
    quota = loader.quota(values["quota"])
    bound: list[Workspace] = loader.bound(quota) if quota is not None else []
    facts = Facts(
        quota=quota_facts(quota) if quota is not None else None,
        workspaces=tuple(WorkspaceFacts(w.pk, w.name) for w in bound),
    )
    if quota is not None and bound:
        tree = loader.tree(quota) if rules.needs_tree(facts.quota, values) else ()
        facts = Facts(
            quota=facts.quota,
            workspaces=facts.workspaces,
            pool=loader.pool(quota, values),
            lenders=tuple(q.gpus for q in tree) if rules.needs_lenders(facts.quota, values) else (),
            tree=tree,
        )
    verdict = rules.check(raw, facts)
    chosen = verdict.workspace
    workspace = next((w for w in bound if chosen and w.pk == chosen.id), None)
    if workspace is not None:
        _check_folder_is_free(verdict, workspace.pk, loader.claimed.setdefault(workspace.pk, []))
    return Checked(verdict, quota=quota if bound else None, workspace=workspace)


def _check_folder_is_free(verdict: Verdict, workspace_id: int, claimed: list[Claim]) -> None:
    """Two runs never share a checkpoint or output folder, nor nest one in the other's: the
    other job's checkpoints or accepted result files would be taken for this one's, or
    pruned by it (docs/fault-tolerance.md, docs/results.md). One query, only for a folder.
    A valid item's folders are claimed for the batch's later items (`claimed`)."""
    output = str(verdict.values.get("result_output_dir") or "")
    mine = folders_of(verdict.values.get("checkpoint_dir") or "", output, "this job")
    if not mine:
        return
    found = folder_conflict(workspace_id, mine, claimed)
    if found is not None:
        rules.add_problem(verdict, FIELD_OF[found.kind], found.message())
    elif verdict.ok:
        name = verdict.values.get("name") or "unnamed"
        who = f"an earlier job of this batch ({name})"
        claimed.extend(Claim(c.path, c.kind, who) for c in mine)


def _tree(quota: Quota) -> tuple[QuotaSnap, ...]:
    """The tenant's quotas of the quota's kind (one query): the tree's limits, own guarantees
    and lending limits, and each quota's GPUs (whole workers pool only there)."""
    same = Quota.objects.filter(
        tenant_id=quota.tenant_id, resource_type=quota.resource_type, gpu_type=quota.gpu_type
    ).values_list("pk", "name", "gpus", "parent_id", "max_gpus", "lending_limit")
    return tuple(
        QuotaSnap(
            id=pk,
            name=name,
            tenant_id=quota.tenant_id,
            resource_type=quota.resource_type,
            gpu_type=quota.gpu_type,
            gpus=gpus,
            parent_id=parent_id,
            max_gpus=max_gpus,
            lending_limit=lending_limit,
        )
        for pk, name, gpus, parent_id, max_gpus, lending_limit in same
    )
