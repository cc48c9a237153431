"""Checkpoints and progress of Kubernetes workers, read on the shared checkpoint volume
(docs/kubernetes.md). The console mounts the volume its workers mount (at
KUBE_CHECKPOINT_ROOT; in the workers at KUBE_CHECKPOINT_MOUNT) and scans it as the agent
scans its node's disk (protocol.volumes); paths are recorded as the workers see them, so a
new attempt's RESUME_FROM names a folder inside its container."""

import errno
from collections.abc import Mapping
from pathlib import Path

from kube.config import KubeConfig
from kube.manifest import checkpoint_folder, progress_path
from protocol.agent import CheckpointReport, ProgressReport, RunFacts, UnitReport
from protocol.freespace import free_space_problem
from protocol.hashing import manifest_file
from protocol.inputs import inputs_facts
from protocol.outputs import (
    OutputPaths,
    output_paths,
    promote,
    rename_problem,
    write_accepted_file,
)
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


def _outputs(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str, attempt: int, output: str
) -> OutputPaths | None:
    """The attempt's output folders as the console sees them (shared by its workers); a
    declared `output` folder is the result folder, resolved as the checkpoint folder is."""
    if not config.checkpoint_root:
        return None
    folder = _local(config, checkpoint_folder(config, workspace_id, job_id, subdir))
    result = _local(config, checkpoint_folder(config, workspace_id, job_id, output))
    if folder is None or result is None:
        return None
    return output_paths(folder, job_id, attempt, result if output else None)


def prepare_outputs(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str, attempt: int, output=""
) -> str:
    """Before a worker's Pod is created, as the agent does before a start: the staging and
    result folders, and ACCEPTED_UNITS_FILE with the units accepted so far. Returns the
    result folder's path here ("" : none). OSError (EXDEV) for a declared output folder a
    rename from the staging folder cannot reach (docs/results.md)."""
    paths = _outputs(config, workspace_id, job_id, subdir, attempt, output)
    if paths is None:
        return ""
    paths.staging.mkdir(parents=True, exist_ok=True)
    paths.result.mkdir(parents=True, exist_ok=True)
    if output and (problem := rename_problem(paths)):
        raise OSError(errno.EXDEV, problem)
    write_accepted_file(paths)
    return str(paths.result)


def promote_units(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str, attempt: int, output=""
) -> tuple[list[UnitReport], str]:
    """The units the attempt's workers accepted since the last step, verified and promoted
    (protocol.outputs.promote, the agent's rule), and the result folder's path here."""
    paths = _outputs(config, workspace_id, job_id, subdir, attempt, output)
    if paths is None or not paths.staging.is_dir():
        return [], ""
    return promote(paths, attempt), str(paths.result)


def data_folders(config: KubeConfig, workspace_id: int, data: Mapping[str, str]) -> dict[str, str]:
    """A job's data folders on the console's mount of the volume (name → folder here). A
    folder that leaves the root or is missing is left out (the Pod's mount fails there)."""
    if not config.checkpoint_root:
        return {}
    folders = {}
    for name, folder in data.items():
        local = _local(config, f"{config.checkpoint_mount}/ws-{workspace_id}/{folder}")
        if local is not None and local.is_dir():
            folders[name] = str(local)
    return folders


def data_inputs(
    config: KubeConfig, workspace_id: int, data: Mapping[str, str]
) -> tuple[RunFacts, str]:
    """The fingerprint of a job's data folders on the volume (protocol.inputs, the agent's
    rule) before its Pod is created, and a note when they were too many files."""
    folders = data_folders(config, workspace_id, data)
    return inputs_facts(folders) if folders else (RunFacts(), "")


def inputs_manifest(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str, attempt: int
) -> Path | None:
    """Where the attempt's content manifest goes on the volume (protocol.hashing, the
    agent's place: beside its ACCEPTED_UNITS_FILE); None without the console's mount."""
    paths = _outputs(config, workspace_id, job_id, subdir, attempt, "")
    return manifest_file(paths) if paths is not None else None


def _inside(config: KubeConfig, local: Path) -> str:
    """A path under the console's root as the workers see it (inside their mount)."""
    root = str(Path(config.checkpoint_root).resolve())
    return config.checkpoint_mount + str(local)[len(root) :]


def output_space_problem(
    config: KubeConfig,
    workspace_id: int,
    job_id: int,
    subdir: str,
    attempt: int,
    expected_gb: int | None,
    output: str = "",
) -> str:
    """Before a worker's Pod (docs/results.md, "Before a long run"): the free space of the
    filesystem its OUTPUT_DIR lies on, measured on the console's mount of the volume by the
    agent's rule (protocol.freespace), named as the worker sees it. "" when there is room,
    or when the console cannot tell (no mount, a filesystem it cannot measure)."""
    paths = _outputs(config, workspace_id, job_id, subdir, attempt, output)
    if paths is None:
        return ""
    return free_space_problem(
        paths.staging, expected_gb, shown=_inside(config, paths.staging.resolve())
    )


def result_folder(
    config: KubeConfig, workspace_id: int, job_id: int, subdir: str, output: str = ""
) -> str:
    """The run's result folder as the workers see it (where the validator runs: docs/results.md,
    "The validator"); "" when the console does not see the volume."""
    paths = _outputs(config, workspace_id, job_id, subdir, 1, output)
    return _inside(config, paths.result.resolve()) if paths is not None else ""
