"""What this node has launched, and the worker reports the heartbeat carries
(docs/agent-protocol.md, docs/traps.md).

The ledger is the agent's memory of every pod it launched (`workers.json` in the state dir,
written *before* each launch, so no crash can lead to a second launch of one pod), plus the
paths each worker writes progress and checkpoints to. It turns what the runtime holds into
the heartbeat's worker reports, and keeps reporting an exit until the console has it.
"""

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from agents.node import mpi_launch, result_folder
from agents.node.checkout import CheckoutFailed, checkout
from agents.node.gpus import GpuInfo, worker_gpu_usage
from agents.node.identity import process_facts
from agents.node.progress import (
    BadCheckpointDir,
    checkpoint_dir,
    inside,
    progress_file,
    read_progress,
    resolve_resume,
    scan_checkpoints,
    workspace_area,
)
from agents.node.room import NodeRefused, ResumeRefused, free_space_problem
from agents.node.runtimes.base import LaunchSpec, WorkerState
from agents.node.state import LaunchRecord, StateStore
from agents.node.validator import NOT_RUN_HERE, Validation, not_run
from agents.node.validator import poll as poll_validator
from agents.node.validator import start as start_validator
from protocol import limits, preflight
from protocol.agent import (
    ENDED_BY,
    EndedBy,
    GpuUsage,
    RunFacts,
    UnitReport,
    ValidatorReport,
    WorkerReport,
    WorkerSpec,
)
from protocol.inputs import inputs_facts
from protocol.outputs import OutputPaths, promote, promoted_units, staging_paths
from protocol.units import resume_refusal

log = logging.getLogger(__name__)

GPU_METRICS_EVERY = 30.0  # seconds between a worker's GPU samples
DISAPPEARED = "worker process disappeared"


def data_folders(area: Path, data: dict[str, str]) -> dict[str, str]:
    """The job's read-only data folders on this node (docs/distributed.md): each must be an
    existing folder inside the workspace's area, as a checkpoint folder must (symlinks
    resolved); BadCheckpointDir otherwise."""
    found: dict[str, str] = {}
    for name, folder in data.items():
        path = Path(area) / folder
        if not inside(path, area):
            raise BadCheckpointDir(f"data folder {folder!r} is outside this workspace's area")
        if not path.is_dir():
            raise BadCheckpointDir(f"data folder {folder!r} does not exist on this node")
        found[name] = str(path.resolve())
    return found


class Ledger:
    def __init__(self, store: StateStore, runtime: Any = "") -> None:
        """`runtime`: the agent's runtime, or its name; one that can run a validator in a
        container (docker: `start_validator`) runs it there."""
        self.store = store
        self.launched: dict[int, LaunchRecord] = store.load_launched()
        # pod id → (progress file, checkpoint folder) of workers this run knows about.
        self._ft_paths: dict[int, tuple[Path, Path]] = {}
        self._gpu_metrics_at: dict[int, float] = {}
        self._refusals: dict[int, int] = {}  # pod id → refusals in a row
        # Results (docs/results.md): each worker's output folders, its run facts until
        # delivered, and the units it accepted that the console has not acknowledged.
        self._outputs: dict[int, tuple[int, OutputPaths]] = {}
        self._facts: dict[int, RunFacts] = {}
        self._units: dict[int, list[UnitReport]] = {}
        self._validations: dict[int, Validation] = {}  # validators running (rank 0)
        self._runtime = getattr(runtime, "name", runtime)  # a validator runs under "process"
        self._in_container = getattr(runtime, "start_validator", None)  # or in the image

    def save(self) -> None:
        self.store.save_launched(self.launched)

    # --- launching --------------------------------------------------------------------
    def record_launch(self, pod_id: int, attempt: int) -> LaunchRecord | None:
        """Write-ahead: record the pod before it is launched. None when the record could
        not be written (e.g. disk full): then it must not be launched now."""
        return self.record_launches([(pod_id, attempt)]).get(pod_id)

    def record_launches(self, pods: list[tuple[int, int]]) -> dict[int, LaunchRecord]:
        """Write-ahead for a batch of (pod id, attempt): all recorded in one write before
        any is launched. Empty when the write failed (e.g. disk full): then none of them
        may be launched now (they are retried at the next heartbeat)."""
        records = {pod_id: LaunchRecord(attempt=attempt) for pod_id, attempt in pods}
        if not records:
            return {}
        self.launched.update(records)
        try:
            self.save()
        except OSError as exc:
            for pod_id in records:
                del self.launched[pod_id]
            log.error(
                "cannot record pods %s before launching them (%s); will retry",
                sorted(records),
                exc,
            )
            return {}
        return records

    def record_unlaunched(self, pod_id: int, attempt: int, error: str) -> None:
        """A pod this node will never run (no such GPU, stopped before it was launched):
        reported as ended with `error` so the console can finish it."""
        self.launched[pod_id] = LaunchRecord(attempt=attempt, error=error[:500])

    def launch_spec(
        self, spec: WorkerSpec, *, state_dir: Path, runtime: str, node: str,
        content: RunFacts | None = None,
    ) -> tuple[LaunchSpec, str]:  # fmt: skip
        """The launch spec with PROGRESS_FILE, CHECKPOINT_DIR and RESUME_FROM (agents.sdk),
        and a note for the worker's log when the resume point had to change. Raises
        BadCheckpointDir for a folder outside the checkpoint root."""
        progress = progress_file(state_dir, spec.pod_id, spec.attempt)
        folder = checkpoint_dir(
            state_dir, spec.job_id, spec.checkpoint_subdir, workspace_id=spec.workspace_id
        )
        if runtime == "docker":  # only the checkpoint folder is mounted
            progress = folder / ".progress" / progress.name
        progress.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        problem = free_space_problem(folder, spec.expected_output_gb)
        if problem:  # before anything is checked out or run (docs/results.md)
            raise NodeRefused(f"refused to start on this node: {problem}")
        self._ft_paths[spec.pod_id] = (progress, folder)
        record = self.launched.get(spec.pod_id)
        if record is not None:  # kept in workers.json for adoption after an agent restart
            record.progress_file, record.checkpoint_dir = str(progress), str(folder)
        launch = LaunchSpec.from_worker_spec(spec, node=node)
        env = {**launch.env, "PROGRESS_FILE": str(progress), "CHECKPOINT_DIR": str(folder)}
        env.update(self._outputs_of(spec, result_folder.prepare(state_dir, spec, folder), record))
        self._runtime = runtime
        if record is not None and spec.rank == 0 and spec.result_validator:
            record.validator, record.validator_env = spec.result_validator, dict(env)
            record.validator_image = spec.image
        if runtime != "docker":
            self.note_facts(spec.pod_id, process_facts(spec.command, env))
        area = workspace_area(state_dir, spec.workspace_id)
        resume, note = resolve_resume(folder, spec.resume_from, spec.attempt, area)
        if resume:
            env["RESUME_FROM"] = resume
        if spec.code_repo:  # the job's code at the commit its ref names now
            try:
                code, commit = checkout(
                    state_dir, spec.pod_id, spec.attempt, spec.code_repo, spec.code_ref
                )
            except CheckoutFailed as exc:
                raise BadCheckpointDir(f"code checkout failed: {exc}") from None
            env.update(CODE_DIR=str(code), CODE_COMMIT=commit)
            # The run's code version (docs/results.md) is the commit checked out.
            self.note_facts(spec.pod_id, RunFacts(code_version=commit))
            shown = f"{spec.code_repo}@{spec.code_ref or 'HEAD'}"
            note = "; ".join(filter(None, [note, f"code: {shown} checked out at commit {commit}"]))
        data = data_folders(area, spec.data)
        if data:  # the run's inputs, as found on this node (docs/results.md, "Run identity")
            inputs, skipped = inputs_facts(data)
            self.note_facts(spec.pod_id, inputs)
            note = "; ".join(filter(None, [note, skipped]))
        if content is not None:  # their content, hashed before (agents.node.hashing)
            self.note_facts(spec.pod_id, content)
        refusal = resume_refusal(spec.resume_identity, self._facts.get(spec.pod_id, RunFacts()))
        if refusal:  # docs/results.md, "Resume without duplicates"
            raise ResumeRefused(refusal)
        command = launch.command
        role = mpi_launch.role_of(spec.rendezvous)  # docs/distributed.md, "MPI jobs"
        if preflight.wanted(spec) and role in ("", "launcher"):  # docs/results.md
            env[preflight.COMMAND_ENV] = spec.command
            command = preflight.wrapped(spec.preflight_seconds or 0)
        if role:
            env[mpi_launch.COMMAND_ENV] = command
            command = mpi_launch.wrapped(role, runtime)
        return dataclasses.replace(launch, env=env, data=data, command=command), note

    def _outputs_of(
        self, spec: WorkerSpec, paths: OutputPaths, record: LaunchRecord | None
    ) -> dict[str, str]:
        """OUTPUT_DIR (this attempt's staging folder) and ACCEPTED_UNITS_FILE (the units
        accepted so far, which the program skips), of the folders `result_folder` made."""
        pod_id, attempt = spec.pod_id, spec.attempt
        if record is not None:  # kept in workers.json for adoption after an agent restart
            record.output_dir, record.result_dir = str(paths.staging), str(paths.result)
        self._outputs[pod_id] = (attempt, paths)
        self._facts[pod_id] = RunFacts(result_dir=str(paths.result))
        return {"OUTPUT_DIR": str(paths.staging), "ACCEPTED_UNITS_FILE": str(paths.accepted_file)}

    def note_facts(self, pod_id: int, facts: RunFacts) -> None:
        """Facts resolved at launch (docker: the image's id), joined to those known."""
        known = self._facts.get(pod_id, RunFacts())
        self._facts[pod_id] = known.model_copy(update=facts.model_dump(exclude_defaults=True))

    # --- after an agent restart -------------------------------------------------------
    def adopt(self, pod_id: int, attempt: int) -> None:
        """The runtime still has this worker from a previous agent run: report it again."""
        record = self.launched.get(pod_id)
        if record is None or record.attempt != attempt:
            # Not in workers.json (lost state dir, or a crash right after launch): report
            # it all the same and let the console decide (it fences stale ones).
            log.warning("adopting pod %s attempt %s, unknown to workers.json", pod_id, attempt)
            self.launched[pod_id] = record = LaunchRecord(attempt=attempt)
        elif record.finished:
            record.finished = False  # reported, but not forgotten: report it again
        if record.progress_file and record.checkpoint_dir:
            self._ft_paths[pod_id] = (Path(record.progress_file), Path(record.checkpoint_dir))
        if record.output_dir:
            declared = Path(record.result_dir) if record.result_dir else None
            paths = staging_paths(Path(record.output_dir), declared)
            self._outputs[pod_id] = (attempt, paths)
            # Units this attempt promoted may not have reached the console before the
            # previous agent run ended: report them again (the console stores each once).
            self._units[pod_id] = promoted_units(paths)
            self._facts[pod_id] = RunFacts(result_dir=str(paths.result))

    def orphans(self, adopted) -> dict[int, LaunchRecord]:
        """Recorded, unfinished pods the runtime no longer has: reported as disappeared."""
        lost = {
            p: r
            for p, r in self.launched.items()
            if not (r.finished or r.preparing) and p not in adopted
        }
        for record in lost.values():
            record.error = record.error or DISAPPEARED
        return lost

    def unprepared(self, adopted) -> set[int]:
        """Pods a previous agent run was hashing the inputs of (agents.node.hashing): never
        launched, so forgotten; the console's next reply starts them again."""
        again = {p for p, r in self.launched.items() if r.preparing and p not in adopted}
        for pod_id in again:
            del self.launched[pod_id]
        return again

    def relist(self, pod_ids) -> bool:
        """The console still lists these pods as live. One whose exit was reported is
        reported again (the console did not manage to apply it): never launched again.
        Returns whether anything changed."""
        changed = False
        for pod_id in pod_ids:
            record = self.launched.get(pod_id)
            if record is not None and record.finished:
                log.warning("console still lists pod %s, which exited; reporting again", pod_id)
                record.finished = False
                changed = True
        return changed

    # --- refusals ---------------------------------------------------------------------
    def note_refusals(self, refused: dict[int, str], sent: list[int]) -> list[tuple[int, str]]:
        """The console refused (or repaired) these pods' reports. A pod refused
        REFUSALS_BEFORE_SET_ASIDE times in a row is set aside: from then on its reports carry
        only its state and exit code, which are always valid. Returns the pods set aside
        now, with the reason."""
        for pod_id in sent:
            if pod_id not in refused:
                self._refusals.pop(pod_id, None)
        newly: list[tuple[int, str]] = []
        for pod_id, reason in refused.items():
            record = self.launched.get(pod_id)
            if record is None or record.set_aside:
                continue
            count = self._refusals[pod_id] = self._refusals.get(pod_id, 0) + 1
            if count >= limits.REFUSALS_BEFORE_SET_ASIDE:
                record.set_aside = reason[: limits.REASON] or "refused"
                newly.append((pod_id, record.set_aside))
        if newly:
            self.save()
        return newly

    # --- reports ----------------------------------------------------------------------
    def reports(
        self, held: dict[int, WorkerState], gpus: list[GpuInfo], *, bare: bool = False
    ) -> tuple[list[WorkerReport], list[int]]:
        """Every unfinished pod's report (running or exited), and which of them exited.
        `bare`: every report without details (the console keeps failing on heartbeats)."""
        reports: list[WorkerReport] = []
        exited: list[int] = []
        for pod_id, record in self.launched.items():
            if record.finished or record.preparing:
                continue  # reported, or its inputs are being hashed: not launched yet
            state = held.get(pod_id)
            if state is not None and state.starting:
                continue  # pulling its image: not running yet, nothing to report
            if state is not None and state.ended_by and not record.ended_by:
                record.ended_by = state.ended_by  # the runtime refused it (after a pull)
            if bare or record.set_aside:
                report = _bare_report(pod_id, record, state)
                reports.append(report)
                if report.state == "exited":
                    exited.append(pod_id)
                continue
            progress, checkpoints = self.progress_of(pod_id)
            units = self._units_to_send(pod_id)
            # An exit is reported with the last of its units: while more are waiting than
            # one report carries, the worker is reported running (docs/results.md).
            more = len(self._units.get(pod_id, [])) > len(units)
            # Rank 0 exited 0 with every unit promoted: its validator runs, and until it
            # ended the worker is reported running (docs/results.md, "The validator").
            validating = not more and self._validating(pod_id, record, state)
            if (state is not None and state.running) or (
                state is not None and (more or validating)
            ):
                reports.append(
                    WorkerReport(
                        pod_id=pod_id,
                        attempt=record.attempt,
                        state="running",
                        container_id=state.container_id,
                        gpu=self._gpu_usage(pod_id, state.gpu_uuids or state.gpu_indices, gpus),
                        progress=progress,
                        checkpoints=checkpoints,
                        units=units,
                        facts=self._facts.get(pod_id),
                    )
                )
                continue
            code, error, container = _exit_of(record, state)
            reports.append(
                WorkerReport(
                    pod_id=pod_id,
                    attempt=record.attempt,
                    state="exited",
                    exit_code=code,
                    error=error[-limits.ERROR_TAIL :],
                    container_id=container,
                    progress=progress,
                    checkpoints=checkpoints,  # a save on SIGTERM lands just before the exit
                    ended_by=_ended_by(record),
                    units=units,
                    facts=self._facts.get(pod_id),
                    validator=ValidatorReport(**record.validation) if record.validation else None,
                )
            )
            exited.append(pod_id)
        return reports, exited

    def delivered(self, reports: list[WorkerReport], exited: list[int]) -> list[int]:
        """A heartbeat carrying these reports succeeded: stop reporting the exits (kept as
        `final` in case the console lists the pod again). Returns the pods to forget."""
        sent_at = time.monotonic()
        for report in reports:
            if report.gpu is not None:
                self._gpu_metrics_at[report.pod_id] = sent_at
            if report.facts is not None:
                self._facts.pop(report.pod_id, None)
            if report.units:
                self._units[report.pod_id] = self._units.get(report.pod_id, [])[len(report.units) :]
        if not exited:
            return []
        by_pod = {r.pod_id: r for r in reports}
        for pod_id in exited:
            report = by_pod[pod_id]
            record = self.launched[pod_id]
            record.finished = True
            record.final = {
                "exit_code": report.exit_code,
                "error": report.error[-2000:],
                "container_id": report.container_id,
            }
            self._ft_paths.pop(pod_id, None)
            self._outputs.pop(pod_id, None)
            self._units.pop(pod_id, None)
        self.save()
        return exited

    def _validating(self, pod_id: int, record: LaunchRecord, state: WorkerState | None) -> bool:
        """Start or poll rank 0's validator once its program exited 0; True while it runs.
        Its outcome is kept in the record (workers.json) and reported with the exit."""
        if not record.validator or record.validation is not None or record.error:
            return False
        if state is None or state.running or state.exit_code != 0:
            return False
        running = self._validations.get(pod_id)
        outcome = poll_validator(running) if running is not None else None
        if running is None:
            output = self._outputs.get(pod_id)
            if self._runtime != "process" and self._in_container is None:
                outcome = not_run(NOT_RUN_HERE.format(runtime=self._runtime or "this"))
            elif output is None:
                outcome = not_run("the result folder is not known to this agent")
            else:
                try:
                    self._validations[pod_id] = self._start_validator(pod_id, record, output[1])
                except Exception as exc:  # the engine's errors too: reported, never raised
                    outcome = not_run(f"cannot start the validator: {exc}")
        if outcome is None:
            return True
        self._validations.pop(pod_id, None)
        record.validation = outcome.model_dump()
        record.validator_env = None
        self.save()
        return False

    def _start_validator(self, pod_id: int, record: LaunchRecord, paths: OutputPaths) -> Any:
        """A process beside the agent, or a container of the job's image (docker)."""
        env = record.validator_env or {}
        if self._in_container is not None:
            return self._in_container(
                pod_id=pod_id, attempt=record.attempt, image=record.validator_image,
                command=record.validator, env=env, result_dir=paths.result,
            )  # fmt: skip
        log_path = self.store.dir / "validators" / f"pod-{pod_id}-{record.attempt}.out"
        return start_validator(record.validator, env, paths.result, log_path)

    def _gpu_usage(self, pod_id: int, indices, gpus: list[GpuInfo]) -> GpuUsage | None:
        """The worker's GPU use from the last NVML sample, every GPU_METRICS_EVERY s."""
        now = time.monotonic()
        if now - self._gpu_metrics_at.get(pod_id, -GPU_METRICS_EVERY) < GPU_METRICS_EVERY:
            return None
        usage = worker_gpu_usage(indices, gpus)
        return GpuUsage(**usage) if usage is not None else None

    def _units_to_send(self, pod_id: int) -> list[UnitReport]:
        """Units promoted since the last scan joined to those not yet delivered; at most
        one report's worth (limits.RESULT_UNITS_REPORTED), oldest first."""
        output = self._outputs.get(pod_id)
        if output is not None:
            attempt, paths = output
            try:
                fresh = promote(paths, attempt)
            except OSError as exc:  # a full or read-only disk: try again next heartbeat
                log.warning("pod %s: cannot promote accepted units: %s", pod_id, exc)
                fresh = []
            if fresh:
                self._units.setdefault(pod_id, []).extend(fresh)
        return self._units.get(pod_id, [])[: limits.RESULT_UNITS_REPORTED]

    def progress_of(self, pod_id: int):
        """The worker's newest progress and committed checkpoints (agents.node.progress)."""
        paths = self._ft_paths.get(pod_id)
        if paths is None:
            return None, []
        # Read once more after the exit too: the last steps before a worker ends count.
        return read_progress(paths[0]), scan_checkpoints(paths[1])


def _bare_report(pod_id: int, record: LaunchRecord, state: WorkerState | None) -> WorkerReport:
    """A report the console cannot refuse: the worker's state and exit code only."""
    if state is not None and state.running:
        return WorkerReport(pod_id=pod_id, attempt=record.attempt, state="running")
    code, _error, _container = _exit_of(record, state)
    if code is not None:
        code = max(-1024, min(1024, code))
    why = record.set_aside or "the console kept failing on its details"
    return WorkerReport(
        pod_id=pod_id,
        attempt=record.attempt,
        state="exited",
        exit_code=code,
        error=f"[agent] exit reported without details (set aside: {why})",
        ended_by=_ended_by(record),
    )


def _ended_by(record: LaunchRecord) -> EndedBy | None:
    return record.ended_by if record.ended_by in ENDED_BY else None  # type: ignore[return-value]


def _exit_of(record: LaunchRecord, state: WorkerState | None) -> tuple[int | None, str, str]:
    """(exit code, error, container id) of a worker that is no longer running."""
    if state is None and record.final is not None:  # reported before: say it again
        return record.final["exit_code"], record.final["error"], record.final["container_id"]
    if state is None:
        return None, record.error or DISAPPEARED, ""
    if record.error:  # ended by the agent itself: its exit code says nothing
        return None, f"{record.error} (exit code {state.exit_code})", state.container_id
    return state.exit_code, state.error, state.container_id
