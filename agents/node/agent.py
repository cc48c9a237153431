"""The node agent's main loop (DESIGN §7).

Register once (the node id and token are kept in `<state-dir>/node.json`, mode 0600), then
heartbeat every interval: send the node's facts and every worker it knows, receive the
desired state, converge on it (launch what should run, stop what should not). A worker's exit
wakes the loop for an immediate heartbeat, after its last log lines are acknowledged.

Duplicate workers are the trap to avoid (DESIGN §9): the agent writes a pod into
`<state-dir>/workers.json` *before* launching it and never launches a recorded pod again.
After a crash the new agent first reloads its log journals (agents.node.logship), then adopts
what the runtime still has (docker: containers by label, even ones missing from
workers.json; process: worker processes by their marker) and resumes their logs after the
last journaled line. A recorded pod the runtime no longer has is reported as exited with
the error "worker process disappeared". Adopted workers are reported as they are; the
console fences those of an epoch (attempt) it no longer wants, and the agent stops them.

An exit is reported until a heartbeat carrying it succeeds; should the console still list
that pod afterwards (it could not apply the report), the agent reports the exit again rather
than launching the pod again.
"""

import dataclasses
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agents.node.client import AgentClient, ApiError, TransportError
from agents.node.gpus import GpuSource, worker_gpu_usage
from agents.node.logship import LogShipper
from agents.node.progress import (
    BadCheckpointDir,
    checkpoint_dir,
    checkpoint_root,
    progress_file,
    read_progress,
    resolve_resume,
    scan_checkpoints,
)
from agents.node.runtimes.base import LaunchError, LaunchSpec, Runtime, worker_marker
from agents.node.runtimes.processes import ProcessRuntime
from agents.node.state import AgentConfigError, LaunchRecord, StateStore
from protocol.agent import (
    MAX_ERROR_TAIL,
    GpuReport,
    GpuUsage,
    Heartbeat,
    HeartbeatReply,
    LogAck,
    LogBatch,
    NodeFacts,
    RegisterRequest,
    WorkerReport,
    WorkerSpec,
)

log = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"
DEFAULT_INTERVAL = 5.0
GPU_METRICS_EVERY = 30.0  # seconds between a worker's GPU samples
EXIT_LOG_WAIT = 2.0  # at most this long for an exited worker's last lines before reporting


@dataclass(frozen=True)
class AgentConfig:
    server: str
    name: str
    state_dir: Path
    runtime: str = "process"
    bootstrap_token: str | None = None
    fake_gpus: str | None = None
    resource_type: str = "Lingjun"
    cpus: int | None = None
    memory_gb: int | None = None
    heartbeat_interval: float | None = None  # None: the console's
    shutdown_grace: float = 10.0
    docker_url: str | None = None  # default: DOCKER_HOST or the local socket
    docker_gpus: str = "auto"  # attach GPUs by device request: auto (NVIDIA runtime), on, off


def _memory_gb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    except (ValueError, OSError):
        return 0


def make_runtime(config: AgentConfig, state_dir: Path, on_line, on_exit) -> Runtime:
    if config.runtime == "process":
        return ProcessRuntime(state_dir / "work", on_line, on_exit)
    if config.runtime != "docker":
        raise AgentConfigError(f"unknown runtime {config.runtime!r}")
    from agents.node.runtimes.containers import DockerOptions, DockerRuntime

    root = checkpoint_root(state_dir)  # the only host folder bind-mounted into containers
    root.mkdir(parents=True, exist_ok=True)
    try:
        runtime = DockerRuntime(
            DockerOptions(node=config.name, checkpoint_root=root),
            on_line,
            on_exit,
            base_url=config.docker_url,
        )
    except LaunchError as exc:
        raise AgentConfigError(str(exc)) from exc
    gpus = config.docker_gpus == "on" or (
        config.docker_gpus == "auto" and runtime.engine_has_nvidia()
    )
    if not gpus:
        log.warning("GPUs are not attached to containers (--docker-gpus %s)", config.docker_gpus)
    runtime.opts = DockerOptions(node=config.name, checkpoint_root=root, gpus=gpus)
    return runtime


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        stop: threading.Event | None = None,
        gpus: GpuSource | None = None,
    ) -> None:
        self.cfg = config
        self.stop = stop or threading.Event()
        self.wake = threading.Event()
        self.store = StateStore(config.state_dir)
        self.store.lock()
        try:
            self.shipper = LogShipper(self._send_logs, journal_dir=self.store.dir / "logs")
            self.runtime = make_runtime(config, self.store.dir, self.shipper.append, self._on_exit)
        except (AgentConfigError, OSError) as exc:
            self.store.unlock()
            if isinstance(exc, OSError):
                raise AgentConfigError(f"cannot use state dir {self.store.dir}: {exc}") from exc
            raise
        try:
            self.launched = self.store.load_launched()
        except AgentConfigError:
            self.store.unlock()
            raise
        self.gpus = gpus or GpuSource(config.fake_gpus, config.name)
        self.client = AgentClient(config.server, stop=self.stop)
        self._log_client: AgentClient | None = None
        self.interval = config.heartbeat_interval or DEFAULT_INTERVAL
        self._gpu_count = 0
        self._last_gpus: list = []  # the last NVML sample (per-worker GPU metrics)
        self._gpu_metrics_at: dict[int, float] = {}
        self._waiting: set[int] = set()  # pods whose launch waits for busy GPUs (logged once)
        self._ship_stop = threading.Event()
        # pod id → (progress file, checkpoint folder) of workers launched by this run.
        self._ft_paths: dict[int, tuple[Path, Path]] = {}

    # --- callbacks from other threads ---

    def _on_exit(self, pod_id: int) -> None:
        self.shipper.close(pod_id)
        self.wake.set()

    def _send_logs(self, batch: LogBatch) -> LogAck:
        assert self._log_client is not None
        return self._log_client.send_logs(batch)

    # --- registration ---

    def facts(self) -> NodeFacts:
        gpus = self.gpus.sample()
        self._gpu_count = len(gpus)
        self._last_gpus = gpus
        return NodeFacts(
            hostname=socket.gethostname()[:255],
            agent_version=AGENT_VERSION,
            runtime=self.cfg.runtime,
            resource_type=self.cfg.resource_type,
            gpu_type=self.gpus.gpu_type,
            cpus=self.cfg.cpus if self.cfg.cpus is not None else os.cpu_count() or 0,
            memory_gb=self.cfg.memory_gb if self.cfg.memory_gb is not None else _memory_gb(),
            gpus=[GpuReport(**g.as_report()) for g in gpus],
        )

    def register_or_load(self) -> dict:
        saved = self.store.load_identity()
        if saved and saved.get("server") == self.cfg.server and saved.get("name") == self.cfg.name:
            log.info(
                "using the saved registration of node %s (id %s)", self.cfg.name, saved["node_id"]
            )
            return saved
        if not self.cfg.bootstrap_token:
            raise AgentConfigError(
                "this node is not registered yet: pass --bootstrap-token "
                "or set GPU_AGENT_BOOTSTRAP_TOKEN"
            )
        reply = self.client.register(
            self.cfg.bootstrap_token, RegisterRequest(name=self.cfg.name, facts=self.facts())
        )
        identity = {
            "server": self.cfg.server,
            "name": self.cfg.name,
            "node_id": reply.node_id,
            "node_token": reply.node_token,
        }
        self.store.save_identity(identity)
        log.info("registered node %s (id %s)", self.cfg.name, reply.node_id)
        if self.cfg.heartbeat_interval is None:
            self.interval = reply.heartbeat_interval
        return identity

    def recover(self) -> None:
        """Take over what a previous run left: reload the log journals, adopt the workers
        the runtime still has (resuming their logs after the last journaled line), and
        report recorded workers that are gone as disappeared."""
        journals = self.shipper.recover()
        skip = {pod_id: src for pod_id, (_attempt, src) in journals.items()}

        def prepare(pod_id: int, attempt: int) -> None:
            self.shipper.open(pod_id, attempt, 0)  # no journal: the console dedupes by seq
            record = self.launched.get(pod_id)
            if record is None or record.attempt != attempt:
                # Not in workers.json (lost state dir, or a crash right after launch):
                # report it all the same and let the console decide (it fences stale ones).
                log.warning("adopting pod %s attempt %s, unknown to workers.json", pod_id, attempt)
                self.launched[pod_id] = LaunchRecord(attempt=attempt)
            elif record.finished:
                record.finished = False  # reported, but not forgotten: report it again
            record = self.launched[pod_id]
            if record.progress_file and record.checkpoint_dir:
                self._ft_paths[pod_id] = (Path(record.progress_file), Path(record.checkpoint_dir))

        adopted = self.runtime.adopt(skip, prepare)
        if adopted:
            log.info("adopted %d workers of a previous agent run", len(adopted))
        orphans = {p: r for p, r in self.launched.items() if not r.finished and p not in adopted}
        if orphans:
            killed = self.runtime.kill_leftovers(
                {worker_marker(p, r.attempt) for p, r in orphans.items()}
            )
            if killed:
                log.warning("killed %d leftover processes of a previous agent run", killed)
            for record in orphans.values():
                record.error = record.error or "worker process disappeared"
        for pod_id in journals:
            if pod_id not in adopted:  # ship what is left of it, then drop the journal
                self.shipper.close(pod_id)
        self.store.save_launched(self.launched)

    # --- heartbeat ---

    def _reports(self) -> tuple[list[WorkerReport], list[int]]:
        held = {s.pod_id: s for s in self.runtime.workers()}
        reports: list[WorkerReport] = []
        exited: list[int] = []
        for pod_id, record in self.launched.items():
            if record.finished:
                continue
            state = held.get(pod_id)
            if state is not None and state.starting:
                continue  # pulling its image: not running yet, nothing to report
            progress, checkpoints = self._progress_of(pod_id)
            if state is not None and state.running:
                reports.append(
                    WorkerReport(
                        pod_id=pod_id,
                        attempt=record.attempt,
                        state="running",
                        container_id=state.container_id,
                        gpu=self._gpu_usage(pod_id, state.gpu_indices),
                        progress=progress,
                        checkpoints=checkpoints,
                    )
                )
                continue
            if state is None and record.final is not None:  # reported before: say it again
                code, error = record.final["exit_code"], record.final["error"]
                container = record.final["container_id"]
            elif state is None:
                code, error, container = None, record.error or "worker process disappeared", ""
            elif record.error:  # ended by the agent itself: its exit code says nothing
                code = None
                error = f"{record.error} (exit code {state.exit_code})"
                container = state.container_id
            else:
                code, error, container = state.exit_code, state.error, state.container_id
            reports.append(
                WorkerReport(
                    pod_id=pod_id,
                    attempt=record.attempt,
                    state="exited",
                    exit_code=code,
                    error=error[-MAX_ERROR_TAIL:],
                    container_id=container,
                    progress=progress,
                    checkpoints=checkpoints,  # a save on SIGTERM lands just before the exit
                )
            )
            exited.append(pod_id)
        return reports, exited

    def _gpu_usage(self, pod_id: int, indices) -> GpuUsage | None:
        """The worker's GPU use from the last NVML sample, every GPU_METRICS_EVERY s."""
        now = time.monotonic()
        if now - self._gpu_metrics_at.get(pod_id, -GPU_METRICS_EVERY) < GPU_METRICS_EVERY:
            return None
        usage = worker_gpu_usage(indices, self._last_gpus)
        return GpuUsage(**usage) if usage is not None else None

    def _progress_of(self, pod_id: int):
        """The worker's newest progress and committed checkpoints (agents.node.progress)."""
        paths = self._ft_paths.get(pod_id)
        if paths is None:
            return None, []
        # Read once more after the exit too: the last steps before a worker ends count.
        return read_progress(paths[0]), scan_checkpoints(paths[1])

    def heartbeat(self, *, attempts: int = 2) -> HeartbeatReply | None:
        _, exited = self._reports()
        if exited:  # let the console have their last lines before it sees them finish
            self.shipper.wake()
            self.shipper.wait_drained(exited, timeout=min(EXIT_LOG_WAIT, self.interval * 2))
        reports, exited = self._reports()
        try:
            reply = self.client.heartbeat(
                Heartbeat(facts=self.facts(), workers=reports), attempts=attempts
            )
        except TransportError as exc:
            log.warning("heartbeat failed: %s", exc)
            return None
        self.shipper.retry_now()  # the console is back: resend buffered lines at once
        sent_at = time.monotonic()
        for report in reports:
            if report.gpu is not None:
                self._gpu_metrics_at[report.pod_id] = sent_at
        if exited:  # the console has taken these exits: stop reporting them
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
                self.runtime.forget(pod_id)
                self._ft_paths.pop(pod_id, None)
            self.store.save_launched(self.launched)
        return reply

    # --- converging on the desired state ---

    def converge(self, reply: HeartbeatReply) -> None:
        held = {s.pod_id: s for s in self.runtime.workers()}
        changed = False
        for pod_id in {spec.pod_id for spec in reply.run} | {o.pod_id for o in reply.stop}:
            record = self.launched.get(pod_id)
            if record is not None and record.finished:
                # The console still thinks it is live: it did not apply our exit report
                # (level-triggered repair). Report the exit again; never launch it again.
                log.warning("console still lists pod %s, which exited; reporting again", pod_id)
                record.finished = False
                changed = True
        for order in reply.stop:
            state = held.get(order.pod_id)
            if state is not None:
                if state.running and state.attempt == order.attempt:
                    log.info("stopping pod %s: %s", order.pod_id, order.reason)
                    self.runtime.stop(order.pod_id, order.grace_seconds)
            elif order.pod_id not in self.launched:
                # Never launched here: report it ended so the console can finish the stop.
                self.launched[order.pod_id] = LaunchRecord(
                    attempt=order.attempt,
                    error=f"stopped before it was launched: {order.reason}"[:500],
                )
                changed = True
        busy = {i for s in held.values() if s.running for i in s.gpu_indices}
        for spec in reply.run:
            if spec.pod_id in self.launched:
                continue
            missing = [i for i in spec.gpu_indices if i >= self._gpu_count]
            if missing:
                self.launched[spec.pod_id] = LaunchRecord(
                    attempt=spec.attempt,
                    error=f"GPU {missing[0]} does not exist on this node ({self._gpu_count} GPUs)",
                )
                changed = True
                continue
            clash = busy.intersection(spec.gpu_indices)
            if clash:  # an old worker still holds them (stopping): launch once it is gone
                if spec.pod_id not in self._waiting:
                    log.warning("pod %s waits for busy GPUs %s", spec.pod_id, sorted(clash))
                    self._waiting.add(spec.pod_id)
                continue
            self._waiting.discard(spec.pod_id)
            self.launch(spec)
            busy.update(spec.gpu_indices)
            changed = True
        if changed:
            self.store.save_launched(self.launched)
            self.wake.set()  # report the new workers at once

    def launch(self, spec: WorkerSpec) -> None:
        record = LaunchRecord(attempt=spec.attempt)
        self.launched[spec.pod_id] = record
        # Write-ahead: once recorded, a crash can never lead to a second launch of this pod.
        try:
            self.store.save_launched(self.launched)
        except OSError as exc:  # e.g. disk full: do not launch what we could not record
            del self.launched[spec.pod_id]
            log.error("cannot record pod %s before launching it (%s); will retry", spec.pod_id, exc)
            return
        self.shipper.open(spec.pod_id, spec.attempt, spec.log_next_seq)
        log.info("launching pod %s (job %s rank %s)", spec.pod_id, spec.job_id, spec.rank)
        try:
            self.runtime.launch(self._with_ft_env(spec))
        except (LaunchError, BadCheckpointDir) as exc:
            record.error = f"launch failed: {exc}"
            self.shipper.append(spec.pod_id, f"[agent] {record.error}", False)
            self.shipper.close(spec.pod_id)

    def _with_ft_env(self, spec: WorkerSpec) -> LaunchSpec:
        """The launch spec plus PROGRESS_FILE, CHECKPOINT_DIR and RESUME_FROM (agents.sdk)."""
        progress = progress_file(self.store.dir, spec.pod_id, spec.attempt)
        folder = checkpoint_dir(self.store.dir, spec.job_id, spec.checkpoint_subdir)
        if self.runtime.name == "docker":  # only the checkpoint folder is mounted
            progress = folder / ".progress" / progress.name
        progress.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        self._ft_paths[spec.pod_id] = (progress, folder)
        record = self.launched.get(spec.pod_id)
        if record is not None:  # kept in workers.json for adoption after an agent restart
            record.progress_file, record.checkpoint_dir = str(progress), str(folder)
        launch = LaunchSpec.from_worker_spec(spec, node=self.cfg.name)
        env = {**launch.env, "PROGRESS_FILE": str(progress), "CHECKPOINT_DIR": str(folder)}
        resume, note = resolve_resume(folder, spec.resume_from, spec.attempt)
        if resume:
            env["RESUME_FROM"] = resume
        if note:
            log.warning("pod %s: %s", spec.pod_id, note)
            self.shipper.append(spec.pod_id, f"[agent] {note}")
        return dataclasses.replace(launch, env=env)

    # --- the loop ---

    def step(self) -> None:
        """One cycle: heartbeat, then converge on the reply (if one came)."""
        reply = self.heartbeat()
        if reply is None:
            return
        if self.cfg.heartbeat_interval is None:
            self.interval = reply.heartbeat_interval
        self.converge(reply)

    def run(self) -> int:
        """Returns the exit status: 0 after a requested shutdown, 2 misconfigured, 3 refused
        by the console (bootstrap token or node token not accepted)."""
        try:
            identity = self.register_or_load()
        except (AgentConfigError, ApiError, TransportError) as exc:
            self._close()
            if isinstance(exc, AgentConfigError):
                log.error("%s", exc)
                return 2
            if isinstance(exc, ApiError):
                log.error("registration refused: %s", exc)
                return 3
            log.error("%s", exc)
            return 0 if self.stop.is_set() else 1
        self.client.token = identity["node_token"]
        self._log_client = self.client.copy()
        self.recover()
        shipping = threading.Thread(
            target=self.shipper.run, args=(self._ship_stop,), name="log-shipper", daemon=True
        )
        shipping.start()
        status = 0
        while not self.stop.is_set():
            try:
                self.step()
            except ApiError as exc:
                if exc.status in (401, 403):
                    log.error("the console refused this node's token (%s); shutting down", exc)
                    status = 3
                    break
                log.error("heartbeat refused: %s", exc)
            except AgentConfigError as exc:  # e.g. the state dir became unwritable
                log.error("%s; shutting down", exc)
                status = 2
                break
            except Exception:
                # A bug in one cycle must not kill the agent and orphan its workers; the
                # next cycle starts again from the runtime's and the console's state.
                log.exception("agent cycle failed; retrying at the next heartbeat")
            self.wake.wait(self.interval)
            self.wake.clear()
        self.shutdown(shipping)
        return status

    def shutdown(self, shipping: threading.Thread | None = None) -> None:
        """Process workers are stopped gracefully (the embedded default: they go with the
        agent); containers keep running and the next agent adopts them, so restarting or
        upgrading an agent costs no work. Then ship the last lines and report."""
        if self.runtime.name == "process":
            running = [s.pod_id for s in self.runtime.workers() if s.running]
            for pod_id in running:
                self.launched[pod_id].error = "stopped: the agent shut down"
            if running:
                self.store.save_launched(self.launched)
                log.info("stopping %d workers (grace %ss)", len(running), self.cfg.shutdown_grace)
            self.runtime.shutdown(self.cfg.shutdown_grace)
        self._ship_stop.set()
        if shipping is not None:
            shipping.join(timeout=15)
        if self._log_client is not None and not self.shipper.flush(timeout=10):
            log.warning("some log lines could not be delivered before exiting")
        if self._log_client is not None:
            try:
                self.heartbeat(attempts=1)
            except ApiError as exc:
                log.warning("final heartbeat refused: %s", exc)
            self._log_client.close()
        self.shipper.close_all()
        self._close()

    def _close(self) -> None:
        self.gpus.close()
        self.client.close()
        self.store.unlock()
