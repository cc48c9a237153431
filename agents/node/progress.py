"""Agent side of progress and checkpoints (docs/fault-tolerance.md): where each worker writes them,
and reading them back for the heartbeat.

Each worker gets `PROGRESS_FILE` (a small JSON file the SDK replaces atomically; the agent
reads the newest at each heartbeat) and `CHECKPOINT_DIR`. Checkpoints belong to their
workspace: each workspace has its own area of the checkpoint root
(`<state dir>/checkpoints/ws-<workspace id>/`), a job's folder is `job-<id>` there by
default or the folder the job names, which must stay inside that area (symlinks resolved),
and a worker resumes only from a checkpoint inside it. Nothing of another workspace can be
named, read or resumed from. The scan
reports only checkpoints whose manifest is complete and whose files exist with the sizes the
manifest names; their checksum is the sha256 of the manifest itself (cheap; the SDK verifies
every file's sha256 on resume). Everything read here is the job's output: hostile input,
validated by the protocol schemas and dropped when invalid.
"""

import logging
from pathlib import Path

# Reading what workers write (progress files, checkpoint manifests) is shared with the
# console's Kubernetes controller, which scans the same files on a shared volume.
from protocol.volumes import (  # noqa: F401
    MAX_MANIFEST_BYTES,
    MAX_PROGRESS_BYTES,
    _committed,
    read_progress,
    scan_checkpoints,
)

log = logging.getLogger(__name__)


class BadCheckpointDir(ValueError):
    """The job asked for a checkpoint folder outside the agent's checkpoint root."""


def progress_file(state_dir: Path, pod_id: int, attempt: int) -> Path:
    return Path(state_dir) / "progress" / f"pod-{pod_id}-{attempt}.json"


def checkpoint_root(state_dir: Path) -> Path:
    return Path(state_dir) / "checkpoints"


def workspace_area(state_dir: Path, workspace_id: int) -> Path:
    """A workspace's area of the checkpoint root (the whole root for workspace 0: a spec
    from an older console, which names none)."""
    root = checkpoint_root(state_dir)
    return root / f"ws-{workspace_id}" if workspace_id else root


def inside(path: Path, area: Path) -> bool:
    """Whether `path` resolves strictly inside `area` (symlinks resolved)."""
    real_area = Path(area).resolve()
    real = Path(path).resolve()
    return real != real_area and real_area in real.parents


def checkpoint_dir(state_dir: Path, job_id: int, subdir: str = "", workspace_id: int = 0) -> Path:
    """The job's checkpoint folder, inside its workspace's area; a `subdir` must resolve
    inside that area (BadCheckpointDir otherwise)."""
    area = workspace_area(state_dir, workspace_id)
    area.mkdir(parents=True, exist_ok=True, mode=0o770)
    folder = area / (subdir or f"job-{job_id}")
    if not inside(folder, area):
        raise BadCheckpointDir(
            f"checkpoint folder {subdir!r} is outside this workspace's area {area}"
        )
    return folder.resolve()


def resolve_resume(
    folder: Path, resume_from: str, attempt: int, area: Path | None = None
) -> tuple[str, str]:
    """The checkpoint a new attempt resumes from, and a note for its log when it differs.

    The console names the newest checkpoint it knew when it restarted the job. A stale worker
    of the old attempt (its node was cut off, so it trained on and pruned old checkpoints)
    may have deleted that one before this launch. Then the newest committed checkpoint an
    earlier attempt left in the folder is used instead (complete manifest, so a consistent
    state), rather than failing the restart; the console still records no checkpoint of an
    old attempt as the new attempt's.

    A resume point outside the workspace's `area` is never used (nor read)."""
    if resume_from and area is not None and not inside(Path(resume_from), area):
        return (
            "",
            f"resume point {resume_from} is outside this workspace's checkpoint area: ignored",
        )
    if not resume_from or _committed(Path(resume_from)) is not None:
        return resume_from, ""
    earlier = [c for c in scan_checkpoints(folder) if (c.attempt or 0) < attempt]
    if not earlier:
        return resume_from, ""  # nothing better: the SDK reports the missing checkpoint
    return earlier[0].path, f"{resume_from} is gone (pruned); resuming from {earlier[0].path}"
