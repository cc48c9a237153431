"""The node agent's main loop (docs/agent-protocol.md).

Register once (the node id and token are kept in `<state-dir>/node.json`, mode 0600), then
heartbeat every interval: send the node's facts and every worker it knows, receive the
desired state, converge on it (launch what should run, stop what should not). A worker's exit
wakes the loop for an immediate heartbeat, after its last log lines are acknowledged.

Duplicate workers are the trap to avoid (docs/traps.md): the agent writes a pod into
`<state-dir>/workers.json` *before* launching it and never launches a recorded pod again
(agents.node.ledger).
After a crash the new agent first reloads its log journals (agents.node.logship), then adopts
what the runtime still has (docker: containers by label, even ones missing from
workers.json; process: worker processes by their marker) and resumes their logs after the
last journaled line. A recorded pod the runtime no longer has is reported as exited with
the error "worker process disappeared". Adopted workers are reported as they are; the
console fences those of an epoch (attempt) it no longer wants, and the agent stops them.

An exit is reported until a heartbeat carrying it succeeds; should the console still list
that pod afterwards (it could not apply the report), the agent reports the exit again rather
than launching the pod again.

Nothing is retried forever (docs/agent-protocol.md): a worker report the console refuses
REFUSALS_BEFORE_SET_ASIDE times in a row is set aside (from then on only its state and exit
code are sent, and a marker line in the worker's log says so); a spec in the reply this
agent cannot use ends that worker with the reason; heartbeats the console keeps failing on
(5xx) are sent without any worker details for a while.

Waking (agents.wake on the console): between heartbeats a second thread holds the console's
`wait/` open with the desired-state token of the last reply; the console answers as soon as
that state changes (a pod placed, a stop requested) and the loop heartbeats at once, so a
new pod starts within a fraction of a second without more heartbeats. A console without
waking, or one whose wait slots are all taken, leaves the agent on its heartbeat interval.

Self-fencing (docs/fault-tolerance.md): after each heartbeat the console applied, the agent renews
the node's lease (agents.node.fence) from the time it *sent* that heartbeat; every worker's wrapper
stops its worker when the lease runs out, even if this process is frozen.
"""

import dataclasses
import logging
import os
import socket
import threading

from agents.node.client import AgentClient, ConsoleRefused, ServerFailed, TransportError
from agents.node.config import (
    AGENT_VERSION,
    DEFAULT_INTERVAL,
    AgentConfig,
    fence_folder,
    host_memory_gb,
    make_runtime,
)
from agents.node.fence import Lease, boottime
from agents.node.gpus import GpuMismatch, GpuSource, resolve
from agents.node.hashing import InputHashing
from agents.node.identity import note_image
from agents.node.ledger import Ledger
from agents.node.logship import LogShipper
from agents.node.progress import BadCheckpointDir
from agents.node.refusing import Refusing
from agents.node.room import NodeRefused
from agents.node.runtimes.base import LaunchError, worker_marker
from agents.node.state import AgentConfigError, LaunchRecord, StateStore
from agents.node.waking import Waking
from protocol.agent import (
    AGENT_SHUTDOWN,
    GpuReport,
    Heartbeat,
    HeartbeatReply,
    LogAck,
    LogBatch,
    NodeFacts,
    RegisterRequest,
    RunFacts,
    WorkerSpec,
)
from protocol.devices import without_device_env

__all__ = ["Agent", "AgentConfig", "AgentConfigError"]

log = logging.getLogger(__name__)

EXIT_LOG_WAIT = 2.0  # at most this long for an exited worker's last lines before reporting


class Agent(Waking, Refusing):
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
        self._exited = threading.Event()  # a worker exited since the last heartbeat
        self._job_of: dict[int, int] = {}  # pod -> job, for gathering a gang's exits
        self.store = StateStore(config.state_dir)
        self.store.lock()
        try:
            self.shipper = LogShipper(self._send_logs, journal_dir=self.store.dir / "logs")
            self.runtime = make_runtime(config, self.store.dir, self.shipper.append, self._on_exit)
            self.ledger = Ledger(self.store, self.runtime)
            self.hashing = InputHashing(self.store.dir, self.shipper.append, self.wake)
        except (AgentConfigError, OSError) as exc:
            self.store.unlock()
            if isinstance(exc, OSError):
                raise AgentConfigError(f"cannot use state dir {self.store.dir}: {exc}") from exc
            raise
        self.gpus = gpus or GpuSource(config.fake_gpus, config.name)
        self.client = AgentClient(config.server, stop=self.stop)
        self._log_client: AgentClient | None = None
        self.interval = config.heartbeat_interval or DEFAULT_INTERVAL
        self._gpu_count = 0
        self._last_gpus: list = []  # the last NVML sample (per-worker GPU metrics)
        self._waiting: set[int] = set()  # pods whose launch waits for busy GPUs (logged once)
        self._ship_stop = threading.Event()
        self.lease = Lease(fence_folder(self.store.dir))
        self._heartbeat_failures = 0  # in a row, on the console's side (5xx, 400)
        self._bare_left = 0  # heartbeats still to send without worker details
        # The desired-state token of the last reply, and how many replies came so far
        # (the waker waits for a newer one after each wake).
        self._beat = threading.Condition()
        self._beats = 0
        self._desired_version: str | None = None

    @property
    def launched(self):
        return self.ledger.launched

    # --- callbacks from other threads ---

    def _on_exit(self, pod_id: int) -> None:
        self.shipper.close(pod_id)
        self._exited.set()
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
            memory_gb=self.cfg.memory_gb if self.cfg.memory_gb is not None else host_memory_gb(),
            gpus=[GpuReport(**g.as_report()) for g in gpus],
            address=self.cfg.advertise_address or "",
            rendezvous_ports=self.cfg.rendezvous_ports,
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
        key = self.store.registration_key(self.cfg.server, self.cfg.name)
        req = RegisterRequest(name=self.cfg.name, facts=self.facts(), registration_key=key)
        reply = self.client.register(self.cfg.bootstrap_token, req)
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
            self.ledger.adopt(pod_id, attempt)

        adopted = self.runtime.adopt(skip, prepare)
        if adopted:
            log.info("adopted %d workers of a previous agent run", len(adopted))
        again = self.ledger.unprepared(adopted)  # their logs go on when they start
        orphans = self.ledger.orphans(adopted)
        if orphans:
            killed = self.runtime.kill_leftovers(
                {worker_marker(p, r.attempt) for p, r in orphans.items()}
            )
            if killed:
                log.warning("killed %d leftover processes of a previous agent run", killed)
        for pod_id in journals:
            if pod_id not in adopted and pod_id not in again:  # ship what is left, then drop it
                self.shipper.close(pod_id)
        self.ledger.save()

    # --- heartbeat ---

    def _reports(self, bare: bool = False):
        held = {s.pod_id: s for s in self.runtime.workers()}
        return self.ledger.reports(held, self._last_gpus, bare=bare)

    def heartbeat(self, *, attempts: int = 2) -> HeartbeatReply | None:
        bare = self._bare_left > 0
        # A console that takes logs in heartbeats gets an exit's last lines with the exit
        # itself (stored first); an older one, or while heartbeats fail, by the shipper.
        ride = self.shipper.exits_ride and not bare
        _, exited = self._reports(bare)
        if exited and not ride:  # let the console have their last lines before it sees them
            self.shipper.wake()
            self.shipper.wait_drained(exited, timeout=min(EXIT_LOG_WAIT, self.interval * 2))
        facts = self.facts()
        reports, exited = self._reports(bare)
        for pod_id in exited:  # its output is all read: its log ends with this report,
            self.shipper.close(pod_id)  # not when its exit callback gets to it (idempotent)
        riding = self.shipper.ride(exited) if ride and exited else []
        reports = self.shipper.mark_delivered(reports, riding)
        sent_at = boottime()  # the lease counts from here: the console's clock starts later
        reply = None
        try:
            reply = self.client.heartbeat(
                Heartbeat(facts=facts, workers=reports, logs=riding), attempts=attempts
            )
        except TransportError as exc:
            log.warning("heartbeat failed: %s", exc)
            if isinstance(exc, ServerFailed):
                self._console_failed(reports, bare)
            return None
        except ConsoleRefused as exc:
            if exc.status == 400:
                self._console_failed(reports, bare)
            raise
        finally:
            self.shipper.rode(riding, reply.logs if reply is not None else None)
        self.shipper.exits_ride = reply.takes_logs
        self.shipper.sends_end = reply.log_end
        self._renew_lease(reply, sent_at)
        with self._beat:
            self._beats += 1
            self._desired_version = reply.desired_version
            self._beat.notify_all()
        self._heartbeat_failures = 0
        self._bare_left = max(0, self._bare_left - 1)
        self.shipper.retry_now()  # the console is back: resend buffered lines at once
        self._note_refusals(reply, reports)
        for pod_id in self.ledger.delivered(reports, exited):
            self.runtime.forget(pod_id)  # the console has taken this exit
            self._job_of.pop(pod_id, None)
        return reply

    def _renew_lease(self, reply: HeartbeatReply, sent_at: float) -> None:
        try:
            if reply.lease_seconds is None:
                self.lease.unlimited()  # an older console: it grants no lease
            else:
                self.lease.renew(sent_at + reply.lease_seconds, reply.fence_grace)
        except OSError as exc:
            log.error("cannot renew the workers' lease (%s); they stop when it runs out", exc)

    # --- converging on the desired state ---

    def converge(self, reply: HeartbeatReply) -> None:
        held = {s.pod_id: s for s in self.runtime.workers()}
        listed = {spec.pod_id for spec in reply.run} | {o.pod_id for o in reply.stop}
        changed = self.ledger.relist(listed)
        for unusable in reply.unusable:  # a spec this agent cannot run: it ends, with why
            if unusable.pod_id not in self.launched:
                log.warning("cannot run pod %s: %s", unusable.pod_id, unusable.reason)
                self.ledger.record_unlaunched(
                    unusable.pod_id,
                    unusable.attempt,
                    f"the agent cannot run this worker: {unusable.reason}",
                )
                changed = True
        for order in reply.stop:
            state = held.get(order.pod_id)
            if state is not None:
                if state.running and state.attempt == order.attempt:
                    log.info("stopping pod %s: %s", order.pod_id, order.reason)
                    self.runtime.stop(order.pod_id, order.grace_seconds)
            elif order.pod_id not in self.launched or self.hashing.cancel(order.pod_id):
                # Never launched here: report it ended so the console can finish the stop.
                self.ledger.record_unlaunched(
                    order.pod_id, order.attempt, f"stopped before it was launched: {order.reason}"
                )
                changed = True
        busy = {u for s in held.values() if s.running for u in s.gpu_uuids}
        # Workers launched before GPUs were named by UUID hold theirs by index.
        busy_indices = {
            i for s in held.values() if s.running and not s.gpu_uuids for i in s.gpu_indices
        }
        todo: list[tuple[WorkerSpec, tuple[str, ...]]] = []
        for spec in reply.run:
            if spec.pod_id in self.launched:
                continue
            try:  # by UUID, and still where the console placed it
                uuids = resolve(spec.gpu_indices, spec.gpu_uuids, self._last_gpus)
            except GpuMismatch as exc:
                self.ledger.record_unlaunched(spec.pod_id, spec.attempt, str(exc))
                changed = True
                continue
            clash = busy.intersection(uuids) | busy_indices.intersection(spec.gpu_indices)
            if clash:  # an old worker still holds them (stopping): launch once it is gone
                if spec.pod_id not in self._waiting:
                    waiting_for = sorted(clash, key=str)
                    log.warning("pod %s waits for busy GPUs %s", spec.pod_id, waiting_for)
                    self._waiting.add(spec.pod_id)
                continue
            self._waiting.discard(spec.pod_id)
            todo.append((spec, uuids))
            busy.update(uuids)
            changed = True
        self.launch_all(todo)
        for spec, uuids, record, content in self.hashing.finished(self.ledger):
            self._start(spec, uuids, record, content)  # its inputs hashed: launched now
            changed = True
        if changed:
            self.ledger.save()
            self.wake.set()  # report the new workers at once

    def launch_all(self, batch: list[tuple[WorkerSpec, tuple[str, ...]]]) -> None:
        """Launch these (spec, GPU UUIDs) after recording them all in one write-ahead
        (one write of workers.json per reply, not per worker). Not recorded: not
        launched (retried at the next heartbeat)."""
        records = self.ledger.record_launches([(s.pod_id, s.attempt) for s, _ in batch])
        for spec, gpu_uuids in batch:
            record = records.get(spec.pod_id)
            if record is not None:
                self._start(spec, gpu_uuids, record)

    def launch(self, spec: WorkerSpec, gpu_uuids: tuple[str, ...] = ()) -> None:
        self.launch_all([(spec, gpu_uuids)])

    def _start(
        self, spec: WorkerSpec, gpu_uuids: tuple[str, ...], record: LaunchRecord,
        content: RunFacts | None = None,
    ) -> None:  # fmt: skip
        """Launch, or first hash the data folders' content off the loop when the job asks
        (`content`: once hashed; agents.node.hashing)."""
        self._job_of[spec.pod_id] = spec.job_id
        self.shipper.open(spec.pod_id, spec.attempt, spec.log_next_seq)  # once
        if content is None and self.hashing.begin(spec, gpu_uuids, record):
            return
        log.info("launching pod %s (job %s rank %s)", spec.pod_id, spec.job_id, spec.rank)
        try:
            launch, note = self.ledger.launch_spec(
                spec, state_dir=self.store.dir, runtime=self.runtime.name, node=self.cfg.name,
                content=content,
            )  # fmt: skip
            if note:
                log.warning("pod %s: %s", spec.pod_id, note)
                self.shipper.append(spec.pod_id, f"[agent] {note}")
            _, dropped = without_device_env(dict(spec.env))
            if dropped:  # the agent alone says which GPUs a worker sees (protocol.devices)
                self.shipper.append(
                    spec.pod_id,
                    f"[agent] ignored {', '.join(dropped)} from the job's environment: "
                    "the agent sets which GPUs a worker sees",
                    False,
                )
            self.runtime.launch(dataclasses.replace(launch, gpu_uuids=gpu_uuids))
            note_image(self.ledger, self.runtime, spec)
        except (LaunchError, BadCheckpointDir, NodeRefused) as exc:
            record.error = f"launch failed: {exc}"
            record.ended_by = getattr(exc, "ended_by", "")  # NodeRefused: not the job's fault
            self.shipper.append(spec.pod_id, f"[agent] {record.error}", False)
            self.shipper.close(spec.pod_id)

    # --- the loop ---

    def step(self) -> None:
        """One cycle: heartbeat, then converge on the reply (if one came)."""
        reply = self.heartbeat()
        if reply is None:
            return
        if self.cfg.heartbeat_interval is None:
            self.interval = reply.heartbeat_interval
        if reply.clear_health_marks:
            self.gpus.clear_marks((c.uuid, c.mark) for c in reply.clear_health_marks)
        self.converge(reply)

    def run(self) -> int:
        """Returns the exit status: 0 after a requested shutdown, 2 misconfigured, 3 refused
        by the console (bootstrap token or node token not accepted)."""
        try:
            identity = self.register_or_load()
        except (AgentConfigError, ConsoleRefused, TransportError) as exc:
            self._close()
            if isinstance(exc, AgentConfigError):
                log.error("%s", exc)
                return 2
            if isinstance(exc, ConsoleRefused):
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
        # A daemon: a wait in flight must not delay the agent's exit.
        threading.Thread(target=self._waker, name="waker", daemon=True).start()
        status = 0
        while not self.stop.is_set():
            try:
                self.step()
            except ConsoleRefused as exc:
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
            self.wait_for_work()
        self.shutdown(shipping)
        return status

    def shutdown(self, shipping: threading.Thread | None = None) -> None:
        """Process workers are stopped gracefully (the embedded default: they go with the
        agent); containers keep running and the next agent adopts them, so restarting or
        upgrading an agent costs no work. Then ship the last lines and report."""
        with self._beat:
            self._beat.notify_all()  # the waker sees the stop
        self.hashing.stop()  # a worker still waiting for it starts with the next agent
        if self.runtime.name == "process":
            running = [s.pod_id for s in self.runtime.workers() if s.running]
            for pod_id in running:
                # The node leaves: not the job's fault (WorkerReport.ended_by).
                self.launched[pod_id].error = "stopped: the agent shut down"
                self.launched[pod_id].ended_by = AGENT_SHUTDOWN
            if running:
                self.ledger.save()
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
            except ConsoleRefused as exc:
                log.warning("final heartbeat refused: %s", exc)
            self._log_client.close()
        self.shipper.close_all()
        self._close()

    def _close(self) -> None:
        self.gpus.close()
        self.client.close()
        self.store.unlock()
