"""A job's framework and how its workers meet, in the API and on the job page
(docs/distributed.md)."""

from django.test import Client

from jobs.scheduler.cycle import run_cycle
from tests.api.conftest import GOOD, error_of, post

TF = {
    **GOOD,
    "workers": 3,
    "gpus_per_worker": 1,
    "framework": "tensorflow",
    "ps_workers": 1,
    "data": {"mnist": "datasets/mnist"},
}


def test_the_framework_is_stored_and_each_worker_shows_its_role(api, quota, node):
    created = post(api, "/api/v1/jobs", TF)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["distributed"] == {"framework": "tensorflow", "nproc_per_node": 0, "ps_workers": 1}
    assert body["roles"] == {"chief": 1, "ps": 1, "worker": 1}
    assert body["rendezvous"] is None  # not placed yet
    assert body["data"] == {"mnist": "datasets/mnist"}
    run_cycle()
    read = api.get(f"/api/v1/jobs/{body['id']}").json()
    assert [(p["rank"], p["role"]) for p in read["pods"]] == [
        (0, "chief"),
        (1, "ps"),
        (2, "worker"),
    ]
    assert read["rendezvous"]["master_addr"] == node.name  # no address recorded: its name
    assert read["rendezvous"]["hosts"] == [node.name] * 3
    assert 29500 <= read["rendezvous"]["master_port"] <= 29999


def test_a_generic_job_is_all_workers(api, quota, node):
    body = post(api, "/api/v1/jobs", GOOD).json()
    assert body["distributed"]["framework"] == "generic"
    assert body["roles"] == {"worker": 1}


def test_an_unknown_framework_is_refused_with_its_field(api, quota, node):
    error = error_of(
        post(api, "/api/v1/jobs", {**GOOD, "framework": "jax"}), 400, "validation_error"
    )
    assert error["field"] == "framework"


def test_the_job_page_groups_workers_by_role(api, quota, node, researcher):
    job_id = post(api, "/api/v1/jobs", TF).json()["id"]
    run_cycle()
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    for role in ("chief", "ps", "worker"):
        assert f"{role} · attempt 1" in page
    assert "tensorflow: 1 chief, 1 ps, 1 worker" in page
    assert "Rendezvous" in page
    assert "mnist=datasets/mnist" in page and "DATA_MNIST" in page


def test_a_data_folder_outside_the_workspace_area_is_refused(api, quota, node):
    response = post(api, "/api/v1/jobs", {**GOOD, "data": {"x": "../other"}})
    assert error_of(response, 400, "validation_error")["field"] == "data"
