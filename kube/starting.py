"""What the controller checks as a worker starts (docs/results.md, "Before a long run" and
"Resume without duplicates"), and what its Pod is made from: the free space of the volume
its output goes to, before the Pod; the image its kubelet ran, once the Pod runs. Reads and
writes through `kube.actions`; the rules are `protocol.freespace` and
`kube.decisions.image_refusal`."""

import logging
from collections.abc import Callable
from datetime import datetime

from jobs.folders import output_dir_of
from jobs.models import Pod
from kube import actions
from kube.config import KubeConfig
from kube.decisions import image_refusal
from kube.manifest import WorkerFacts
from kube.objects import Observed
from kube.volumes import output_space_problem, result_folder
from policy.jobspec import worker_fields

log = logging.getLogger(__name__)


def worker_facts(pod: Pod) -> WorkerFacts:
    """What the worker's Pod (and its validator's) is made from."""
    job = pod.job
    return WorkerFacts(
        pod_id=pod.pk,
        job_id=job.pk,
        rank=pod.rank,
        attempt=pod.attempt,
        world_size=job.workers,
        node_name=pod.node.name,
        gpus=pod.gpus,
        cpus=pod.cpus,
        memory_gb=pod.memory_gb,
        grace_seconds=pod.stop_grace_seconds,
        workspace_id=job.workspace_id,
        resume_from=job.resume_from,
        distributed=dict(job.distributed or {}),
        gpus_per_worker=job.gpus_per_worker,
        **worker_fields(job),  # image, command, env, checkpoint folder (policy.jobspec)
    )


def has_validator(pod: Pod) -> bool:
    """Rank 0 of a job with a result validator (docs/results.md, "The validator")."""
    return pod.rank == 0 and bool(worker_fields(pod.job).get("result_validator"))


def space_problem(config: KubeConfig, pod: Pod, expected_gb: int | None) -> str:
    """Why the volume cannot take the worker's output, or "" (also when the console cannot
    measure it: the start goes on). Every node mounts the same volume, so no other node
    would do better: the worker is refused everywhere (kube.actions.worker_start_refused)."""
    job = pod.job
    where = (config, job.workspace_id, job.pk, job.checkpoint_dir, pod.attempt)
    problem = output_space_problem(*where, expected_gb, output_dir_of(job))
    return f"{problem}; the checkpoint volume is shared by every node" if problem else ""


def result_dir_of(config: KubeConfig, pod: Pod) -> str:
    """The run's result folder inside the workers' mount ("" : the console has no mount)."""
    job = pod.job
    return result_folder(config, job.workspace_id, job.pk, job.checkpoint_dir, output_dir_of(job))


def check_images(
    pods: dict[int, Pod],
    by_id: dict[int, Observed],
    checked: set[int],
    release: Callable[[Observed], None],
    now: datetime,
) -> set[int]:
    """The image's id each worker's kubelet reports, recorded once (the run identity); a
    worker that would resume a run whose image changed is refused: ended `resume_refused`
    (never retried) and its Pod `release`d at once, before the step promotes any unit it
    staged. `checked`: the pods done with (added to). Returns the pods to hold this step:
    refused, or not checked because of an error (looked at again next step)."""
    seen = [
        (pod, by_id[pod.pk])
        for pod in pods.values()
        if pod.pk in by_id and by_id[pod.pk].image_id and pod.pk not in checked
    ]
    if not seen:
        return set()
    try:
        expected = actions.identities_of([pod for pod, _ in seen])
    except Exception:
        log.exception("kube: reading the run identities failed")
        return {pod.pk for pod, _ in seen}
    held: set[int] = set()
    for pod, api in seen:
        try:
            actions.note_image(pod, api.image_id)
            why = image_refusal(expected.get(pod.pk), api.image_id)
            if why:
                held.add(pod.pk)
                actions.worker_resume_refused(pod, why, now)
                release(api)
            checked.add(pod.pk)
        except Exception:
            held.add(pod.pk)
            log.exception("kube: checking the image of pod %s failed", pod.pk)
    return held
