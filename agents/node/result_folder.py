"""Where a worker's accepted units go on this node (docs/results.md): the attempt's staging
folder beside the job's checkpoint folder, and the run's result folder, `output/result/` of
the checkpoint folder or the output folder the job declared.

A declared output folder is resolved in the workspace's area exactly as the checkpoint
folder is (`agents.node.progress.checkpoint_dir`: it must resolve inside the area, symlinks
resolved), and must take the staged units by a rename (the same filesystem and mount as
the staging folder: `protocol.outputs.rename_problem`). Either refusal fails the launch
with its reason, before anything runs.
"""

from pathlib import Path

from agents.node.progress import BadCheckpointDir, inside, workspace_area
from protocol.agent import WorkerSpec
from protocol.outputs import OutputPaths, output_paths, rename_problem, write_accepted_file


def declared_result(state_dir: Path, spec: WorkerSpec) -> Path | None:
    """The job's declared output folder on this node (None: none declared);
    BadCheckpointDir when it resolves outside the workspace's area."""
    if not spec.output_subdir:
        return None
    area = workspace_area(state_dir, spec.workspace_id)
    area.mkdir(parents=True, exist_ok=True, mode=0o770)
    folder = area / spec.output_subdir
    if not inside(folder, area):
        raise BadCheckpointDir(
            f"output folder {spec.output_subdir!r} is outside this workspace's area {area}"
        )
    return folder.resolve()


def prepare(state_dir: Path, spec: WorkerSpec, checkpoints: Path) -> OutputPaths:
    """The attempt's output folders, made, and ACCEPTED_UNITS_FILE written with the units
    the result folder holds (the program skips them). BadCheckpointDir for a declared
    folder outside the area or one a rename cannot reach."""
    declared = declared_result(state_dir, spec)
    paths = output_paths(checkpoints, spec.job_id, spec.attempt, declared)
    paths.staging.mkdir(parents=True, exist_ok=True)
    paths.result.mkdir(parents=True, exist_ok=True)
    if declared is not None:
        problem = rename_problem(paths)
        if problem:
            raise BadCheckpointDir(problem)
    write_accepted_file(paths)
    return paths
