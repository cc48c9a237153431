"""Whose checkpoint folder is it: a folder of a workspace's checkpoint area belongs to one
job and its restarts (docs/fault-tolerance.md, "Checkpoint folders")."""

import re

from django.db.models import Q

from jobs.models import Job
from protocol import limits


class FolderTaken(ValueError):
    """A checkpoint folder another job uses (the message says which)."""


_DEFAULT = re.compile(r"job-(\d{1,18})")


def folder_owner(workspace_id: int, folder: str) -> int | None:
    """The job of this workspace that already uses `folder` (as its chosen folder, or as
    its default job-<id>), or None. One indexed query."""
    if not folder:
        return None
    default = _DEFAULT.fullmatch(folder)
    uses = Q(checkpoint_dir=folder)
    if default:
        uses |= Q(pk=int(default.group(1)), checkpoint_dir="")
    return (
        Job.objects.filter(uses, workspace_id=workspace_id)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


def folders_in_use(workspace_id: int, folders: list[str]) -> dict[str, int]:
    """Which of `folders` (chosen folders, none of them a default job-<id>) a job of this
    workspace already uses, and by which job. One query for a whole array."""
    rows = (
        Job.objects.filter(workspace_id=workspace_id, checkpoint_dir__in=folders)
        .order_by("pk")
        .values_list("checkpoint_dir", "pk")
    )
    found: dict[str, int] = {}
    for folder, pk in rows:
        found.setdefault(folder, pk)
    for folder in folders:
        if folder in found or not _DEFAULT.fullmatch(folder):
            continue
        if (owner := folder_owner(workspace_id, folder)) is not None:
            found[folder] = owner  # a default job-<id> folder (rare: one query each)
    return found


def array_folders(workspace_id: int, base: str, count: int) -> list[str]:
    """Copy i of an array checkpoints to <folder>/<i>: copies never share a folder."""
    if not base:
        return [""] * count
    folders = [f"{base}/{index}" for index in range(count)]
    if len(folders[-1]) > limits.CHECKPOINT_DIR:
        raise FolderTaken(f"checkpoint_dir is too long for {count} copies ({base}/<index>).")
    taken = folders_in_use(workspace_id, folders)
    if taken:
        folder, owner = next(iter(taken.items()))
        raise FolderTaken(f"Job #{owner} already uses {folder}; choose another checkpoint_dir.")
    return folders
