"""A fuzz suite for every boundary (issue 9, sixth bullet): the job API, the create form,
the heartbeat and the log batch, fed hostile input (tests/isolation/hostile.py).

The invariants: never a 5xx; what is refused gets a stable JSON error (API and agent API)
or a field error (form); nothing half-written; whatever is stored fits its column and
could be sent to an agent; and the node keeps serving an ordinary job throughout. CI runs
it on PostgreSQL (.ci/run's second pass), where the old code failed on NUL alone.
"""

from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accounts.actions import issue_api_token
from cluster.models import Node, NodeState
from jobs.models import Job, JobEvent, LogChunk, Pod
from policy.statuses import JobStatus, PodStatus
from protocol import limits
from protocol.agent import WorkerSpec
from protocol.text import name_problem
from tests.agents.conftest import facts, make_job, register
from tests.isolation.hostile import anything, dumps, dumps_with, short_text, text, values

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
API_FIELDS = [
    "quota",
    "workspace",
    "name",
    "image",
    "command",
    "workers",
    "gpus_per_worker",
    "cpus_per_worker",
    "memory_gb_per_worker",
    "priority",
    "idle_resources",
    "env",
    "max_runtime_seconds",
    "fault_tolerance",
    "run_type",
    "max_restarts",
    "restart_policy",
    "hang_detection",
    "hang_timeout",
    "hang_action",
    "checkpoint_dir",
]
API_ERRORS = {"invalid_json", "invalid_text", "validation_error"}
AGENT_ERRORS = {"invalid_json", "invalid_text", "invalid"}


def no_server_error(response) -> None:
    assert response.status_code < 500, response.content[:500]


def json_error(response, codes: set[str]) -> dict:
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] in codes and isinstance(error["message"], str)
    return error


def check_stored_job(job: Job) -> None:
    """A job that was accepted fits its columns and would be taken by an agent."""
    assert len(job.name) <= limits.JOB_NAME and name_problem(job.name) is None
    assert len(job.image) <= limits.IMAGE and len(job.command) <= limits.COMMAND
    WorkerSpec(
        pod_id=1,
        job_id=job.pk,
        attempt=1,
        rank=0,
        world_size=job.workers,
        image=job.image,
        command=job.command,
        env=job.env,
        checkpoint_subdir=job.checkpoint_dir,
    )


def counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


@pytest.fixture
def api_client(researcher) -> Client:
    _, token = issue_api_token(researcher)
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)


BASE = {"quota": "team-a", "image": "busybox", "command": "echo hi", "gpus_per_worker": 1}


@FUZZ
@given(field=st.sampled_from([*API_FIELDS, "surprise"]), value=anything)
def test_the_job_api_never_fails_on_any_field(api_client, quota, node, field, value):
    before = counts()
    body = dumps_with(BASE, field, value)
    response = api_client.post(reverse("api:jobs"), body, content_type="application/json")
    no_server_error(response)
    if response.status_code == 201:
        check_stored_job(Job.objects.get(pk=response.json()["id"]))
        assert counts() == (before[0] + 1, before[1] + 1)
    else:
        assert response.status_code == 400, response.content[:300]
        json_error(response, API_ERRORS)
        assert counts() == before  # nothing half-written


@FUZZ
@given(body=anything)
def test_the_job_api_never_fails_on_any_body(api_client, quota, node, body):
    before = counts()
    response = api_client.post(reverse("api:jobs"), dumps(body), content_type="application/json")
    no_server_error(response)
    assert response.status_code == 400
    json_error(response, API_ERRORS)
    assert counts() == before


FORM_FIELDS = ["quota", "name", "image", "command", "env", "workers", "checkpoint_dir"]


@FUZZ
@given(field=st.sampled_from(FORM_FIELDS), value=text)
def test_the_create_form_never_fails_on_any_field(researcher, quota, node, field, value):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    form = {"quota": str(quota.pk), "image": "busybox", "command": "echo hi", field: value}
    # As a browser would send it, and worse: invalid UTF-8 where a surrogate was.
    raw = "&".join(
        f"{quote(key)}={quote(val.encode('utf-8', 'surrogatepass'))}" for key, val in form.items()
    )
    before = counts()
    response = client.post(
        reverse("web:create"), raw, content_type="application/x-www-form-urlencoded"
    )
    no_server_error(response)
    if response.status_code == 302:
        check_stored_job(Job.objects.order_by("-pk").first())
        assert counts() == (before[0] + 1, before[1] + 1)
    else:
        assert response.status_code == 200
        assert response.context["form"].errors  # a field error, shown on the page
        assert counts() == before


# --- the agent API -------------------------------------------------------------------------


@pytest.fixture
def serving(client, job_factory):
    """A registered node with an ordinary running worker, and a victim worker whose
    reports carry hostile text."""
    node, token = register(client)
    ordinary = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)[1][0]
    victim = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)[1][0]
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)
    return node, agent, ordinary, victim


def agent_post(agent: Client, endpoint: str, body: str):
    return agent.post(f"/api/v1/agent/{endpoint}", body, content_type="application/json")


worker_keys = st.sampled_from(
    ["pod_id", "attempt", "state", "exit_code", "error", "container_id", "progress", "gpu", "x"]
)
hostile_report = st.dictionaries(worker_keys, values, max_size=6)


@st.composite
def victim_report(draw, pod_id: int):
    """Structurally a report of a real worker, with hostile text and details."""
    return {
        "pod_id": pod_id,
        "attempt": 1,
        "state": "running",
        "container_id": draw(text),
        "progress": draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {"step": st.integers(0, 2**62), "phase": text},
                    optional={"metrics": st.dictionaries(short_text, values, max_size=3)},
                ),
                values,
            )
        ),
        "checkpoints": draw(st.one_of(st.just([]), st.lists(values, max_size=3))),
    }


def check_ordinary(agent: Client, ordinary: Pod, node: Node) -> None:
    ordinary.refresh_from_db()
    assert ordinary.status == PodStatus.RUNNING
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def finish_ordinary(agent: Client, ordinary: Pod, node: Node) -> None:
    """The node still serves an ordinary job: its last lines and its exit are applied."""
    batch = {"pod_id": ordinary.pk, "attempt": 1, "first_seq": ordinary.log_next_seq}
    batch["lines"] = ["last line"]
    response = agent_post(agent, "logs/", dumps({"batches": [batch]}))
    assert response.status_code == 200, response.content
    exit_report = {"pod_id": ordinary.pk, "attempt": 1, "state": "exited", "exit_code": 0}
    response = agent_post(agent, "heartbeat/", dumps({"facts": facts(), "workers": [exit_report]}))
    assert response.status_code == 200, response.content
    assert Pod.objects.get(pk=ordinary.pk).status == PodStatus.SUCCEEDED
    assert Job.objects.get(pk=ordinary.job_id).status == JobStatus.COMPLETED
    assert LogChunk.objects.filter(pod=ordinary).last().text.endswith("last line\n")


@pytest.fixture
def finish_after(serving):
    yield
    node, agent, ordinary, _victim = serving
    finish_ordinary(agent, ordinary, node)


@FUZZ
@given(data=st.data())
def test_heartbeats_never_fail_and_the_node_keeps_serving(serving, finish_after, data):
    node, agent, ordinary, victim = serving
    ordinary_report = {"pod_id": ordinary.pk, "attempt": 1, "state": "running"}
    shape = data.draw(st.sampled_from(["item", "victim", "facts", "body"]))
    if shape == "body":
        body = dumps(data.draw(anything))
    elif shape == "facts":
        body = dumps_with({"workers": [ordinary_report]}, "facts", data.draw(anything))
    else:
        item = data.draw(hostile_report if shape == "item" else victim_report(victim.pk))
        # An item naming another worker of the node is a report *of* it, not a bad item.
        assume(item.get("pod_id") not in (ordinary.pk, victim.pk) or shape == "victim")
        workers = data.draw(st.permutations([ordinary_report, item]))
        body = dumps({"facts": facts(), "workers": workers})
    response = agent_post(agent, "heartbeat/", body)
    no_server_error(response)
    if response.status_code == 200:
        check_ordinary(agent, ordinary, node)
        victim.refresh_from_db()
        assert len(victim.progress_phase) <= limits.PHASE
        assert len(victim.container_id) <= limits.CONTAINER_ID
        assert len(victim.report_refused) <= limits.REASON
    else:
        assert response.status_code == 400, response.content[:300]
        json_error(response, AGENT_ERRORS)
        assert shape in ("facts", "body")  # one bad worker never refuses the request


@FUZZ
@given(data=st.data())
def test_log_batches_never_fail_and_the_node_keeps_serving(serving, finish_after, data):
    node, agent, ordinary, victim = serving
    ordinary.refresh_from_db()
    ordinary_stream = {
        "pod_id": ordinary.pk,
        "attempt": 1,
        "first_seq": ordinary.log_next_seq,
        "lines": data.draw(st.lists(text, min_size=1, max_size=5)),
    }
    shape = data.draw(st.sampled_from(["item", "body", "lines"]))
    if shape == "body":
        body = dumps(data.draw(anything))
    else:
        other = data.draw(
            st.dictionaries(
                st.sampled_from(["pod_id", "attempt", "first_seq", "lines", "x"]),
                values,
                max_size=5,
            )
            if shape == "item"
            else st.fixed_dictionaries(
                {
                    "pod_id": st.just(victim.pk),
                    "attempt": st.just(1),
                    "first_seq": st.integers(0, 3),
                    "lines": st.lists(text, min_size=1, max_size=4),
                }
            )
        )
        assume(other.get("pod_id") != ordinary.pk)
        streams = data.draw(st.permutations([ordinary_stream, other]))
        body = dumps({"batches": streams})
    before = Pod.objects.get(pk=ordinary.pk).log_next_seq
    response = agent_post(agent, "logs/", body)
    no_server_error(response)
    if response.status_code == 200:
        after = Pod.objects.get(pk=ordinary.pk).log_next_seq
        assert after == before + len(ordinary_stream["lines"])
        assert response.json()["acks"][str(ordinary.pk)] == after
        chunk = LogChunk.objects.filter(pod=ordinary).last()
        assert "\x00" not in chunk.text
        assert all(len(line) <= limits.LOG_LINE for line in chunk.text.split("\n"))
    else:
        assert response.status_code == 400, response.content[:300]
        json_error(response, AGENT_ERRORS)
        assert shape == "body"
        assert Pod.objects.get(pk=ordinary.pk).log_next_seq == before
    check_ordinary(agent, ordinary, node)


def test_after_all_that_an_ordinary_job_still_runs_to_completion(
    client, researcher, workspace, quota
):
    """The same check on its own, so it is visibly part of the suite."""
    node, token = register(client)
    _job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        status=JobStatus.RUNNING,
        pod_status=PodStatus.RUNNING,
    )
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    finish_ordinary(agent, pod, node)
