"""Submitting to a quota tree (docs/quota-tree.md "Refusals"): the page and the API refuse a
job above its quota's own guarantee, above a limit on its path, or above what its borrowing
scope could ever lend, with the numbers; the tree costs one query, only when it matters."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs.models import Job
from quotas.models import Quota, ResourceType
from tests.conftest import make_node

GOOD = {
    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
    "command": "torchrun train.py",
    "cpus_per_worker": 16,
    "memory_gb_per_worker": 128,
    "priority": 3,
}
ONLY = "Only Idle Resources"


@pytest.fixture
def tree(tenant, workspace, quota):
    """org 40 (limit 48) ▸ team-a 16 (the fixture quota: limit 24, lends at most 4),
    ▸ dept-y 8 (lends nothing); team-a's workspace may submit to org and team-a."""
    org = Quota.objects.create(
        tenant=tenant,
        name="org",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=40,
        max_gpus=48,
    )
    Quota.objects.filter(pk=quota.pk).update(parent=org, max_gpus=24, lending_limit=4)
    Quota.objects.create(
        tenant=tenant,
        name="dept-y",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=8,
        parent=org,
        lending_limit=0,
    )
    workspace.quotas.add(org)
    for n in range(6):
        make_node(f"node-{n}")
    return org


def _post_api(api, body):
    return api.post(reverse("api:jobs"), json.dumps(body), content_type="application/json")


def _post_page(client, body):
    data = {key: str(value) for key, value in body.items()}
    data["quota"] = str(Quota.objects.get(name=body["quota"]).pk)
    return client.post(reverse("web:create"), data)


@pytest.mark.parametrize(
    ("target", "workers", "idle", "message"),
    [
        pytest.param("org", 3, "Off", "The job needs 24 GPUs (3 workers of 8); quota org "
                     "guarantees 16 of its own (24 of its 40 are carved out by its children), "
                     "so it could never start.", id="off-above-the-own-guarantee"),
        pytest.param("team-a", 4, ONLY, "Quota team-a: limit 24 GPUs, job needs 32 GPUs "
                     "(4 workers of 8), so it could never start.", id="above-its-limit"),
        pytest.param("org", 5, "Acceptable", "The job needs 40 GPUs (5 workers of 8); the "
                     "H200 quotas that quota org may borrow from could lend it 20 GPUs at most "
                     "(lending limits included), so it could never start.",
                     id="above-what-the-scope-lends"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("send", ["page", "api"])
def test_refused_with_the_numbers(request, tree, send, target, workers, idle, message):
    body = GOOD | {"quota": target, "workers": workers, "gpus_per_worker": 8}
    body["idle_resources"] = idle
    if send == "page":
        response = _post_page(request.getfixturevalue("member_client"), body)
        assert response.context["form"].errors["workers"] == [message]
    else:
        response = _post_api(request.getfixturevalue("api"), body)
        assert response.status_code == 400
        assert response.json()["error"]["field"] == "workers"
        assert response.json()["error"]["message"] == message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("target", "workers", "idle"),
    [("org", 2, "Off"), ("team-a", 3, ONLY), ("org", 2, "Acceptable"), ("team-a", 2, "Off")],
)
def test_jobs_the_tree_could_hold_are_accepted(api, tree, target, workers, idle):
    body = GOOD | {"quota": target, "workers": workers, "gpus_per_worker": 8}
    response = _post_api(api, body | {"idle_resources": idle})
    assert response.status_code == 201, response.content


def test_the_tree_costs_one_query_only_when_it_matters(api, tree):
    """A flat quota's Off job reads no tree; a quota of a tree reads it in one query."""
    flat = Quota.objects.create(
        tenant=tree.tenant, name="flat", resource_type="Lingjun", gpu_type="H200", gpus=8
    )
    Quota.objects.get(name="team-a").workspaces.first().quotas.add(flat)
    counts = {}
    for name in ("flat", "flat", "team-a"):  # (the first request also stamps the token)
        body = GOOD | {"quota": name, "workers": 2, "gpus_per_worker": 8, "idle_resources": "Off"}
        with CaptureQueriesContext(connection) as ctx:
            response = _post_api(api, body | {"workers": 3})  # refused: nothing written
        assert response.status_code == 400
        counts[name] = len(ctx.captured_queries)
    assert counts["team-a"] == counts["flat"] + 1, response.content
