"""The docker runtime: one container per worker, through the Docker Engine API
(docs/agent-protocol.md).

The agent builds every container's configuration itself from an allowlist (container_config:
never privileged, no host namespaces, no extra devices, no Docker socket, bind mounts only
under the checkpoint root; GPUs by UUID, by NVIDIA or CDI device request).

Containers carry labels (node, job, pod, attempt = epoch, rank) and a deterministic name, so
the engine itself refuses a second container for one pod attempt, and a restarted agent
finds its containers by label (`adopt`) instead of trusting a local file alone (docs/traps.md).
Logs are read from the engine from the start and counted with agents.node.lines; an adopted
container's already shipped lines are skipped, and an interrupted log stream is re-opened
the same way, so no line is lost or repeated.

Image pulls run in the worker's own thread (a slow pull never delays heartbeats) and their
progress goes to the worker's log; a failed pull fails the worker with the engine's reason.
"""

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.utils import parse_repository_tag

from agents.node.lines import LineSplitter
from agents.node.runtimes.base import (
    CHECKPOINT_ENV,
    ExitSink,
    LaunchError,
    LaunchSpec,
    LineSink,
    SourceLines,
    Worker,
    WorkerTable,
)
from agents.node.runtimes.container_config import (
    LABEL,
    DockerOptions,
    UnsafeConfig,
    check_config,
    checkpoint_folder,
    container_config,
    container_name,
)
from agents.node.validator_container import ContainerValidation, validator_config
from agents.node.validator_container import start as start_in_container
from protocol.agent import RESUME_REFUSED, RunFacts
from protocol.units import resume_refusal

__all__ = [
    "DockerOptions",
    "DockerRuntime",
    "UnsafeConfig",
    "check_config",
    "checkpoint_folder",
    "container_config",
    "container_name",
]

log = logging.getLogger(__name__)


class _FollowCut(Exception):
    """The follow stream was cut (the container had exited) before it was opened."""


# Once the container has exited, how long its follow stream may take to end by itself
# before the reader stops following and reads the stored log instead: podman's compat API
# under load sometimes keeps a follow stream open long after the exit (seen past 30 s).
FOLLOW_END_GRACE = 2.0
# Then how long the exit report waits for that last read (an engine under load is slow).
READER_JOIN_TIMEOUT = 30.0


@dataclass
class _Container(Worker):
    container_id: str = ""
    follow_stream: Any = None  # the open follow stream, closed to stop following
    follow_cut: threading.Event = field(default_factory=threading.Event)

    @property
    def handle(self) -> str:
        return self.container_id[:64]


class DockerRuntime(WorkerTable):
    name = "docker"
    join_timeout = READER_JOIN_TIMEOUT

    def __init__(
        self,
        opts: DockerOptions,
        on_line: LineSink,
        on_exit: ExitSink,
        *,
        base_url: str | None = None,
    ) -> None:
        super().__init__(on_line, on_exit)
        self.opts = opts
        base_url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        # One client for calls, one without a read timeout for streams that idle. Both
        # ask the engine for its API version when created.
        if base_url.startswith("unix://") and not Path(base_url[7:]).exists():
            raise LaunchError(f"cannot reach the Docker engine: no socket at {base_url[7:]}")
        client = None
        try:
            client = docker.DockerClient(base_url=base_url)
            self.stream_api = docker.APIClient(
                base_url=base_url, timeout=None, version=client.api.api_version
            )
        except (DockerException, requests.RequestException) as exc:
            if client is not None:
                client.close()
            raise LaunchError(f"cannot reach the Docker engine: {exc}") from exc
        self.client = client
        self.api = self.client.api

    def engine_info(self) -> dict:
        """The engine's `/info` (runtimes, CDI): what `--docker-gpus auto` decides by."""
        try:
            return dict(self.client.info())
        except (DockerException, requests.RequestException) as exc:
            log.warning("cannot read the engine's info: %s", exc)
            return {}

    # --- launching ---

    def launch(self, spec: LaunchSpec) -> None:
        worker = _Container(
            pod_id=spec.pod_id,
            attempt=spec.attempt,
            gpu_indices=spec.gpu_indices,
            gpu_uuids=spec.gpu_uuids,
            lines=SourceLines(spec.pod_id, self._on_line),
            starting=True,
        )
        self._add(worker)
        threading.Thread(
            target=self._prepare, args=(worker, spec), name=f"pod-{spec.pod_id}-start", daemon=True
        ).start()

    def _prepare(self, worker: _Container, spec: LaunchSpec) -> None:
        try:
            if spec.gpu_indices and self.opts.gpus == "off":
                worker.lines.agent(
                    "[agent] GPUs are not attached: this agent runs with --docker-gpus off"
                )
            checkpoints = None
            host_folder = spec.env.get(CHECKPOINT_ENV)
            if self.opts.checkpoint_root is not None and host_folder:
                # Only the job's own folder, inside its workspace's area, is mounted.
                area = Path(self.opts.checkpoint_root)
                if spec.workspace_id:
                    area = area / f"ws-{spec.workspace_id}"
                checkpoints = checkpoint_folder(area, Path(host_folder))
            config = container_config(spec, self.opts, checkpoints)
            check_config(
                config,
                self.opts.checkpoint_root,
                self.opts.fence_dir,
                host_network=self.opts.host_network,
            )
            self._ensure_image(worker, spec.image)
            self._check_resume(worker, spec)
            with worker.lock:  # a stop that came during the pull: never start it
                if worker.stopping:
                    raise LaunchError("stopped before the container started")
                container = self._create(config)
                worker.container_id = container.id
            if container.status == "created":
                container.start()
        except (LaunchError, DockerException, requests.RequestException, OSError) as exc:
            message = str(exc) if isinstance(exc, LaunchError) else f"cannot start: {exc}"
            worker.lines.agent(f"[agent] {message}")
            self._finish(worker, None, message)
            return
        worker.starting = False
        self._watch(worker)

    def _create(self, config: dict):
        try:
            return self.client.containers.create(**config)
        except APIError as exc:
            # Docker answers 409; podman 500 "…already in use".
            if exc.status_code != 409 and "already in use" not in str(exc.explanation):
                raise
            # Same name: a container of this pod attempt exists (we crashed after creating
            # it). Take it over rather than starting a second one.
            return self.client.containers.get(config["name"])

    def _check_resume(self, worker: _Container, spec: LaunchSpec) -> None:
        """A resume whose image changed since the run it carries units of is refused
        (docs/results.md): the engine resolves the image only now, after the pull."""
        if spec.resume_identity is None or not spec.resume_identity.image_digest:
            return
        refusal = resume_refusal(
            spec.resume_identity, RunFacts(image_digest=self.image_id(spec.image))
        )
        if refusal:
            worker.ended_by = RESUME_REFUSED
            raise LaunchError(f"launch failed: {refusal}")

    def start_validator(
        self, *, pod_id: int, attempt: int, image: str, command: str,
        env: Mapping[str, str], result_dir: Path,
    ) -> ContainerValidation:  # fmt: skip
        """Rank 0's result validator in a container of the job's image (docs/results.md)."""
        config = validator_config(
            node=self.opts.node, pod_id=pod_id, attempt=attempt, image=image,
            command=command, env=env, result_dir=result_dir,
        )  # fmt: skip
        return start_in_container(self.api, config)

    def image_id(self, image: str) -> str:
        """The image's id as the engine resolved it (docs/results.md, run identity)."""
        return str(self.api.inspect_image(image).get("Id", ""))

    def _ensure_image(self, worker: _Container, image: str) -> None:
        try:
            self.api.inspect_image(image)
            return
        except ImageNotFound:
            pass
        repo, tag = parse_repository_tag(image)
        worker.lines.agent(f"[agent] pulling image {image}")
        last: dict[str, str] = {}
        try:
            for event in self.stream_api.pull(repo, tag=tag or "latest", stream=True, decode=True):
                if "error" in event:
                    raise LaunchError(f"image pull failed: {image}: {event['error']}")
                status, layer = event.get("status", ""), event.get("id", "")
                if status and last.get(layer) != status:  # each step once, not every tick
                    last[layer] = status
                    worker.lines.agent(
                        f"[agent] pull {image}: {layer + ': ' if layer else ''}{status}"
                    )
        except (APIError, requests.RequestException) as exc:
            reason = getattr(exc, "explanation", None) or str(exc)
            raise LaunchError(f"image pull failed: {image}: {reason}") from exc
        try:
            self.api.inspect_image(image)
        except ImageNotFound:
            raise LaunchError(f"image pull failed: {image}: not found after pulling") from None

    # --- watching: logs and exit ---

    def _watch(self, worker: _Container) -> None:
        reader = threading.Thread(
            target=self._follow, args=(worker,), name=f"pod-{worker.pod_id}-out", daemon=True
        )
        reader.start()
        threading.Thread(
            target=self._wait, args=(worker, reader), name=f"pod-{worker.pod_id}-wait", daemon=True
        ).start()

    def _follow(self, worker: _Container) -> None:
        """Stream the container's output to its end. An interrupted stream is opened again
        from the start and the lines already seen are skipped. A stream that ends is read
        once more without following, the same way: an engine may end a follow stream
        before the container's last lines (podman's compat API under load does), or keep
        it open after the exit (then `_wait` cuts it: `follow_cut`; a line it cut in two
        is not passed on, the stored log's read gives it whole)."""
        seen = 0
        follow = True
        while True:
            index = 0

            def emit(line: str) -> None:
                nonlocal index, seen
                index += 1
                if index > seen:
                    seen += 1
                    worker.lines(line)

            splitter = LineSplitter(emit)
            try:
                stream = self.stream_api.logs(
                    worker.container_id, stdout=True, stderr=True, stream=True, follow=follow
                )
                if follow:
                    worker.follow_stream = stream
                    if worker.follow_cut.is_set():  # cut while it was being opened
                        getattr(stream, "close", lambda: None)()
                        raise _FollowCut
                for chunk in stream:
                    splitter.feed(chunk)
                if not (follow and worker.follow_cut.is_set()):
                    splitter.finish()
                if not follow:
                    return
                follow = False  # once more, to its end as stored
            except NotFound:
                return
            except Exception as exc:
                if follow and worker.follow_cut.is_set():  # closed by _wait: read the rest
                    follow = False
                    continue
                if not isinstance(exc, DockerException | requests.RequestException):
                    raise
                if worker.done.is_set():
                    return
                log.warning("pod %s: log stream interrupted (%s); reopening", worker.pod_id, exc)
                time.sleep(1)

    def _wait(self, worker: _Container, reader: threading.Thread) -> None:
        code, error = None, ""
        while True:
            try:
                code = int(self.stream_api.wait(worker.container_id)["StatusCode"])
                break
            except NotFound:
                error = "the container disappeared"
                break
            except (DockerException, requests.RequestException) as exc:
                log.warning("pod %s: waiting failed (%s); retrying", worker.pod_id, exc)
                time.sleep(1)
        with worker.lock:
            for timer in worker.timers:
                timer.cancel()
        reader.join(FOLLOW_END_GRACE)
        if reader.is_alive():  # the engine keeps following an exited container: stop it
            worker.follow_cut.set()
            with contextlib.suppress(Exception):
                getattr(worker.follow_stream, "close", lambda: None)()
        reader.join(READER_JOIN_TIMEOUT)
        if reader.is_alive():
            log.warning(
                "pod %s: output still unread %ss after exit", worker.pod_id, READER_JOIN_TIMEOUT
            )
        if code not in (None, 0):
            error = worker.lines.error_tail()
        self._finish(worker, code, error)

    # --- stopping ---

    def _signal(self, worker: _Container, sig: signal.Signals) -> None:
        if not worker.container_id:  # still pulling: it will not start
            return
        with contextlib.suppress(DockerException, requests.RequestException):
            self.api.kill(worker.container_id, signal=sig.name)

    def _release(self, worker: _Container) -> None:
        if worker.container_id:  # shipped and reported: nothing to adopt any more
            with contextlib.suppress(DockerException, requests.RequestException):
                self.api.remove_container(worker.container_id, force=True)

    # --- after an agent restart ---

    def adopt(
        self, skip: Mapping[int, int], prepare: Callable[[int, int], None] | None = None
    ) -> dict[int, int]:
        filters = {"label": [f"{LABEL}.managed=true", f"{LABEL}.node={self.opts.node}"]}
        adopted: dict[int, int] = {}
        for container in self.client.containers.list(all=True, filters=filters):
            labels = container.labels
            try:
                pod_id, attempt = int(labels[f"{LABEL}.pod"]), int(labels[f"{LABEL}.attempt"])
                gpus = tuple(int(i) for i in labels.get(f"{LABEL}.gpus", "").split(",") if i)
                uuids = tuple(u for u in labels.get(f"{LABEL}.gpu-uuids", "").split(",") if u)
            except (KeyError, ValueError):
                log.warning("container %s has unreadable labels; ignoring it", container.name)
                continue
            if self.has(pod_id):
                continue
            worker = _Container(
                pod_id=pod_id,
                attempt=attempt,
                gpu_indices=gpus,
                gpu_uuids=uuids,
                lines=SourceLines(pod_id, self._on_line, skip.get(pod_id, 0)),
                container_id=container.id,
            )
            self._add(worker)
            if container.status == "created":  # we crashed between create and start
                with contextlib.suppress(DockerException):
                    container.start()
            if prepare is not None:
                prepare(pod_id, attempt)
            self._watch(worker)
            adopted[pod_id] = attempt
            log.info("adopted container %s (pod %s attempt %s)", container.name, pod_id, attempt)
        return adopted

    def kill_leftovers(self, markers: set[str]) -> int:
        return 0  # every container of this node is adopted by label; none is left over

    def close(self) -> None:
        self.client.close()
        self.stream_api.close()
