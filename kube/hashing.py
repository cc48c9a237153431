"""The data folders' content, hashed by the controller before it creates a worker's Pod
(docs/results.md, "Run identity" and "Kubernetes"; a job's `result_inputs_sha256`).

Hashing a large dataset takes minutes, so it runs in a thread of its own, never in the
controller's step: the step keeps converging the other workers while this one stays
Starting with no Pod. One thread hashes one worker at a time (the ranks of a job read the
same folders: the second finds every file in the cache). The hash is the agent's
(protocol.hashing.hash_inputs) on the console's mount of the shared checkpoint volume, and
the manifest goes where the agent's does: `attempt-N.inputs.sha256` beside the attempt's
`attempt-N.accepted.json` on the volume. Once hashed, the step records the content digest
with the other facts, compares it with the run the worker would resume and creates the Pod
(kube.controller). Past a bound (protocol.limits.INPUT_SHA256_*) the Pod is created without
a content digest; the controller's log says why, as it says why the data folders were not
fingerprinted. The thread reads files and writes the manifest and its cache only: every
database write stays in the step.

The cache is a private file of the console's var dir (KubeConfig.hash_cache), not a file on
the volume: the workers mount the volume read-write, and a cache they could write could
make changed data look unchanged. A controller that stops while hashing leaves no trace:
the next one hashes again (unchanged files from the cache).
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.models import Pod
from kube.config import KubeConfig
from kube.volumes import data_folders, inputs_manifest
from protocol.hashing import HashCache, HashRequest, HashThread
from protocol.units import RunFacts

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class _Pending(HashRequest):
    pod_id: int


class ContentHashing:
    """The workers whose data folders' content is hashed before their Pod is created."""

    def __init__(self, cache: Path | None, wake: Callable[[], None]) -> None:
        self._thread = HashThread(HashCache(cache), wake, who="controller")
        self.bounds = self._thread.bounds
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()

    def of(self, config: KubeConfig, pod: Pod, wanted: bool) -> RunFacts | None:
        """The content facts of a worker about to get its Pod: empty when its job does not
        ask (`wanted`) or has no data folder on the volume; None while they are hashed."""
        job = pod.job
        if not wanted or not job.data:
            return RunFacts()
        where = (config, job.workspace_id, job.pk, job.checkpoint_dir, pod.attempt)
        folders = data_folders(config, job.workspace_id, job.data)
        manifest = inputs_manifest(*where)
        if not folders or manifest is None:
            return RunFacts()
        return self.content(pod.pk, job.pk, folders, manifest)

    def content(
        self, pod_id: int, job_id: int, folders: dict[str, str], manifest: Path
    ) -> RunFacts | None:
        """The worker's content facts once hashed (empty: not hashed, the log said why);
        None while its hash runs, begun at the first ask."""
        with self._lock:
            pending = self._pending.get(pod_id)
            if pending is not None:
                return pending.content

            def say(line: str) -> None:
                log.info("kube: job %s pod %s: %s", job_id, pod_id, line)

            pending = _Pending(folders=dict(folders), manifest=manifest, say=say, pod_id=pod_id)
            self._pending[pod_id] = pending
        self._thread.submit(pending)
        return None

    def keep(self, waiting: set[int]) -> None:
        """Only these workers may still need their hash (no Pod yet): the others' hashes,
        done or not, are dropped (a worker stopped while hashed never gets its Pod)."""
        with self._lock:
            gone = [p for pod_id, p in self._pending.items() if pod_id not in waiting]
            for pending in gone:
                pending.cancel.set()
                del self._pending[pending.pod_id]

    def hashing(self) -> set[int]:
        """The workers whose hash is not done yet."""
        with self._lock:
            return {p.pod_id for p in self._pending.values() if p.content is None}

    def stop(self) -> None:
        """The controller stops: hashing ends; the next controller hashes again."""
        with self._lock:
            for pending in self._pending.values():
                pending.cancel.set()
        self._thread.stop()
