"""The Kubernetes controller: a thin shell around `kube.decisions` (docs/kubernetes.md).

Threads only read the API (watches of nodes and pods, one log reader per Pod) into memory;
every database write happens in `step()`, on the controller's own thread, through
`kube.actions`. A step is level-triggered: it reads the caches and the console's pods and
converges, so a lost event, a restarted controller or a second step changes nothing that
is already right. Each worker's steps are applied alone: one that fails is logged and
retried at the next step, never stopping the others.
"""

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from cluster.actions import KUBERNETES
from jobs.folders import output_dir_of
from jobs.models import Job, Pod, PodDesired
from kube import actions
from kube.client import KubeClient, KubeError
from kube.config import KubeConfig
from kube.decisions import ConsolePod, Do, Step, gpu_rows, plan_pod
from kube.hashing import ContentHashing
from kube.logs import Done, LogFollower
from kube.manifest import pod_manifest, service_manifest, service_name
from kube.objects import (
    FINALIZER,
    OWN_SELECTOR,
    KubeNode,
    Observed,
    ValidatorSeen,
    gpu_request,
    is_finished,
    is_own,
    is_validator,
    observe,
    observe_validator,
    parse_node,
)
from kube.permissions import check_permissions
from kube.starting import check_images, has_validator, space_problem, worker_facts
from kube.validation import Validators
from kube.volumes import (
    data_inputs,
    job_checkpoints,
    prepare_outputs,
    promote_units,
    worker_progress,
)
from kube.watch import Watched
from policy.statuses import ACTIVE_POD_STATUSES, FINAL_JOB_STATUSES, PLACED_JOB_STATUSES
from protocol.agent import RunFacts

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 30.0


class Controller:
    def __init__(
        self, config: KubeConfig, client: KubeClient | None = None, watch_timeout: int = 60
    ) -> None:
        self.config = config
        self.client = client or KubeClient(config)
        self.woken = threading.Event()
        self.stopping = threading.Event()
        self.lines: queue.Queue = queue.Queue()
        self.followers: dict[str, LogFollower] = {}
        self.drained: set[str] = set()
        self.imaged: set[int] = set()  # pods whose image id is recorded and checked
        self.validators = Validators(self.client, config, self._release)
        self.wake: Callable[[], None] = self.woken.set
        cache = Path(config.hash_cache) if config.hash_cache else None
        self.hashing = ContentHashing(cache, lambda: self.wake())  # woken once hashed
        node_params = {"labelSelector": config.node_selector} if config.node_selector else {}
        wake = self.woken.set
        self.nodes = Watched(
            self.client, "/api/v1/nodes", node_params, wake, name="nodes", timeout=watch_timeout
        )
        self.own = Watched(
            self.client,
            self.client.pods_path(),
            {"labelSelector": OWN_SELECTOR},
            wake,
            name="pods",
            timeout=watch_timeout,
        )
        # Every unfinished pod of the cluster: the GPUs pods the console does not own hold.
        self.others = Watched(
            self.client,
            "/api/v1/pods",
            {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
            wake,
            name="all-pods",
            timeout=watch_timeout,
        )

    # -- life -------------------------------------------------------------------------

    def start(self) -> None:
        """Check the permissions (a clear error names what is missing), then watch."""
        check_permissions(self.client, self.config)
        for watched in (self.nodes, self.own, self.others):
            watched.start()
        for watched in (self.nodes, self.own, self.others):
            if not watched.synced.wait(SYNC_TIMEOUT):
                raise RuntimeError(f"Kubernetes: listing {watched.path} did not finish")

    def wake_with(self, wake) -> None:
        """Let the watches wake another loop (console.loops) instead of run_forever."""
        self.wake = wake
        for watched in (self.nodes, self.own, self.others):
            watched.on_change = wake

    def stop(self) -> None:
        self.stopping.set()
        self.woken.set()
        for watched in (self.nodes, self.own, self.others):
            watched.stop()
        for follower in self.followers.values():
            follower.stop()
        self.hashing.stop()

    def run_forever(self) -> None:
        while not self.stopping.is_set():
            self.woken.clear()
            close_old_connections()
            try:
                self.step()
            except Exception:
                log.exception("kube controller step failed; retrying")
            self.woken.wait(self.config.sync_interval)

    # -- one step ---------------------------------------------------------------------

    def step(self, now: datetime | None = None) -> None:
        now = now or timezone.now()
        api, validators = self._observe()
        pods = self._console_pods(api)
        self._store_logs(api, pods, now)
        kube_nodes = {n.name: n for n in self._kube_nodes()}
        self._sync_inventory(kube_nodes, now)
        by_id = {o.pod_id: o for o in api.values() if o.pod_id is not None}
        # Before any unit of theirs is promoted (kube.starting.check_images).
        held = check_images(pods, by_id, self.imaged, self._release, now)
        held_jobs = {pods[pk].job_id for pk in held}
        if held:
            pods = self._console_pods(api)  # a refusal ended its job
        self._store_extras(pods, now, held_jobs)
        copies: dict[tuple, set[int]] = defaultdict(set)
        for o in api.values():
            copies[(o.job_id, o.rank)].add(o.attempt or 0)
        for pod in sorted(pods.values(), key=lambda p: p.pk):
            if pod.pk not in held:
                self._converge(pod, by_id.get(pod.pk), kube_nodes, copies, now, validators)
        # Only workers with no Pod yet may still wait for their hash (kube.hashing).
        self.hashing.keep(
            {pk for pk, p in pods.items() if p.status in ACTIVE_POD_STATUSES and pk not in by_id}
        )
        for o in api.values():
            if o.pod_id not in pods:
                self._apply(None, o, Step(Do.RELEASE), now)
        live = {
            o.name
            for o in api.values()
            if o.pod_id in pods and pods[o.pod_id].status in ACTIVE_POD_STATUSES
        }
        self.validators.sweep(validators, live)
        self._forget(api)

    def _observe(self) -> tuple[dict[str, Observed], dict[str, ValidatorSeen]]:
        """The console's worker Pods by name, and its validator Pods by their worker's."""
        workers, validators = {}, {}
        for obj in self.own.snapshot().values():
            if is_validator(obj):
                seen = observe_validator(obj)
                validators[seen.worker] = seen
            else:
                o = observe(obj)
                workers[o.name] = o
        return workers, validators

    def _console_pods(self, api: dict[str, Observed]) -> dict[int, Pod]:
        ids = [o.pod_id for o in api.values() if o.pod_id is not None]
        query = Q(node__runtime=KUBERNETES, status__in=list(ACTIVE_POD_STATUSES)) | Q(pk__in=ids)
        rows = Pod.objects.filter(query).select_related("job", "node").order_by()
        return {p.pk: p for p in rows}

    def _kube_nodes(self) -> list[KubeNode]:
        return [parse_node(obj, self.config) for obj in self.nodes.snapshot().values()]

    def _sync_inventory(self, nodes: dict[str, KubeNode], now: datetime) -> None:
        foreign: dict[str, int] = defaultdict(int)
        for obj in self.others.snapshot().values():
            node = (obj.get("spec") or {}).get("nodeName")
            if node and not is_own(obj, self.config) and not is_finished(obj):
                foreign[node] += gpu_request(obj, self.config.gpu_resource)
        held: dict[str, list[int]] = defaultdict(list)
        live = Pod.objects.filter(node__runtime=KUBERNETES, status__in=list(ACTIVE_POD_STATUSES))
        for name, indices in live.values_list("node__name", "gpu_indices"):
            held[name].extend(indices or [])
        for node in nodes.values():
            fields = {
                "gpus": node.gpus,
                "cpus": node.cpus,
                "memory_gb": node.memory_gb,
                "gpu_type": node.gpu_type,
                "resource_type": self.config.resource_type,
                "agent_version": "kube-controller",
            }
            rows = gpu_rows(node.gpus, foreign[node.name], held[node.name], node.blocked, "")
            try:
                if actions.sync_node(node.name, fields, rows, node.ready, now) is None:
                    log.warning("kube: node %s is an agent's node; not taken over", node.name)
            except Exception:
                log.exception("kube: syncing node %s failed", node.name)

    def _store_logs(self, api: dict[str, Observed], pods: dict[int, Pod], now: datetime) -> None:
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Done):
                self.drained.add(item.name)
                continue
            observed = api.get(item.name)
            pod = pods.get(observed.pod_id) if observed else None
            if pod is None or pod.attempt != observed.attempt:
                continue
            try:
                pod.log_next_seq = actions.store_lines(pod, item.first_seq, item.lines, now)
            except Exception:
                log.exception("kube: storing log lines of %s failed", item.name)
                self._restart_follower(item.name)

    def _store_extras(self, pods: dict[int, Pod], now: datetime, held: set[int]) -> None:
        """Checkpoints once per job (its folder is shared), progress per worker, before any
        exit of this step is applied (a save on SIGTERM is known before the restart). Units
        are promoted only while the job is placed: a job that failed (a worker refused for
        a changed image among them) leaves its staged units staged; none of `held` jobs."""
        if not self.config.checkpoint_root:
            return
        scanned: set[int] = set()
        for pod in sorted(pods.values(), key=lambda p: (p.job_id, p.rank)):
            if pod.status not in ACTIVE_POD_STATUSES or pod.job_id in held:
                continue
            job = pod.job
            try:
                checkpoints, units, result_dir = [], [], ""
                if job.pk not in scanned:  # the job's folders are shared by its workers
                    scanned.add(job.pk)
                    where = (self.config, job.workspace_id, job.pk, job.checkpoint_dir)
                    checkpoints = job_checkpoints(*where)
                    if job.status in PLACED_JOB_STATUSES:
                        units, result_dir = promote_units(*where, pod.attempt, output_dir_of(job))
                progress = worker_progress(self.config, job.workspace_id, pod.pk, pod.attempt)
                actions.store_extras(pod, checkpoints, progress, now, units, result_dir)
            except Exception:
                log.exception("kube: reading checkpoints or progress of pod %s failed", pod.pk)

    def _converge(
        self, pod: Pod, api: Observed | None, nodes, copies, now: datetime, validators: dict
    ) -> None:
        facts = ConsolePod(
            pk=pod.pk,
            job_id=pod.job_id,
            rank=pod.rank,
            attempt=pod.attempt,
            status=pod.status,
            stopping=pod.desired == PodDesired.STOP,
            grace_seconds=pod.stop_grace_seconds,
            live=pod.status in ACTIVE_POD_STATUSES,
            validates=has_validator(pod),
        )
        node = nodes.get(pod.node.name) if pod.node_id else None
        others = copies.get((pod.job_id, pod.rank), set()) - {pod.attempt}
        steps = plan_pod(
            facts,
            api,
            node_ready=bool(node and node.ready),
            logs_done=api is not None and api.name in self.drained,
            rank_blocked=bool(others),
            validator=validators.get(api.name) if api is not None else None,
            now=now,
        )
        for step in steps:
            if not self._apply(pod, api, step, now):
                break

    # -- the steps --------------------------------------------------------------------

    def _apply(self, pod: Pod | None, api: Observed | None, step: Step, now: datetime) -> bool:
        """One step alone; False stops this worker's later steps until the next step."""
        try:
            return self._do(pod, api, step, now)
        except KubeError as exc:
            log.warning("kube: %s of %s refused: %s", step.do, api.name if api else pod, exc)
        except Exception:
            log.exception("kube: %s of %s failed", step.do, api.name if api else pod)
        return False

    def _do(self, pod: Pod | None, api: Observed | None, step: Step, now: datetime) -> bool:
        if step.do == Do.CREATE:
            return self._create(pod, now)
        if step.do == Do.DELETE:
            self._delete(api.name, step.grace)
        elif step.do == Do.START:
            actions.worker_started(pod, api.name, now)
        elif step.do == Do.FOLLOW:
            self._follow(api.name)
        elif step.do == Do.EXIT:
            actions.worker_exited(pod, step.exit_code, step.reason, now)
            if api is not None:
                self._release(api)
        elif step.do == Do.LOSE:
            actions.worker_lost(pod, step.reason, now)
            if api is not None:
                self._release(api)
        elif step.do == Do.REQUEUE:
            actions.worker_refused(pod, step.reason, now)
            self._release(api)
        elif step.do == Do.RELEASE:
            self._release(api)
        elif step.do in (Do.VALIDATE, Do.JUDGE):  # rank 0's validator (kube.validation)
            return self.validators.run(pod, api, step, now)
        return True

    def _create(self, pod: Pod, now: datetime) -> bool:
        facts = worker_facts(pod)
        try:
            if self.config.checkpoint_root:  # its output folders (docs/results.md)
                content = self.hashing.of(self.config, pod, facts.hash_inputs)
                if content is None:  # its data's content is being hashed: no Pod yet
                    return False
                refusal = self._prepare_outputs(pod, content)
                if refusal:  # the run it would resume changed: it never starts
                    actions.worker_resume_refused(pod, refusal, now)
                    return False
                problem = space_problem(self.config, pod, facts.expected_output_gb)
                if problem:  # no node would have more: the volume is every node's
                    actions.worker_start_refused(pod, problem, now)
                    return False
            if pod.rank == 0:  # the job's DNS names (kube.manifest); AlreadyExists: done
                self._create_service(pod.job_id)
            self.client.create_pod(pod_manifest(facts, self.config))
        except KubeError as exc:
            if exc.reason == "AlreadyExists":
                return True
            if exc.status in (400, 422):  # the API refuses this spec: the worker fails
                actions.worker_exited(pod, None, f"Kubernetes refused the pod: {exc.message}", now)
                return False
            raise
        log.info("kube: created pod %s on %s", facts.name, facts.node_name)
        return True

    def _prepare_outputs(self, pod: Pod, content: RunFacts) -> str:
        """The output folders, and the worker's run facts known before it starts: the data
        folders' fingerprint, their `content` (kube.hashing) and the result folder, recorded
        together (the facts are written once). Returns why the worker may not resume the
        run whose units it carries ("" : it may). A volume the console cannot write or read
        is logged: the worker still starts (its units are then not counted, and a contract
        rejects its result)."""
        job = pod.job
        try:
            where = (self.config, job.workspace_id, job.pk, job.checkpoint_dir, pod.attempt)
            result_dir = prepare_outputs(*where, output_dir_of(job))
            facts, note = data_inputs(self.config, job.workspace_id, job.data or {})
        except OSError as exc:
            log.warning("kube: cannot prepare the output folders of job %s: %s", job.pk, exc)
            return ""
        if note:
            log.info("kube: job %s: %s", job.pk, note)
        update = {**content.model_dump(exclude_defaults=True), "result_dir": result_dir}
        facts = facts.model_copy(update=update)
        if facts.result_dir or facts.inputs_fingerprint or facts.inputs_sha256:
            actions.store_run_facts(pod, facts)
        return actions.resume_refusal_of(pod, facts)

    def _create_service(self, job_id: int) -> None:
        try:
            self.client.create_service(service_manifest(job_id, self.config))
        except KubeError as exc:
            if exc.reason != "AlreadyExists":
                raise

    def _drop_service(self, job_id: int | None) -> None:
        """The job's Service once the job is final (its last Pod released)."""
        if (
            job_id is None
            or not Job.objects.filter(pk=job_id, status__in=list(FINAL_JOB_STATUSES)).exists()
        ):
            return
        try:
            self.client.delete_service(service_name(job_id))
        except KubeError as exc:
            if exc.status != 404:
                raise

    def _delete(self, name: str, grace: int) -> None:
        try:
            self.client.delete_pod(name, grace)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def _release(self, api: Observed) -> None:
        """Nothing more to read: drop our finalizer (compare-and-set on the version) and
        delete the Pod at once."""
        follower = self.followers.pop(api.name, None)
        if follower is not None:
            follower.stop()
        if FINALIZER in api.finalizers:
            rest = [f for f in api.finalizers if f != FINALIZER]
            ops = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": api.resource_version},
                {"op": "replace", "path": "/metadata/finalizers", "value": rest},
            ]
            try:
                self.client.json_patch_pod(api.name, ops)
            except KubeError as exc:
                if exc.status != 404:
                    raise
        self._delete(api.name, 0)
        self._drop_service(api.job_id)

    def _follow(self, name: str) -> None:
        follower = self.followers.get(name)
        if follower is not None and (follower.is_alive() or follower.done):
            return
        key = f"{self.config.namespace}/{name}"

        def finished() -> bool:
            obj = self.own.snapshot().get(key)
            return obj is not None and is_finished(obj)

        follower = LogFollower(self.client, name, self.lines, finished)
        if name in self.followers:  # a reader that died: resume after what it sent
            follower.sent = self.followers[name].sent
        self.followers[name] = follower
        follower.start()

    def _restart_follower(self, name: str) -> None:
        """Lines that could not be stored are read again (they are skipped by number)."""
        follower = self.followers.pop(name, None)
        if follower is not None:
            follower.stop()
        self.drained.discard(name)

    def _forget(self, api: dict[str, Observed]) -> None:
        for name in [n for n in self.followers if n not in api]:
            self.followers.pop(name).stop()
        self.drained &= set(api)
        self.imaged &= {o.pod_id for o in api.values()}  # gone from the API: done with
