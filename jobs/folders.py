"""Whose checkpoint folder is it: a folder of a workspace's checkpoint area belongs to one
job and its restarts, and no other job's folder may be equal to it, inside it or enclose it
(docs/fault-tolerance.md, "Checkpoint folders"). The rule is pure (`policy.folders`); this
loads the claims it judges, in one query for a job or a whole array.

Claims: every job of the workspace whose folder (chosen, or its default job-<id>) equals a
new one; and, for folders inside or enclosing it, the jobs still live or whose folder
holds committed checkpoints or accepted result units (docs/results.md: the result lies in
the job's folder; a finished job with neither has nothing left to prune or lose).
"""

import re
from collections.abc import Iterable, Sequence

from django.db.models import Exists, OuterRef, Q

from jobs.models import Checkpoint, Job, ResultUnit
from policy.folders import Claim, Conflict, ancestors, conflict
from policy.statuses import ACTIVE_JOB_STATUSES
from protocol import limits
from quotas.models import Workspace


class FolderTaken(ValueError):
    """A checkpoint folder another job's overlaps (the message says which)."""


_DEFAULT = re.compile(r"job-(\d{1,18})")
CHECKPOINT = "checkpoint"


def claims_near(workspace_id: int, folders: Iterable[str]) -> list[Claim]:
    """The claims of the workspace's jobs that `folders` may overlap. One query."""
    folders = sorted({f for f in folders if f})
    if not folders:
        return []
    near = {a for f in folders for a in ancestors(f)} | set(folders)
    roots = [f for f in folders if not any(f.startswith(o + "/") for o in folders)]
    uses = Q(checkpoint_dir__in=sorted(near))
    for root in roots:
        uses |= Q(checkpoint_dir__startswith=root + "/")
    defaults = [int(m.group(1)) for f in near if (m := _DEFAULT.fullmatch(f))]
    if defaults:
        uses |= Q(pk__in=defaults, checkpoint_dir="")
    holds = Checkpoint.objects.filter(job=OuterRef("pk"), committed=True, pruned_at__isnull=True)
    accepted = ResultUnit.objects.filter(job=OuterRef("pk"))
    rows = (
        Job.objects.filter(uses, workspace_id=workspace_id)
        .annotate(holds=Exists(holds), accepted=Exists(accepted))
        .order_by("pk")
        .values_list("pk", "checkpoint_dir", "status", "holds", "accepted")
    )
    claims = []
    for pk, folder, status, held, results in rows:
        path = folder or f"job-{pk}"
        if path in folders or status in ACTIVE_JOB_STATUSES or held or results:
            claims.append(Claim(path, CHECKPOINT, pk))
    return claims


def folder_conflict(
    workspace_id: int, folder: str, pending: Iterable[Claim] = ()
) -> Conflict | None:
    """The claim `folder` (a new job's) overlaps: another job's, or one of `pending`
    (earlier items of the same batch), or None."""
    if not folder:
        return None
    new = Claim(folder, CHECKPOINT, "this job")
    return conflict(new, [*pending, *claims_near(workspace_id, [folder])])


class FolderRaced(FolderTaken):
    """Another submission took an overlapping folder after this one was validated."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index  # which item of the batch


def claim_folders(items: Sequence[tuple[int, str]]) -> None:
    """Inside the transaction that creates these jobs, (workspace id, folder) each: the
    workspaces' rows locked (PostgreSQL: a second submission to the same workspace waits
    here until this one commits), then every folder judged again against the claims as
    they are now and the batch's earlier items. Closes the race of two submissions each
    validated before the other committed. FolderRaced for the first conflict. One query
    to lock and one a workspace; none without a folder."""
    wanted: dict[int, list[tuple[int, str]]] = {}
    for index, (workspace_id, folder) in enumerate(items):
        if folder:
            wanted.setdefault(workspace_id, []).append((index, folder))
    if not wanted:
        return
    # Ordered by id: two batches over the same workspaces lock them in one order.
    locked = Workspace.objects.select_for_update().filter(pk__in=sorted(wanted)).order_by("pk")
    list(locked.values_list("pk", flat=True))
    for workspace_id, folders in wanted.items():
        claims = claims_near(workspace_id, [f for _, f in folders])
        for index, folder in folders:
            found = conflict(Claim(folder, CHECKPOINT, f"item {index}"), claims)
            if found is not None:
                raise FolderRaced(index, found.message())
            claims.append(Claim(folder, CHECKPOINT, f"an earlier job of this batch ({index})"))


def array_folders(workspace_id: int, base: str, count: int) -> list[str]:
    """Copy i of an array checkpoints to <folder>/<i>: copies never share a folder, and no
    copy's folder overlaps another job's."""
    if not base:
        return [""] * count
    folders = [f"{base}/{index}" for index in range(count)]
    if len(folders[-1]) > limits.CHECKPOINT_DIR:
        raise FolderTaken(f"checkpoint_dir is too long for {count} copies ({base}/<index>).")
    claims = claims_near(workspace_id, folders)
    for index, folder in enumerate(folders):
        found = conflict(Claim(folder, CHECKPOINT, f"copy {index}"), claims)
        if found is not None:
            raise FolderTaken(f"{folder}: {found.message()}")
    return folders
