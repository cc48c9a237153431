"""Dashboard and Quotas pages: access, and every number equal to the scheduler's accounting."""

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.actions.transitions import transition
from jobs.models import Job, Pod, WorkerGpuSample
from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.accounting import account
from policy.statuses import Actor, JobStatus, PodStatus
from quotas.models import Role
from tests.conftest import make_node, make_user
from tests.web.conftest import Tree, borrow, submit


def place_on(job: Job, node, indices: list[int]) -> Pod:
    transition(job, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
    pod = Pod.objects.create(
        job=job,
        attempt=job.attempt,
        rank=0,
        node=node,
        gpu_indices=indices,
        gpus=len(indices),
        cpus=job.cpus_per_worker,
        memory_gb=job.memory_gb_per_worker,
        charged_quota=job.quota,
        status=PodStatus.RUNNING,
    )
    transition(job, JobStatus.RUNNING, reason="all workers running", actor=Actor.AGENT)
    return pod


@pytest.fixture
def busy(researcher, outsider, workspace, other_workspace, quota, other_quota, node):
    """team-a (16): alice runs 2 GPUs in quota and waits for 8 more; team-b (8): mallory's
    idle job borrows 4 of team-a's GPUs (Not in Quota), and a team-b job waits."""
    mine = submit(researcher, workspace, quota, name="mine", gpus_per_worker=2)
    place_on(mine, node, [0, 1])
    borrower = submit(
        outsider,
        other_workspace,
        other_quota,
        name="mallorys-sweep",
        gpus_per_worker=4,
        idle_resources="Only Idle Resources",
    )
    borrow(borrower, node, quota, [2, 3, 4, 5])
    waiting = submit(researcher, workspace, quota, name="too-big", gpus_per_worker=8)
    theirs = submit(outsider, other_workspace, other_quota, name="theirs", gpus_per_worker=8)
    run_cycle()  # the scheduler words the waiting jobs' reasons and positions
    return {"mine": mine, "borrower": borrower, "waiting": waiting, "theirs": theirs}


PAGES = ["home", "quotas"]


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_is_sent_to_login(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", PAGES)
def test_pages_are_read_only(member_client, name):
    assert member_client.post(reverse(name)).status_code == 405


def test_dashboard_numbers_equal_the_schedulers_accounting(member_client, busy, quota, node):
    html = member_client.get(reverse("home")).text
    tree = Tree(html)
    acc = account(load_snapshot()[0])
    usage = acc.quotas[quota.pk]
    (card,) = tree.find(data_quota="team-a")
    shown = tree.values(card)
    assert shown == {
        "size": str(usage.size),
        "used": str(usage.used),
        "in_quota": str(usage.in_quota),
        "idle_own": str(usage.idle_own),
        "lent": str(usage.lent),
        "free": str(usage.free),
        "borrowed": str(usage.borrowed),
        "waiting": str(usage.waiting),
    }
    # …and those are the right numbers: 2 in quota, 4 lent to team-b, 10 free, 1 waiting.
    assert shown == {
        "size": "16",
        "used": "6",
        "in_quota": "2",
        "idle_own": "0",
        "lent": "4",
        "free": "10",
        "borrowed": "0",
        "waiting": "1",
    }
    # The researcher's dashboard shows their workspaces' quotas only.
    assert not tree.find(data_quota="team-b")
    (pool,) = tree.find(data_pool="Lingjun/H200")
    expected = acc.pool(("Lingjun", "H200"))
    assert tree.values(pool) == {
        "in_use": str(expected.in_use),
        "free": str(expected.free),
        "unavailable": str(expected.unavailable),
        "total": str(expected.total),
    }
    assert (expected.in_use, expected.free, expected.total) == (6, 2, 8)
    counts = {e.attrs["data-status"]: e.text for e in tree.elements if "data-status" in e.attrs}
    assert counts == {"Pending": "0", "Inqueue": "1", "Starting": "0", "Running": "1"}


def test_dashboard_lists_recent_failures_and_idle_gpus(
    member_client, researcher, workspace, quota, node
):
    failed = submit(researcher, workspace, quota, name="crashy")
    pod = place_on(failed, node, [0])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED, exit_code=1)
    transition(failed, JobStatus.FAILED, reason="worker 0 exited 1, ValueError", actor=Actor.AGENT)
    idle = submit(researcher, workspace, quota, name="sleepy", gpus_per_worker=2)
    idle_pod = place_on(idle, node, [1, 2])
    busy_job = submit(researcher, workspace, quota, name="busy")
    busy_pod = place_on(busy_job, node, [3])
    now = timezone.now()
    Pod.objects.update(started_at=now - timezone.timedelta(minutes=11))
    for minutes in (1, 3, 5):
        at = now - timezone.timedelta(minutes=minutes)
        WorkerGpuSample.objects.create(
            pod=idle_pod, at=at, gpus=2, utilization=0, memory_used_mb=100
        )
        WorkerGpuSample.objects.create(
            pod=busy_pod, at=at, gpus=1, utilization=93, memory_used_mb=9000
        )
    html = member_client.get(reverse("home")).text

    def section(name: str) -> str:
        part = html[html.index(f'data-section="{name}"') :]
        return part[: part.index("</ul>")]

    assert "crashy" in section("trouble") and "worker 0 exited 1, ValueError" in section("trouble")
    idle_part = section("idle")
    assert "sleepy" in idle_part and "2 GPUs" in idle_part and "peak 0%" in idle_part
    assert "busy" not in idle_part


def test_a_worker_that_started_42_seconds_ago_is_not_idle_for_10_minutes(
    member_client, researcher, workspace, quota, node
):
    fresh = submit(researcher, workspace, quota, name="warming-up", gpus_per_worker=2)
    pod = place_on(fresh, node, [1, 2])
    now = timezone.now()
    Pod.objects.filter(pk=pod.pk).update(started_at=now - timezone.timedelta(seconds=42))
    for seconds in (40, 10):
        WorkerGpuSample.objects.create(
            pod=pod, at=now - timezone.timedelta(seconds=seconds), gpus=2, utilization=0,
            memory_used_mb=100,
        )  # fmt: skip
    html = member_client.get(reverse("home")).text
    part = html[html.index('data-section="idle"') :]
    assert "warming-up" not in part[: part.index("</ul>")]


def test_quotas_page_for_a_researcher(member_client, busy, quota, other_quota):
    tree = Tree(member_client.get(reverse("quotas")).text)
    assert tree.find(data_quota="team-a") and not tree.find(data_quota="team-b")
    acc = account(load_snapshot()[0])
    (row,) = tree.find(data_quota="team-a")
    assert tree.values(row)["lent"] == str(acc.quotas[quota.pk].lent) == "4"
    # Who borrows from whom: mallory's job is of another workspace, so shown by number only.
    (borrow_row,) = tree.find(data_job=str(busy["borrower"].pk))
    html = member_client.get(reverse("quotas")).text
    assert "mallorys-sweep" not in html and "(another workspace)" in html
    assert tree.values(borrow_row) == {"gpus": "4"}
    # The queue of team-a, with its position, reason and expected start.
    (queued,) = tree.find(data_job=str(busy["waiting"].pk))
    busy["waiting"].refresh_from_db()
    assert tree.values(queued)["position"] == str(busy["waiting"].queue_position) == "1"
    assert busy["waiting"].status_reason in html
    # 2 + 8 GPUs in quota would fit the guarantee (16), but no node has 8 free: starved.
    assert acc.quotas[quota.pk].starved and "1</strong> starved quota" in html


def test_quotas_page_for_a_quota_owner_shows_the_whole_tenant(
    busy, tenant, other_workspace, quota, other_quota, client
):
    owner = make_user("olga", other_workspace, role=Role.QUOTA_OWNER)
    client.force_login(owner)
    html = client.get(reverse("quotas")).text
    tree = Tree(html)
    assert tree.find(data_quota="team-a") and tree.find(data_quota="team-b")
    # The owner sees who borrows (their tenant's jobs by name) and both queues.
    assert "mallorys-sweep" in html and "mallory" in html
    assert tree.find(data_queue="team-a") and tree.find(data_queue="team-b")
    (pooled,) = tree.find(data_pool="acme/H200")
    assert tree.values(pooled)["unused"] == str(16 - 6 + 8)


def test_quotas_of_another_tenant_stay_hidden_from_an_owner(busy, client, db):
    from quotas.models import Quota, ResourceType, Tenant, Workspace

    other = Tenant.objects.create(name="globex")
    ws = Workspace.objects.create(tenant=other, name="lab")
    Quota.objects.create(
        tenant=other,
        name="globex-h200",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=8,
    )
    owner = make_user("gus", ws, role=Role.QUOTA_OWNER)
    client.force_login(owner)
    html = client.get(reverse("quotas")).text
    assert "globex-h200" in html and "team-a" not in html and "team-b" not in html


def test_a_second_node_changes_the_pool_numbers_the_same_way(member_client, busy):
    make_node("node-1", gpus=8)
    tree = Tree(member_client.get(reverse("home")).text)
    (pool,) = tree.find(data_pool="Lingjun/H200")
    assert tree.values(pool) == {"in_use": "6", "free": "10", "unavailable": "0", "total": "16"}


def test_the_quotas_page_says_reclaim_ignores_the_preemption_setting(member_client, busy):
    html = member_client.get(reverse("quotas")).text
    assert 'data-note="reclaim"' in html and "only about priority" in html


def test_the_preemption_setting_says_it_is_about_priority_inside_the_quota():
    from quotas.models import Quota

    field = Quota._meta.get_field("preemption")
    assert "inside the quota" in str(field.verbose_name)
    assert "always reclaimed" in str(field.help_text)
