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

from agents.node.gpus import GpuInfo, worker_gpu_usage
from agents.node.progress import (
    checkpoint_dir,
    progress_file,
    read_progress,
    resolve_resume,
    scan_checkpoints,
    workspace_area,
)
from agents.node.runtimes.base import LaunchSpec, WorkerState
from agents.node.state import LaunchRecord, StateStore
from protocol import limits
from protocol.agent import GpuUsage, WorkerReport, WorkerSpec

log = logging.getLogger(__name__)

GPU_METRICS_EVERY = 30.0  # seconds between a worker's GPU samples
DISAPPEARED = "worker process disappeared"


class Ledger:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.launched: dict[int, LaunchRecord] = store.load_launched()
        # pod id → (progress file, checkpoint folder) of workers this run knows about.
        self._ft_paths: dict[int, tuple[Path, Path]] = {}
        self._gpu_metrics_at: dict[int, float] = {}
        self._refusals: dict[int, int] = {}  # pod id → refusals in a row

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
        self, spec: WorkerSpec, *, state_dir: Path, runtime: str, node: str
    ) -> tuple[LaunchSpec, str]:
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
        self._ft_paths[spec.pod_id] = (progress, folder)
        record = self.launched.get(spec.pod_id)
        if record is not None:  # kept in workers.json for adoption after an agent restart
            record.progress_file, record.checkpoint_dir = str(progress), str(folder)
        launch = LaunchSpec.from_worker_spec(spec, node=node)
        env = {**launch.env, "PROGRESS_FILE": str(progress), "CHECKPOINT_DIR": str(folder)}
        area = workspace_area(state_dir, spec.workspace_id)
        resume, note = resolve_resume(folder, spec.resume_from, spec.attempt, area)
        if resume:
            env["RESUME_FROM"] = resume
        return dataclasses.replace(launch, env=env), note

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

    def orphans(self, adopted) -> dict[int, LaunchRecord]:
        """Recorded, unfinished pods the runtime no longer has: reported as disappeared."""
        lost = {p: r for p, r in self.launched.items() if not r.finished and p not in adopted}
        for record in lost.values():
            record.error = record.error or DISAPPEARED
        return lost

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
            if record.finished:
                continue
            state = held.get(pod_id)
            if state is not None and state.starting:
                continue  # pulling its image: not running yet, nothing to report
            if bare or record.set_aside:
                report = _bare_report(pod_id, record, state)
                reports.append(report)
                if report.state == "exited":
                    exited.append(pod_id)
                continue
            progress, checkpoints = self.progress_of(pod_id)
            if state is not None and state.running:
                reports.append(
                    WorkerReport(
                        pod_id=pod_id,
                        attempt=record.attempt,
                        state="running",
                        container_id=state.container_id,
                        gpu=self._gpu_usage(pod_id, state.gpu_uuids or state.gpu_indices, gpus),
                        progress=progress,
                        checkpoints=checkpoints,
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
        self.save()
        return exited

    def _gpu_usage(self, pod_id: int, indices, gpus: list[GpuInfo]) -> GpuUsage | None:
        """The worker's GPU use from the last NVML sample, every GPU_METRICS_EVERY s."""
        now = time.monotonic()
        if now - self._gpu_metrics_at.get(pod_id, -GPU_METRICS_EVERY) < GPU_METRICS_EVERY:
            return None
        usage = worker_gpu_usage(indices, gpus)
        return GpuUsage(**usage) if usage is not None else None

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
    )


def _exit_of(record: LaunchRecord, state: WorkerState | None) -> tuple[int | None, str, str]:
    """(exit code, error, container id) of a worker that is no longer running."""
    if state is None and record.final is not None:  # reported before: say it again
        return record.final["exit_code"], record.final["error"], record.final["container_id"]
    if state is None:
        return None, record.error or DISAPPEARED, ""
    if record.error:  # ended by the agent itself: its exit code says nothing
        return None, f"{record.error} (exit code {state.exit_code})", state.container_id
    return state.exit_code, state.error, state.container_id
