"""One set of limits and one sanitiser at every boundary (issue 9, first bullet).

The job form, the researcher API, the agent protocol's schemas and the database columns
read the same constants (protocol.limits); stored text always fits its column; names refuse
control and bidirectional characters; what an agent would refuse is refused at submission.
"""

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.actions.stop import stop_pods
from jobs.models import Job, Pod
from policy.statuses import JobStatus, PodStatus
from protocol import limits
from protocol.agent import JobRunSpec, ProgressReport, WorkerReport, WorkerSpec, job_problems
from protocol.text import NUL_MARK, TRUNCATED, clean_text, fit, fit_tail, name_problem
from tests.isolation.conftest import needs_postgres
from web.forms import JobForm

pytestmark = pytest.mark.django_db

BASE = {"image": "busybox", "command": "echo hi", "gpus_per_worker": 1}


def submit(api, quota, **fields):
    body = {"quota": quota.name, **BASE, **fields}
    return api.post(reverse("api:jobs"), body, content_type="application/json")


def field_error(response, field: str) -> str:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("validation_error", field), error
    return error["message"]


# --- the same numbers everywhere -----------------------------------------------------------


def _max_length(model, name: str) -> int:
    return model._meta.get_field(name).max_length


def test_columns_form_and_protocol_read_the_same_limits(researcher):
    form = JobForm(user=researcher)
    pairs = [
        (_max_length(Job, "name"), form.fields["name"].max_length, limits.JOB_NAME),
        (_max_length(Job, "image"), form.fields["image"].max_length, limits.IMAGE),
        (
            _max_length(Job, "checkpoint_dir"),
            form.fields["checkpoint_dir"].max_length,
            limits.CHECKPOINT_DIR,
        ),
    ]
    for column, field, limit in pairs:
        assert column == field == limit
    assert form.fields["command"].max_length == limits.COMMAND
    for name in ("status_reason", "stop_reason", "report_refused"):
        assert _max_length(Pod, name) == limits.REASON
    assert _max_length(Job, "stop_reason") == limits.REASON
    assert _max_length(Pod, "progress_phase") == limits.PHASE
    assert _max_length(Pod, "container_id") == limits.CONTAINER_ID
    # The protocol cuts an agent's text to exactly the column's size.
    long = "y" * 5000
    assert len(ProgressReport(step=1, phase=long).phase) == limits.PHASE
    report = WorkerReport(pod_id=1, attempt=1, state="exited", container_id=long, error=long * 2)
    assert len(report.container_id) == limits.CONTAINER_ID
    assert len(report.error) == limits.ERROR_TAIL


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "x" * (limits.IMAGE + 1)),
        ("command", "x" * (limits.COMMAND + 1)),
        ("env", {"A" * (limits.ENV_NAME + 1): "1"}),
        ("env", {"A": "x" * (limits.ENV_VALUE + 1)}),
        ("env", {f"V{i}": "1" for i in range(limits.ENV_VARS + 1)}),
        ("checkpoint_subdir", "a/" * limits.CHECKPOINT_DEPTH + "a"),
    ],
)
def test_the_protocol_refuses_past_the_same_limits(field, value):
    spec = {"image": "busybox", "command": "true", field: value}
    assert field in job_problems(**spec)
    with pytest.raises(ValueError):
        JobRunSpec.model_validate(spec)


# --- what the agent would refuse is refused at submission ----------------------------------


def test_a_280_character_env_name_is_a_field_error_not_a_stuck_job(api, quota, node):
    response = submit(api, quota, env={"A" * 280: "1"})
    assert "longer than 255 characters" in field_error(response, "env")
    assert not Job.objects.exists()
    # Exactly the limit is what the protocol accepts, and the job is taken.
    response = submit(api, quota, env={"A" * limits.ENV_NAME: "1"})
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    WorkerSpec(pod_id=1, job_id=job.pk, attempt=1, rank=0, world_size=1, **_run(job))


def _run(job: Job) -> dict:
    return {"image": job.image, "command": job.command, "env": job.env}


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"command": "echo a\x00b"}, "command", "Null characters are not allowed"),
        ({"env": {"A": "x\x00y"}}, "env", "NUL"),
        ({"env": {"1A": "x"}}, "env", "not a valid variable name"),
        ({"image": "busy box"}, "image", "spaces"),
        ({"name": "report\u202egpj.exe"}, "name", "bidirectional control character, U+202E"),
        ({"name": "a\u2066b"}, "name", "bidirectional control character, U+2066"),
        ({"name": "a\u200fb"}, "name", "bidirectional control character, U+200F"),
        ({"name": "tab\there"}, "name", "control character, U+0009"),
        ({"name": "zero\u200bwidth"}, "name", "invisible formatting character, U+200B"),
        ({"checkpoint_dir": "../vision/shared"}, "checkpoint_dir", "no '..'"),
    ],
)
def test_values_an_agent_would_refuse_are_field_errors(api, quota, node, fields, field, says):
    assert says in field_error(submit(api, quota, **fields), field)
    assert not Job.objects.exists()


def test_the_create_page_shows_the_same_field_errors(researcher, quota, node):
    client = Client()
    client.force_login(researcher)
    data = {"quota": str(quota.pk), **BASE, "name": "evil\u202eexe", "env": "A" * 280 + "=1"}
    response = client.post(reverse("web:create"), data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "bidirectional control character" in errors["name"][0]
    assert "longer than 255 characters" in errors["env"][0]
    assert not Job.objects.exists()


# --- stored text fits its column by construction --------------------------------------------


@needs_postgres
def test_a_reason_longer_than_its_column_is_cut_with_a_marker(job_factory, node):
    """Whatever path writes a reason (a save, a queryset update), it is cleaned and cut to
    its column: PostgreSQL never sees a NUL or a too-long value (which failed the whole
    request, and with it every heartbeat of the node)."""
    job, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    reason = "job failed: worker 0 failed: " + "r" * 300 + "\x00"
    stop_pods(job.pk, reason=reason, stop_as=PodStatus.STOPPED)
    pod.refresh_from_db()
    assert len(pod.stop_reason) == limits.REASON
    assert pod.stop_reason.endswith(TRUNCATED)
    Pod.objects.filter(pk=pod.pk).update(error_message="boom\x00", status_reason="a\x00b" * 200)
    pod.refresh_from_db()
    assert pod.error_message == f"boom{NUL_MARK}"
    assert len(pod.status_reason) == limits.REASON


# --- the sanitiser's own promises (properties) ----------------------------------------------

texts = st.text(alphabet=st.characters(codec=None, categories=None), max_size=400)


@settings(max_examples=300, deadline=None)
@given(text=texts, limit=st.integers(min_value=1, max_value=500))
def test_fitted_text_always_fits_and_can_be_stored(text, limit):
    for fitted in (fit(text, limit), fit_tail(text, limit)):
        assert len(fitted) <= limit
        assert "\x00" not in fitted
        fitted.encode("utf-8")  # no lone surrogate left
    if len(clean_text(text)) <= limit:
        assert fit(text, limit) == clean_text(text)  # nothing cut that fits
    assert clean_text(text).count(NUL_MARK) == text.count("\x00") + text.count(NUL_MARK)


@settings(max_examples=300, deadline=None)
@given(name=texts)
def test_a_name_that_passes_shows_what_it_says(name):
    if name_problem(name) is None:
        assert all(c not in name for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
        assert all(ord(c) >= 32 and c != "\x7f" for c in name)
        name.encode("utf-8")
