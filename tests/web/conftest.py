"""Helpers for page and API tests: jobs in each lifecycle state, logs, HTML inspection."""

from html.parser import HTMLParser

import pytest
from django.test import Client

from jobs.actions.submit import JobSpec, create_job
from jobs.actions.transitions import transition
from jobs.models import HeldGpu, Job, LogChunk, Pod
from policy.statuses import Actor, JobStatus, PodStatus

HTMX = {"HTTP_HX_REQUEST": "true"}


def submit(user, workspace, quota, **spec) -> Job:
    values = {"name": "train", "image": "pytorch:2.4", "command": "python train.py"} | spec
    return create_job(user=user, workspace=workspace, quota=quota, spec=JobSpec(**values))


def free_gpus(node, count: int) -> list[int]:
    """The node's lowest `count` GPUs no live pod holds (the database refuses a second
    holder of a GPU)."""
    held = set(HeldGpu.objects.filter(node=node).values_list("gpu_index", flat=True))
    free = [i for i in range(node.gpus) if i not in held]
    assert len(free) >= count, f"{node.name} has {len(free)} free GPUs, not {count}"
    return free[:count]


def place(job: Job, node, *, pod_status: PodStatus = PodStatus.RUNNING) -> list[Pod]:
    """What the scheduler and an agent would do: Starting with pods, then Running, on the
    node's lowest free GPUs."""
    transition(job, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
    pods = [
        Pod.objects.create(
            job=job,
            attempt=job.attempt,
            rank=rank,
            node=node,
            gpu_indices=free_gpus(node, job.gpus_per_worker),
            gpus=job.gpus_per_worker,
            cpus=job.cpus_per_worker,
            memory_gb=job.memory_gb_per_worker,
            charged_quota=job.quota,
            status=pod_status,
        )
        for rank in range(job.workers)
    ]
    if pod_status == PodStatus.RUNNING:
        transition(job, JobStatus.RUNNING, reason="all workers running", actor=Actor.AGENT)
    return pods


def borrow(job: Job, node, lender, gpu_indices: list[int]) -> list[Pod]:
    """What the scheduler does for an idle job on a lender's capacity: Running, one worker
    Not in Quota charged to `lender`."""
    transition(job, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
    pods = [
        Pod.objects.create(
            job=job,
            attempt=job.attempt,
            rank=0,
            node=node,
            gpu_indices=gpu_indices,
            gpus=len(gpu_indices),
            cpus=job.cpus_per_worker,
            memory_gb=job.memory_gb_per_worker,
            charged_quota=lender,
            in_quota=False,
            status=PodStatus.RUNNING,
        )
    ]
    transition(job, JobStatus.RUNNING, reason="all workers running", actor=Actor.AGENT)
    return pods


def finish(job: Job, node, status: JobStatus = JobStatus.COMPLETED) -> Job:
    """Run the job on `node` and end it with `status`."""
    pods = place(job, node)
    final = PodStatus.SUCCEEDED if status == JobStatus.COMPLETED else PodStatus.FAILED
    Pod.objects.filter(pk__in=[p.pk for p in pods]).update(status=final, exit_code=0)
    transition(job, status, reason="done", actor=Actor.AGENT, exit_code=0)
    return job


def add_log(pod: Pod, start: int, lines: list[str]) -> LogChunk:
    return LogChunk.objects.create(
        pod=pod,
        attempt=pod.attempt,
        seq_start=start,
        seq_end=start + len(lines) - 1,
        text="\n".join(lines) + "\n",
    )


@pytest.fixture(autouse=True)
def _fast_passwords(settings) -> None:
    """Users are made with a password; real PBKDF2 would dominate the run time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def member_client(researcher) -> Client:
    client = Client()
    client.force_login(researcher)
    return client


@pytest.fixture
def colleague_client(colleague) -> Client:
    client = Client()
    client.force_login(colleague)
    return client


@pytest.fixture
def outsider_client(outsider) -> Client:
    client = Client()
    client.force_login(outsider)
    return client


@pytest.fixture
def api(api_token) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")


@pytest.fixture
def job(researcher, workspace, quota, node) -> Job:
    return submit(researcher, workspace, quota)


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: "Element | None"):
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.text = ""

    def inside(self, attribute: str) -> bool:
        node: Element | None = self
        while node is not None:
            if attribute in node.attrs:
                return True
            node = node.parent
        return False


class Tree(HTMLParser):
    """A forgiving HTML walker: every element with its attributes and ancestors."""

    VOID = {"meta", "link", "input", "br", "img", "hr"}

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._stack: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), self._stack[-1] if self._stack else None)
        self.elements.append(element)
        if tag not in self.VOID:
            self._stack.append(element)

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                break

    def handle_data(self, data):
        if self._stack:
            self._stack[-1].text += data

    def find(self, **attrs: str) -> list[Element]:
        """Elements whose attributes have these values (`data_k="used"` for data-k)."""
        wanted = {key.replace("_", "-"): value for key, value in attrs.items()}
        return [
            e
            for e in self.elements
            if all(k in e.attrs and (e.attrs[k] or "") == v for k, v in wanted.items())
        ]

    def values(self, container: Element) -> dict[str, str]:
        """{data-k: text} of the elements inside `container` (numbers a page shows)."""
        out = {}
        for e in self.elements:
            node = e.parent
            while node is not None and node is not container:
                node = node.parent
            if node is container and "data-k" in e.attrs:
                out[e.attrs["data-k"]] = e.text.strip()
        return out

    def by_id(self, element_id: str) -> Element | None:
        return next((e for e in self.elements if e.attrs.get("id") == element_id), None)

    def containing(self, text: str) -> list[Element]:
        return [e for e in self.elements if text in e.text]
