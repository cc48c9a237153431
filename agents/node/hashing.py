"""The data folders' content, hashed before a worker starts (docs/results.md, "Run
identity"; a job's `result_inputs_sha256`, `WorkerSpec.hash_inputs`).

Hashing a large dataset takes minutes, so it runs in a thread of its own, never in the
agent's loop: the loop keeps heartbeating while the worker waits, recorded in `workers.json`
as `preparing` and not reported (the console keeps it Starting). One thread hashes one worker
at a time: the ranks of a job on one node read the same folders, and the second finds every
file in the cache. Once hashed, the loop launches the worker as any other (the resume check
compares the content digest first: agents.node.ledger.launch_spec).

The hash itself is protocol.hashing's (`hash_inputs`, `HashCache`), shared with the
console's Kubernetes controller (kube.hashing). The manifest (`sha256sum` format,
protocol.inputs.manifest) is written beside the attempt's ACCEPTED_UNITS_FILE,
`output/job-<id>/attempt-N.inputs.sha256`: kept with the run, never promoted into its
result. Past a bound (protocol.limits.INPUT_SHA256_*) the worker starts without a content
digest and its log says why. A cache in the state dir keyed by each file's path, size,
modification and change times and inode spares an unchanged file a second read (after an
agent restart, or for the next rank).

Why in the agent and not in the worker before its command: the same on every
runtime (a job's image need not have sha256sum, nor see the agent's cache), the resume check
stays the agent's (ended_by resume_refused, as for the fingerprint), and a refused worker
never runs. An agent that stops while hashing leaves the record `preparing`: never launched,
so the next agent forgets it (Ledger.unprepared) and the console's next reply starts it again.
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.node.ledger import data_folders
from agents.node.progress import BadCheckpointDir, checkpoint_dir, workspace_area
from agents.node.state import LaunchRecord
from protocol.agent import RunFacts, WorkerSpec
from protocol.hashing import HashCache, HashRequest, HashThread, manifest_file
from protocol.outputs import output_paths

log = logging.getLogger(__name__)

CACHE_NAME = "inputs-sha256.json"


# A worker to launch now: its spec, GPUs, record and inputs' content facts.
Hashed = tuple[WorkerSpec, tuple[str, ...], LaunchRecord, RunFacts]


@dataclass(kw_only=True)
class _Pending(HashRequest):
    spec: WorkerSpec
    gpu_uuids: tuple[str, ...]
    record: LaunchRecord


class InputHashing:
    """The agent's workers whose inputs are hashed before their launch."""

    def __init__(
        self, state_dir: Path, append: Callable[[int, str, bool], None], wake: threading.Event
    ) -> None:
        self.state_dir = Path(state_dir)
        self._append = append
        self._thread = HashThread(HashCache(self.state_dir / CACHE_NAME), wake.set, who="agent")
        self.bounds = self._thread.bounds
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()

    def begin(self, spec: WorkerSpec, gpu_uuids: tuple[str, ...], record: LaunchRecord) -> bool:
        """Hash this worker's inputs first when its job asks (True: its launch waits)."""
        if not spec.hash_inputs or not spec.data:
            return False
        try:
            area = workspace_area(self.state_dir, spec.workspace_id)
            folders = data_folders(area, spec.data)
            folder = checkpoint_dir(
                self.state_dir, spec.job_id, spec.checkpoint_subdir, workspace_id=spec.workspace_id
            )
        except (BadCheckpointDir, OSError):
            return False  # the launch refuses it, saying why
        path = manifest_file(output_paths(folder, spec.job_id, spec.attempt))

        def say(line: str, pod_id: int = spec.pod_id) -> None:
            self._append(pod_id, f"[agent] {line}", False)

        pending = _Pending(
            folders=folders, manifest=path, say=say, spec=spec, gpu_uuids=gpu_uuids, record=record
        )
        record.preparing = True  # saved with the reply's launches (Agent.converge)
        with self._lock:
            self._pending[spec.pod_id] = pending
        self._thread.submit(pending)
        return True

    def cancel(self, pod_id: int) -> bool:
        """A stop order for a worker whose inputs are being hashed: it is never launched."""
        with self._lock:
            pending = self._pending.pop(pod_id, None)
        if pending is None:
            return False
        pending.cancel.set()
        pending.record.preparing = False
        return True

    def finished(self, ledger: Any) -> list[Hashed]:
        """The workers whose inputs are hashed, to launch now: first recorded in workers.json
        as no longer hashing (the next agent never starts them twice)."""
        with self._lock:
            done = [p for p in self._pending.values() if p.content is not None]
            for p in done:
                del self._pending[p.spec.pod_id]
        done = [p for p in done if ledger.launched.get(p.spec.pod_id) is p.record]
        if not done:
            return []
        for p in done:
            p.record.preparing = False
        try:
            ledger.save()
        except OSError as exc:
            log.error("cannot record the hashed workers (%s); will retry", exc)
            with self._lock:
                for p in done:
                    p.record.preparing = True
                    self._pending[p.spec.pod_id] = p
            return []
        return [(p.spec, p.gpu_uuids, p.record, p.content or RunFacts()) for p in done]

    def stop(self) -> None:
        """The agent shuts down: hashing ends; the records stay `preparing`."""
        with self._lock:
            for pending in self._pending.values():
                pending.cancel.set()
        self._thread.stop()
