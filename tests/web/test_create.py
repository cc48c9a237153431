"""Creating a job: the page and the API share JobForm, so every rule is checked through both.

Each bad input must come back with an error on the right field and create nothing.
"""

import json

import pytest
from django.urls import reverse

from cluster.models import NodeState
from jobs.models import Job
from quotas.models import Workspace
from tests.conftest import make_node

GOOD = {
    "quota": "team-a",
    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
    "command": "torchrun train.py",
    "workers": 2,
    "gpus_per_worker": 4,
    "cpus_per_worker": 16,
    "memory_gb_per_worker": 128,
    "priority": 3,
    "idle_resources": "Acceptable",
    "env": "WANDB_MODE=offline\n# comment\n\nLR=3e-4",
}

# (changes to GOOD, field with the error; None = a non-field error)
BAD = {
    "unknown quota id": ({"quota": "987654"}, "quota"),
    "unknown quota name": ({"quota": "no-such-quota"}, "quota"),
    "huge quota id": ({"quota": "9" * 30}, "quota"),
    "huge workers": ({"workers": 10**30}, "workers"),
    "quota of another workspace": ({"quota": "team-b"}, "quota"),
    "no workers": ({"workers": 0}, "workers"),
    "too many workers": ({"workers": 65}, "workers"),
    "negative GPUs": ({"gpus_per_worker": -1}, "gpus_per_worker"),
    "too many GPUs": ({"gpus_per_worker": 9}, "gpus_per_worker"),
    "no CPUs": ({"cpus_per_worker": 0}, "cpus_per_worker"),
    "too many CPUs": ({"cpus_per_worker": 513}, "cpus_per_worker"),
    "no memory": ({"memory_gb_per_worker": 0}, "memory_gb_per_worker"),
    "too much memory": ({"memory_gb_per_worker": 9000}, "memory_gb_per_worker"),
    "CPUs larger than any node": ({"cpus_per_worker": 200}, "cpus_per_worker"),
    "memory larger than any node": ({"memory_gb_per_worker": 2000}, "memory_gb_per_worker"),
    "priority out of range": ({"priority": 10}, "priority"),
    "empty image": ({"image": ""}, "image"),
    "blank image": ({"image": "   "}, "image"),
    "image with spaces": ({"image": "pytorch latest"}, "image"),
    "empty command": ({"command": ""}, "command"),
    "blank command": ({"command": " \n\t "}, "command"),
    "env line without =": ({"env": "WANDB_MODE"}, "env"),
    "env bad name": ({"env": "1BAD=x"}, "env"),
    "env duplicate": ({"env": "A=1\nA=2"}, "env"),
    "env chooses the visible GPUs": ({"env": "CUDA_VISIBLE_DEVICES=0,1"}, "env"),
    "env widens the container's GPUs": ({"env": "NVIDIA_VISIBLE_DEVICES=all"}, "env"),
    "idle resources unknown": ({"idle_resources": "Sometimes"}, "idle_resources"),
    "name too long": ({"name": "n" * 201}, "name"),
    "runtime too short": ({"max_runtime_seconds": 5}, "max_runtime_seconds"),
}


@pytest.fixture
def cluster(quota, other_quota, node):
    """team-a (the researcher's) and team-b (another workspace's); one node with 8 H200 GPUs."""
    return node


def _post_page(client, body):
    data = {key: "" if value is None else str(value) for key, value in body.items()}
    data["quota"] = _quota_value(body["quota"])
    return client.post(reverse("web:create"), data)


def _quota_value(quota: str) -> str:
    """The page's select sends ids; map known names to theirs like the browser would."""
    from quotas.models import Quota

    found = Quota.objects.filter(name=quota).first()
    return str(found.pk) if found else quota


def _post_api(api, body):
    return api.post(reverse("api:jobs"), json.dumps(body), content_type="application/json")


def _assert_page_error(response, field):
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert (field or "__all__") in errors, errors


def _assert_api_error(response, field):
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["field"] == field, error
    assert error["message"]
    assert (field or "__all__") in error["fields"]


@pytest.mark.parametrize("case", BAD.keys())
def test_page_rejects(member_client, cluster, case):
    changes, field = BAD[case]
    response = _post_page(member_client, GOOD | changes)
    _assert_page_error(response, field)
    assert Job.objects.count() == 0


@pytest.mark.parametrize("case", BAD.keys())
def test_api_rejects(api, cluster, case):
    changes, field = BAD[case]
    _assert_api_error(_post_api(api, GOOD | changes), field)
    assert Job.objects.count() == 0


# Rules that depend on the registered nodes ------------------------------------------------


@pytest.mark.parametrize("send", [_post_page, _post_api])
def test_worker_larger_than_any_node(request, quota, send):
    make_node("small", gpus=4)
    client = request.getfixturevalue("member_client" if send is _post_page else "api")
    response = send(client, GOOD | {"gpus_per_worker": 6})
    if send is _post_page:
        _assert_page_error(response, "gpus_per_worker")
        assert "the largest has 4" in str(response.context["form"].errors["gpus_per_worker"])
    else:
        _assert_api_error(response, "gpus_per_worker")
        assert "No Lingjun H200 node has 6 GPUs; the largest has 4" in response.text
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "nodes",
    [
        [],
        [{"name": "lost", "state": NodeState.LOST}],
        [{"name": "other-type", "gpu_type": "A100"}],
        [{"name": "other-resource", "resource_type": "General-purpose"}],
    ],
    ids=["none", "only-lost", "other-gpu-type", "other-resource-type"],
)
def test_no_node_of_the_quota_type_says_so(api, quota, nodes):
    for spec in nodes:
        make_node(**spec)
    response = _post_api(api, GOOD)
    _assert_api_error(response, "quota")
    assert "No Lingjun H200 nodes are registered" in response.json()["error"]["message"]
    assert Job.objects.count() == 0


def test_not_ready_nodes_count_for_the_size_check(api, quota):
    make_node("flaky", state=NodeState.NOT_READY)
    assert _post_api(api, GOOD).status_code == 201


def test_no_single_node_fits_every_dimension_is_a_non_field_error(api, quota):
    make_node("gpu-heavy", gpus=8, cpus=8)
    make_node("cpu-heavy", gpus=1, cpus=128)
    response = _post_api(api, GOOD | {"gpus_per_worker": 8, "cpus_per_worker": 64})
    _assert_api_error(response, None)
    assert "No single Lingjun H200 node" in response.json()["error"]["message"]
    assert Job.objects.count() == 0


# Workspaces -------------------------------------------------------------------------------


@pytest.fixture
def shared_quota(quota, researcher, tenant):
    """team-a bound to a second workspace of the researcher too."""
    from quotas.models import Membership

    second = Workspace.objects.create(tenant=tenant, name="nlp")
    second.quotas.add(quota)
    Membership.objects.create(workspace=second, user=researcher)
    return second


def test_quota_in_several_workspaces_needs_a_workspace(api, node, shared_quota):
    response = _post_api(api, GOOD)
    _assert_api_error(response, "workspace")
    assert "nlp" in response.json()["error"]["message"]
    response = _post_api(api, GOOD | {"workspace": "elsewhere"})
    _assert_api_error(response, "workspace")
    assert Job.objects.count() == 0
    response = _post_api(api, GOOD | {"workspace": "nlp"})
    assert response.status_code == 201
    assert response.json()["workspace"]["name"] == "nlp"


def test_page_shows_the_workspace_field_only_when_useful(member_client, node, shared_quota):
    response = member_client.get(reverse("web:create"))
    assert 'name="workspace"' in response.text
    response = _post_page(member_client, GOOD | {"workspace": str(shared_quota.pk)})
    assert response.status_code == 302
    assert Job.objects.get().workspace == shared_quota


def test_page_hides_the_workspace_field_for_one_workspace(member_client, cluster):
    assert 'name="workspace"' not in member_client.get(reverse("web:create")).text


# API strictness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpus": 4}, "gpus"),  # a typo is an error, not a silent default
        ({"workers": "2"}, "workers"),
        ({"workers": True}, "workers"),
        ({"workers": 2.5}, "workers"),
        ({"image": ["pytorch"]}, "image"),
        ({"env": {"A": 1}}, "env"),
        ({"env": {"1A": "x"}}, "env"),
        ({"env": ["A=1"]}, "env"),
        ({"quota": None}, "quota"),
    ],
)
def test_api_is_strict_about_json_types(api, cluster, changes, field):
    _assert_api_error(_post_api(api, GOOD | changes), field)
    assert Job.objects.count() == 0


@pytest.mark.parametrize("body", ["{", "[]", '"job"', "\xff"])
def test_api_rejects_a_body_that_is_not_a_json_object(api, cluster, body):
    response = api.post(reverse("api:jobs"), body, content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and error["field"] is None
    assert Job.objects.count() == 0


def test_api_reports_every_field_error(api, cluster):
    response = _post_api(api, GOOD | {"workers": 0, "image": "", "env": "X"})
    error = response.json()["error"]
    assert set(error["fields"]) == {"workers", "image", "env"}
    assert error["field"] in error["fields"]


# Success ----------------------------------------------------------------------------------


def test_page_creates_the_job_and_redirects(member_client, cluster, researcher):
    response = _post_page(member_client, GOOD)
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("web:detail", args=[job.pk])
    assert job.owner == researcher and job.quota.name == "team-a"
    assert job.name == "pytorch"  # default from the image
    assert job.env == {"WANDB_MODE": "offline", "LR": "3e-4"}
    assert (job.workers, job.gpus_per_worker, job.cpus_per_worker) == (2, 4, 16)
    assert job.idle_resources == "Acceptable" and job.priority == 3
    assert job.events.get().reason == "submitted"


def test_api_creates_the_job_with_defaults(api, cluster, researcher):
    body = {"quota": "team-a", "image": "busybox", "command": "echo hi", "name": "  mine  "}
    response = _post_api(api, body)
    assert response.status_code == 201
    data = response.json()
    job = Job.objects.get()
    assert data["id"] == job.pk and data["name"] == "mine"
    assert data["status"] == data["display_status"] == "Pending"
    assert data["workers"] == 1 and data["gpus_per_worker"] == 1
    assert data["cpus_per_worker"] == 4 and data["memory_gb_per_worker"] == 16
    assert data["idle_resources"] == "Off" and data["env"] == {}
    assert data["owner"] == "alice" and data["quota"] == {"id": job.quota_id, "name": "team-a"}
    assert data["pods"] == [] and data["cloned_from"] is None


def test_api_accepts_env_as_an_object_and_quota_by_id(api, cluster, quota):
    body = GOOD | {"quota": quota.pk, "env": {"A": "1", "B": "x=y"}}
    response = _post_api(api, body)
    assert response.status_code == 201
    assert Job.objects.get().env == {"A": "1", "B": "x=y"}


def test_clone_prefills_the_form(member_client, cluster, researcher, workspace, quota):
    from tests.web.conftest import submit

    job = submit(researcher, workspace, quota, env={"SEED": "7"}, workers=3)
    html = member_client.get(reverse("web:create") + f"?clone={job.pk}").text
    assert 'name="workers" value="3"' in html
    assert "SEED=7" in html


# Jobs that can never fit their quota (docs/scheduling.md): refused with the numbers
# ------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"workers": 3, "gpus_per_worker": 8, "idle_resources": "Off"},
            "The job needs 24 GPUs (3 workers of 8); quota team-a has 16 in all, "
            "so it could never start.",
            id="off-larger-than-its-quota",
        ),
        pytest.param(
            {"workers": 4, "gpus_per_worker": 8, "idle_resources": "Only Idle Resources"},
            "The job needs 32 GPUs (4 workers of 8); "
            "all H200 quotas of this tenant have 24 in all, so it could never start.",
            id="lingjun-idle-larger-than-the-tenants-quotas",
        ),
        pytest.param(
            {"workers": 4, "gpus_per_worker": 6, "idle_resources": "Only Idle Resources"},
            "The job needs 4 workers of 6 GPUs; each worker is charged to one quota, and the "
            "H200 quotas of this tenant can hold 3 workers of that size at most, so it could "
            "never start.",
            id="lingjun-idle-workers-no-set-of-lenders-holds-whole",  # 16//6 + 8//6 = 3
        ),
    ],
)
@pytest.mark.parametrize("send", [_post_page, _post_api])
def test_a_job_that_can_never_fit_its_quota_is_refused(request, cluster, send, changes, message):
    client = request.getfixturevalue("member_client" if send is _post_page else "api")
    response = send(client, GOOD | changes)
    if send is _post_page:
        _assert_page_error(response, "workers")
        assert response.context["form"].errors["workers"] == [message]
    else:
        _assert_api_error(response, "workers")
        assert response.json()["error"]["message"] == message
    assert Job.objects.count() == 0


@pytest.mark.parametrize("idle", ["Acceptable", "Only Idle Resources"])
def test_a_lingjun_idle_job_may_be_larger_than_its_own_quota(api, cluster, idle):
    # team-a 16 + team-b 8 of the same tenant and GPU type: 24 GPUs could be pooled (and
    # three nodes host the gang).
    make_node("node-1")
    make_node("node-2")
    body = GOOD | {"workers": 3, "gpus_per_worker": 8, "idle_resources": idle}
    assert _post_api(api, body).status_code == 201


@pytest.mark.parametrize("send", [_post_page, _post_api])
def test_a_gang_the_nodes_could_never_host_is_refused(request, cluster, send):
    # One 8-GPU node: two workers of 8 fit team-a's 16 GPUs but never the pool.
    client = request.getfixturevalue("member_client" if send is _post_page else "api")
    response = send(client, GOOD | {"workers": 2, "gpus_per_worker": 8, "idle_resources": "Off"})
    message = (
        "The job needs 2 workers of 8 GPUs; the Lingjun H200 nodes can host 1 at most, "
        "so it could never start."
    )
    if send is _post_page:
        assert response.context["form"].errors["workers"] == [message]
    else:
        assert response.json()["error"]["message"] == message
    assert Job.objects.count() == 0
