"""Shared fixtures: a tenant with workspaces, quotas, users of each role, and GPU nodes."""

import threading
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.actions import issue_api_token
from cluster.models import GpuDevice, Node, NodeState
from quotas.models import Membership, Quota, ResourceType, Role, Tenant, Workspace


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings):
    """Each test counts rate limits under its own key prefix (the Redis store outlives a
    test's database)."""
    settings.RATE_LIMIT_PREFIX = f"test-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def _no_random_rate_counter_purge(monkeypatch):
    """The database rate-limit store deletes expired windows on one hit in a hundred, at
    random (accounts.ratelimit.PURGE_CHANCE): one more statement that made query-count
    tests fail now and then. Off in tests; tests/api/test_rate_counter_purge.py turns it on."""
    monkeypatch.setattr("accounts.ratelimit.PURGE_CHANCE", 0.0)


@pytest.fixture(autouse=True)
def _snapshot_reads_from_scratch():
    """The cycle's snapshot keeps rows between reads, per process (jobs.scheduler.live,
    .running, .waiting): each test starts with none, so its query counts do not depend
    on the tests before it."""
    from jobs.scheduler.snapshot import forget

    forget()


@pytest.fixture
def tenant(db):
    return Tenant.objects.create(name="acme")


@pytest.fixture
def workspace(tenant):
    return Workspace.objects.create(tenant=tenant, name="vision")


@pytest.fixture
def other_workspace(tenant):
    return Workspace.objects.create(tenant=tenant, name="speech")


@pytest.fixture
def quota(tenant, workspace):
    q = Quota.objects.create(
        tenant=tenant, name="team-a", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=16
    )
    workspace.quotas.add(q)
    return q


@pytest.fixture
def other_quota(tenant, other_workspace):
    q = Quota.objects.create(
        tenant=tenant, name="team-b", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=8
    )
    other_workspace.quotas.add(q)
    return q


def make_user(username: str, workspace=None, role: str = Role.RESEARCHER, **extra):
    user = get_user_model().objects.create_user(
        username=username, password="correct-horse-battery", **extra
    )
    if workspace is not None:
        Membership.objects.create(workspace=workspace, user=user, role=role)
    return user


@pytest.fixture
def researcher(workspace):
    return make_user("alice", workspace)


@pytest.fixture
def colleague(workspace):
    return make_user("bob", workspace)


@pytest.fixture
def outsider(other_workspace):
    return make_user("mallory", other_workspace)


@pytest.fixture
def api_token(researcher):
    _, plain = issue_api_token(researcher)
    return plain


def make_node(name: str = "node-0", gpus: int = 8, gpu_type: str = "H200", **extra) -> Node:
    node = Node.objects.create(
        name=name,
        resource_type=extra.pop("resource_type", ResourceType.LINGJUN),
        gpu_type=gpu_type,
        gpus=gpus,
        cpus=extra.pop("cpus", 128),
        memory_gb=extra.pop("memory_gb", 1024),
        state=extra.pop("state", NodeState.READY),
        last_heartbeat_at=timezone.now(),
        **extra,
    )
    GpuDevice.objects.bulk_create(
        GpuDevice(node=node, index=i, uuid=f"GPU-{name}-{i}", name=f"NVIDIA {gpu_type}")
        for i in range(gpus)
    )
    return node


@pytest.fixture
def node(db):
    return make_node()


def post_confirmed(client, url: str, data: dict):
    """Post an admin quota form twice, as a person does: the first post shows the preview
    (nothing saved), the second confirms it with the token of the previewed state."""
    first = client.post(url, data)
    form = first.context and first.context.get("adminform")
    if first.status_code != 200 or form is None or "preview_token" not in form.form.data:
        return first  # refused before any preview, or saved (nothing changed)
    if set(form.form.errors) - {"__all__"}:
        return first  # field errors: no preview
    return client.post(url, data | {"preview_token": form.form.data["preview_token"]})


@pytest.fixture
def held_file_hash(monkeypatch):
    """Every data file's hash (protocol.hashing, agent and Kubernetes controller alike)
    held until `gate` is set; `entered` once one is held. The gate opens at teardown, and
    a held hash gives up waiting after 30 s (a test that forgot its gate still ends)."""
    from protocol import hashing

    entered, gate = threading.Event(), threading.Event()
    real = hashing.file_sha256

    def held(path, on_block):
        entered.set()
        gate.wait(30.0)
        return real(path, on_block)

    monkeypatch.setattr(hashing, "file_sha256", held)
    yield entered, gate
    gate.set()
