"""Whose folder is it: a folder of a workspace's area belongs to one job and its restarts,
and no other job's folder may be equal to it, inside it or enclose it
(docs/fault-tolerance.md, "Checkpoint folders"). A job's folders are its checkpoint folder
and, when it declares one, its output folder (the run's result folder, docs/results.md):
both are claimed, each against the other jobs' checkpoint and output folders. The rule is
pure (`policy.folders`); this loads the claims it judges, in one query for a job or a
whole array.

Claims: every job of the workspace whose folder (chosen, or its default job-<id>; or its
declared output folder) equals a new one; and, for folders inside or enclosing it, the jobs
still live or whose folders hold committed checkpoints or accepted result units
(docs/results.md: the result lies in the job's folder; a finished job with neither has
nothing left to prune or lose).
"""

import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Exists, OuterRef, Q

from jobs.models import Checkpoint, Job, ResultUnit
from policy.folders import CHECKPOINT, OUTPUT, Claim, Conflict, ancestors, conflict
from policy.statuses import ACTIVE_JOB_STATUSES
from protocol import limits
from quotas.models import Workspace

# The field each kind of folder is submitted in (policy.jobspec).
FIELD_OF: dict[str, str] = {CHECKPOINT: "checkpoint_dir", OUTPUT: "result_output_dir"}
_OUTPUT = "result_contract__output_dir"  # where a job row keeps its declared output folder


class FolderTaken(ValueError):
    """A folder another job's overlaps (the message says which; `field`: the folder's)."""

    def __init__(self, message: str, field: str = FIELD_OF[CHECKPOINT]) -> None:
        super().__init__(message)
        self.field = field


_DEFAULT = re.compile(r"job-(\d{1,18})")


def output_dir_of(job: Any) -> str:
    """A job's (or a JobSpec's) declared output folder; "": its result is in its checkpoint
    folder (docs/results.md)."""
    return str((job.result_contract or {}).get("output_dir") or "")


def folders_of(checkpoint: str, output: str, who: int | str) -> list[Claim]:
    """A job's claims: its chosen checkpoint folder and its declared output folder."""
    pairs = ((checkpoint, CHECKPOINT), (output, OUTPUT))
    return [Claim(path, kind, who) for path, kind in pairs if path]


def claims_near(workspace_id: int, folders: Iterable[str]) -> list[Claim]:
    """The claims (checkpoint and output folders) of the workspace's jobs that `folders`
    may overlap. One query."""
    folders = sorted({f for f in folders if f})
    if not folders:
        return []
    near = sorted({a for f in folders for a in ancestors(f)} | set(folders))
    roots = [f for f in folders if not any(f.startswith(o + "/") for o in folders)]
    uses = Q(checkpoint_dir__in=near) | Q(**{f"{_OUTPUT}__in": near})
    for root in roots:
        uses |= Q(checkpoint_dir__startswith=root + "/")
        uses |= Q(**{f"{_OUTPUT}__startswith": root + "/"})
    defaults = [int(m.group(1)) for f in near if (m := _DEFAULT.fullmatch(f))]
    if defaults:
        uses |= Q(pk__in=defaults, checkpoint_dir="")
    holds = Checkpoint.objects.filter(job=OuterRef("pk"), committed=True, pruned_at__isnull=True)
    accepted = ResultUnit.objects.filter(job=OuterRef("pk"))
    rows = (
        Job.objects.filter(uses, workspace_id=workspace_id)
        .annotate(holds=Exists(holds), accepted=Exists(accepted))
        .order_by("pk")
        .values_list("pk", "checkpoint_dir", _OUTPUT, "status", "holds", "accepted")
    )
    claims = []
    for pk, folder, output, status, held, results in rows:
        kept = status in ACTIVE_JOB_STATUSES or held or results
        for claim in folders_of(folder or f"job-{pk}", str(output or ""), pk):
            if claim.path in folders or kept:
                claims.append(claim)
    return claims


def folder_conflict(
    workspace_id: int, wanted: Sequence[Claim], pending: Iterable[Claim] = ()
) -> Conflict | None:
    """The first claim that one of `wanted` (a new job's folders, `folders_of`) overlaps:
    another job's, or one of `pending` (earlier items of the same batch), or None. The
    conflict's `kind` says which of the new job's folders (`FIELD_OF`). One query."""
    wanted = [c for c in wanted if c.path]
    if not wanted:
        return None
    claims = [*pending, *claims_near(workspace_id, [c.path for c in wanted])]
    return next((found for new in wanted if (found := conflict(new, claims))), None)


class FolderRaced(FolderTaken):
    """Another submission took an overlapping folder after this one was validated."""

    def __init__(self, index: int, message: str, field: str = FIELD_OF[CHECKPOINT]) -> None:
        super().__init__(message, field)
        self.index = index  # which item of the batch


def claim_folders(items: Sequence[tuple[int, str, str]]) -> None:
    """Inside the transaction that creates these jobs, (workspace id, checkpoint folder,
    output folder) each: the workspaces' rows locked (PostgreSQL: a second submission to
    the same workspace waits here until this one commits), then every folder judged again
    against the claims as they are now and the batch's earlier items. Closes the race of
    two submissions each validated before the other committed. FolderRaced for the first
    conflict. One query to lock and one a workspace; none without a folder."""
    wanted: dict[int, list[tuple[int, list[Claim]]]] = {}
    for index, (workspace_id, folder, output) in enumerate(items):
        if mine := folders_of(folder, output, f"item {index}"):
            wanted.setdefault(workspace_id, []).append((index, mine))
    if not wanted:
        return
    # Ordered by id: two batches over the same workspaces lock them in one order.
    locked = Workspace.objects.select_for_update().filter(pk__in=sorted(wanted)).order_by("pk")
    list(locked.values_list("pk", flat=True))
    for workspace_id, jobs in wanted.items():
        claims = claims_near(workspace_id, [c.path for _, mine in jobs for c in mine])
        for index, mine in jobs:
            for new in mine:
                found = conflict(new, claims)
                if found is not None:
                    raise FolderRaced(index, found.message(), FIELD_OF[new.kind])
            who = f"an earlier job of this batch ({index})"
            claims.extend(Claim(c.path, c.kind, who) for c in mine)


def array_folders(
    workspace_id: int, base: str, count: int, output: str = ""
) -> list[tuple[str, str]]:
    """(checkpoint folder, output folder) of each copy of an array: copy i checkpoints to
    <folder>/<i> and writes its result to <output>/<i>, so copies never share a folder, and
    no copy's folder overlaps another job's, nor another copy's."""
    folders = [
        (f"{base}/{index}" if base else "", f"{output}/{index}" if output else "")
        for index in range(count)
    ]
    for name, given, last in zip(FIELD_OF.values(), (base, output), folders[-1], strict=True):
        if len(last) > limits.CHECKPOINT_DIR:
            raise FolderTaken(f"{name} is too long for {count} copies ({given}/<index>).", name)
    claims = claims_near(workspace_id, [f for pair in folders for f in pair])
    for index, (folder, out) in enumerate(folders):
        mine = folders_of(folder, out, f"copy {index}")
        for new in mine:
            found = conflict(new, claims)
            if found is not None:
                raise FolderTaken(f"{new.path}: {found.message()}", FIELD_OF[new.kind])
        claims.extend(mine)
    return folders
