"""Checkpoints and progress of Kubernetes workers, read on the shared checkpoint volume
(docs/kubernetes.md). The console mounts the volume its workers mount (at
KUBE_CHECKPOINT_ROOT; in the workers at KUBE_CHECKPOINT_MOUNT) and scans it as the agent
scans its node's disk (protocol.volumes); paths are recorded as the workers see them, so a
new attempt's RESUME_FROM names a folder inside its container."""

from pathlib import Path

from kube.config import KubeConfig
from kube.manifest import checkpoint_folder, progress_path
from protocol.agent import CheckpointReport, ProgressReport
from protocol.volumes import read_progress, scan_checkpoints


def _local(config: KubeConfig, path: str) -> Path | None:
    """The console's path of a path inside the workers, or None when it leaves the root."""
    root = Path(config.checkpoint_root).resolve()
    local = (root / path[len(config.checkpoint_mount) :].lstrip("/")).resolve()
    return local if local == root or root in local.parents else None


def job_checkpoints(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str
) -> list[CheckpointReport]:
    if not config.checkpoint_root:
        return []
    folder = _local(config, checkpoint_folder(config, workspace_id, job_id, subdir))
    if folder is None:
        return []
    root = str(Path(config.checkpoint_root).resolve())
    return [
        report.model_copy(update={"path": config.checkpoint_mount + report.path[len(root) :]})
        for report in scan_checkpoints(folder)
        if report.path.startswith(root)
    ]


def worker_progress(
    config: KubeConfig, workspace_id: int, pod_id: int, attempt: int
) -> ProgressReport | None:
    if not config.checkpoint_root:
        return None
    path = _local(config, progress_path(config, workspace_id, pod_id, attempt))
    return read_progress(path) if path is not None else None
