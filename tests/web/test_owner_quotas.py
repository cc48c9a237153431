"""The owner pages of the quota tree (docs/quota-tree.md "Owner pages"): who sees and changes
what, field errors from the quota actions, the what-if preview before a save, the confirm
(audited, followed by a scheduling cycle), stale previews, HTMX partials, query counts."""

import re

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from jobs.models import Job
from policy.statuses import IdleResources, JobStatus
from quotas import actions
from quotas.models import Quota, ResourceType, Role, Tenant, Workspace
from tests.conftest import make_node, make_user
from tests.web.conftest import HTMX, Tree, borrow, place, submit

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    client = Client(REMOTE_ADDR="203.0.113.7")
    client.force_login(user)
    return client


@pytest.fixture
def owner(workspace):
    return make_user("olga", workspace, role=Role.QUOTA_OWNER, email="olga@example.org")


@pytest.fixture
def owner_client(owner) -> Client:
    return login(owner)


@pytest.fixture
def stranger_client(db) -> Client:
    """A quota owner of another tenant: an outsider here."""
    globex = Tenant.objects.create(name="globex")
    lab = Workspace.objects.create(tenant=globex, name="lab")
    return login(make_user("eve", lab, role=Role.ADMIN))


@pytest.fixture(autouse=True)
def _reclaim_at_once(settings):
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0


def form_of(quota: Quota, **changes) -> dict:
    values = {
        "name": quota.name,
        "gpus": quota.gpus,
        "parent": quota.parent_id or "",
        "max_gpus": "" if quota.max_gpus is None else quota.max_gpus,
        "lending_limit": "" if quota.lending_limit is None else quota.lending_limit,
        "weight": quota.weight,
    }
    return values | changes


def token_of(response) -> str:
    match = re.search(r'name="token" value="([0-9a-f]+)"', response.text)
    assert match, response.text[:3000]
    return match.group(1)


def effect_jobs(response, kind: str) -> set[int]:
    tree = Tree(response.text)
    (section,) = tree.find(data_effect=kind) or [None]
    if section is None:
        return set()
    return {
        int(e.attrs["data-job"])
        for e in tree.elements
        if "data-job" in e.attrs and e.parent is section
    }


# -- access ---------------------------------------------------------------------------------


def urls(tenant, quota) -> dict[str, str]:
    return {
        "tree": reverse("owner-tree", args=[tenant.pk]),
        "new": reverse("owner-quota-new", args=[tenant.pk]) + f"?parent={quota.pk}",
        "edit": reverse("owner-quota-edit", args=[quota.pk]),
        "delete": reverse("owner-quota-delete", args=[quota.pk]),
    }


def test_owner_member_outsider_and_anonymous_on_every_quota_view(
    owner_client, member_client, stranger_client, tenant, quota
):
    for name, url in urls(tenant, quota).items():
        assert owner_client.get(url).status_code == 200, name
        expected = 200 if name == "tree" else 403
        assert member_client.get(url).status_code == expected, name
        assert stranger_client.get(url).status_code == 404, name
        anonymous = Client().get(url)
        assert anonymous.status_code == 302 and "/login/" in anonymous["Location"], name
    for name in ("new", "edit", "delete"):
        url = urls(tenant, quota)[name]
        assert member_client.post(url, form_of(quota)).status_code == 403, name
        assert stranger_client.post(url, form_of(quota)).status_code == 404, name
    assert owner_client.post(urls(tenant, quota)["tree"]).status_code == 405
    assert owner_client.get(reverse("owner-quota-edit", args=[2**62])).status_code == 404
    assert owner_client.get(reverse("owner-tree", args=[2**62])).status_code == 404


def test_staff_change_every_tenant(tenant, quota):
    staff = make_user("sam", is_staff=True)
    assert login(staff).get(urls(tenant, quota)["edit"]).status_code == 200


def test_the_tree_shows_settings_and_live_use_read_only_for_researchers(
    owner_client, member_client, researcher, workspace, tenant, quota, node
):
    child = actions.create_quota(
        tenant=tenant,
        name="team-a-nlp",
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=4,
        parent=quota,
        max_gpus=6,
        lending_limit=2,
        weight=2.5,
    )
    workspace.quotas.add(child)
    place(submit(researcher, workspace, quota, workers=1, gpus_per_worker=4), node)
    submit(researcher, workspace, quota, name="later", workers=1, gpus_per_worker=8)

    page = owner_client.get(urls(tenant, quota)["tree"])
    tree = Tree(page.text)
    (root,) = tree.find(data_tree_quota="team-a")
    assert (
        tree.values(root).items()
        >= {
            "size": "16",
            "own": "12",
            "in_quota": "4",
            "waiting": "1",
            "lending_limit": "all",
        }.items()
    )
    (kid,) = tree.find(data_tree_quota="team-a-nlp")
    assert (
        tree.values(kid).items() >= {"max_gpus": "6", "lending_limit": "2", "weight": "2.5"}.items()
    )
    assert 'class="usage-bar"' in page.text
    assert "edit</a>" in page.text and "add child</a>" in page.text

    readonly = member_client.get(urls(tenant, quota)["tree"]).text
    assert "Read-only" in readonly and "edit</a>" not in readonly


def test_the_tree_page_query_count_is_constant_in_the_data_size(
    owner_client, researcher, workspace, tenant, quota
):
    url = urls(tenant, quota)["tree"]

    def grow(n: int) -> None:
        for i in range(n):
            node = make_node(f"grow-{Quota.objects.count()}-{i}")
            q = actions.create_quota(
                tenant=tenant,
                name=f"kid-{Quota.objects.count()}",
                resource_type=quota.resource_type,
                gpu_type=quota.gpu_type,
                gpus=1,
                parent=quota,
            )
            ws = Workspace.objects.create(tenant=tenant, name=f"ws-{q.pk}")
            ws.quotas.add(q)
            make_user(f"user-{q.pk}", ws)
            place(submit(researcher, workspace, quota, workers=1, gpus_per_worker=1), node)
            submit(researcher, workspace, quota, workers=1, gpus_per_worker=8)

    grow(1)
    with CaptureQueriesContext(connection) as small:
        assert owner_client.get(url).status_code == 200
    grow(8)
    with CaptureQueriesContext(connection) as large:
        page = owner_client.get(url)
    assert page.text.count("data-tree-quota=") == 10
    assert len(large.captured_queries) == len(small.captured_queries), [
        q["sql"][:120] for q in large.captured_queries
    ]


# -- field errors ---------------------------------------------------------------------------


def test_field_errors_come_from_the_quota_actions_and_nothing_is_saved(owner_client, tenant, quota):
    child = actions.create_quota(
        tenant=tenant,
        name="kid",
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=10,
        parent=quota,
    )
    edit = reverse("owner-quota-edit", args=[quota.pk])
    shrink = owner_client.post(edit, form_of(quota, gpus=8))
    assert shrink.status_code == 200
    assert "carve out 10" in shrink.text and 'id="id_gpus_error"' in shrink.text
    limit = owner_client.post(edit, form_of(quota, max_gpus=4))
    assert 'id="id_max_gpus_error"' in limit.text
    weight = owner_client.post(edit, form_of(quota, weight=0))
    assert 'id="id_weight_error"' in weight.text
    cycle = owner_client.post(edit, form_of(quota, parent=child.pk))
    assert 'id="id_parent_error"' in cycle.text
    grow = owner_client.post(reverse("owner-quota-edit", args=[child.pk]), form_of(child, gpus=17))
    assert "carve out 17" in grow.text
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    assert not AuditEntry.objects.filter(action="quota.change").exists()


# -- preview and confirm --------------------------------------------------------------------


@pytest.fixture
def lent(tenant, workspace, other_workspace, researcher, quota, other_quota):
    """team-a (16) runs a 4-GPU job in quota and lends 2 GPUs to an idle job of team-b."""
    node = make_node("node-x", gpus=8)
    mine = submit(researcher, workspace, quota, name="mine", workers=1, gpus_per_worker=4)
    place(mine, node)
    speech = make_user("sue", other_workspace)
    guest = submit(
        speech,
        other_workspace,
        other_quota,
        name="guest",
        workers=1,
        gpus_per_worker=2,
        idle_resources=IdleResources.ONLY,
    )
    borrow(guest, node, quota, [4, 5])
    return {"mine": mine, "guest": guest, "node": node}


def test_shrinking_below_what_runs_shows_the_jobs_above_the_new_guarantee(
    owner_client, quota, lent
):
    edit = reverse("owner-quota-edit", args=[quota.pk])
    page = owner_client.post(edit, form_of(quota, gpus=2))
    assert page.status_code == 200
    assert 'data-section="preview"' in page.text
    assert effect_jobs(page, "over-jobs") == {lent["mine"].pk, lent["guest"].pk}
    assert "6 GPUs are charged to team-a" in page.text
    # The borrower is listed first: it goes back before in-quota work.
    assert page.text.index(f"#{lent['guest'].pk} guest") < page.text.index(
        f"#{lent['mine'].pk} mine"
    )
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    assert not AuditEntry.objects.filter(object_type="quota").exists()


def test_a_resize_that_lets_a_lender_reclaim_shows_the_moved_or_reclaimed_job(
    owner_client, researcher, workspace, quota, other_quota, lent
):
    actions.update_quota(quota, gpus=6)  # 4 in quota + 2 lent: full
    waiting = submit(researcher, workspace, quota, name="next", workers=1, gpus_per_worker=2)
    actions.update_quota(quota, gpus=4)  # shrunk below what runs, by someone before
    edit = reverse("owner-quota-edit", args=[quota.pk])
    form = form_of(Quota.objects.get(pk=quota.pk), gpus=6)
    # team-b has room for its own idle job: it is moved there, nothing restarts.
    moved = owner_client.post(edit, form)
    assert effect_jobs(moved, "moved") == {lent["guest"].pk}
    assert effect_jobs(moved, "started") == {waiting.pk}
    assert effect_jobs(moved, "reclaimed") == set()
    # Without that room, the next cycle would reclaim it.
    actions.update_quota(other_quota, gpus=0)
    page = owner_client.post(edit, form)
    assert effect_jobs(page, "reclaimed") == {lent["guest"].pk}, page.text
    assert f"reclaimed by team-a for job {waiting.name}" in page.text
    assert Job.objects.get(pk=lent["guest"].pk).status == JobStatus.RUNNING


def test_confirm_saves_audits_and_runs_a_cycle(
    owner, owner_client, researcher, workspace, quota, django_capture_on_commit_callbacks
):
    node = make_node("node-y", gpus=8)
    place(submit(researcher, workspace, quota, name="big", workers=1, gpus_per_worker=4), node)
    actions.update_quota(quota, gpus=4)
    waiting = submit(researcher, workspace, quota, name="small", workers=1, gpus_per_worker=2)
    actions.update_quota(quota, gpus=4)
    AuditEntry.objects.all().delete()
    edit = reverse("owner-quota-edit", args=[quota.pk])
    form = form_of(Quota.objects.get(pk=quota.pk), gpus=6)

    page = owner_client.post(edit, form)
    assert effect_jobs(page, "started") == {waiting.pk}
    assert Quota.objects.get(pk=quota.pk).gpus == 4  # the preview saves nothing

    with django_capture_on_commit_callbacks(execute=True):
        saved = owner_client.post(edit, form | {"confirm": "1", "token": token_of(page)})
    assert saved.status_code == 302 and saved["Location"] == reverse(
        "owner-tree", args=[quota.tenant_id]
    )
    assert Quota.objects.get(pk=quota.pk).gpus == 6
    (entry,) = AuditEntry.objects.filter(object_type="quota")
    assert entry.action == "quota.change" and entry.actor == owner
    assert entry.detail["changes"] == {"gpus": [4, 6]}
    assert entry.via == "web" and entry.source_address == "203.0.113.7"
    # The scheduling cycle the change asked for started the waiting job.
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.STARTING


def test_a_stale_preview_is_shown_again_and_nothing_is_saved(
    owner_client, researcher, workspace, quota, lent
):
    edit = reverse("owner-quota-edit", args=[quota.pk])
    form = form_of(quota, gpus=12)
    token = token_of(owner_client.post(edit, form))
    place(
        submit(researcher, workspace, quota, name="new", workers=1, gpus_per_worker=1), lent["node"]
    )
    again = owner_client.post(edit, form | {"confirm": "1", "token": token})
    assert again.status_code == 200 and 'data-stale="1"' in again.text
    assert token_of(again) != token
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    assert not AuditEntry.objects.filter(action="quota.change").exists()


def test_back_shows_the_form_with_the_values(owner_client, quota):
    edit = reverse("owner-quota-edit", args=[quota.pk])
    page = owner_client.post(edit, form_of(quota, gpus=12, back="1"))
    assert 'name="gpus" value="12"' in page.text and "Preview the change" in page.text


def test_htmx_swaps_the_panel_and_redirects_on_confirm(owner_client, quota):
    edit = reverse("owner-quota-edit", args=[quota.pk])
    form = form_of(quota, weight=3)
    page = owner_client.post(edit, form, **HTMX)
    assert page.status_code == 200
    assert page.text.lstrip().startswith('<div id="quota-panel"') and "<html" not in page.text
    errors = owner_client.post(edit, form_of(quota, weight=-1), **HTMX)
    assert errors.text.lstrip().startswith('<div id="quota-panel"')
    assert 'id="id_weight_error"' in errors.text
    saved = owner_client.post(edit, form | {"confirm": "1", "token": token_of(page)}, **HTMX)
    assert saved.status_code == 200 and saved["HX-Redirect"] == reverse(
        "owner-tree", args=[quota.tenant_id]
    )
    assert Quota.objects.get(pk=quota.pk).weight == 3


def test_an_owner_creates_a_child_quota_with_a_preview(owner, owner_client, tenant, quota):
    url = reverse("owner-quota-new", args=[tenant.pk])
    form = {"name": "team-a-vision", "gpus": 6, "parent": quota.pk, "weight": 1}
    page = owner_client.post(url, form)
    assert "team-a: 16 → <strong>10</strong>" in page.text
    assert not Quota.objects.filter(name="team-a-vision").exists()
    saved = owner_client.post(url, form | {"confirm": "1", "token": token_of(page)})
    assert saved.status_code == 302
    child = Quota.objects.get(name="team-a-vision")
    assert (child.parent, child.gpus, child.resource_type) == (quota, 6, ResourceType.LINGJUN)
    assert AuditEntry.objects.get(action="quota.add").actor == owner
    missing = owner_client.post(url, {"name": "x", "gpus": 1, "weight": 1})
    assert 'id="id_parent_error"' in missing.text


def test_only_an_empty_quota_is_deleted_after_its_preview(
    owner, owner_client, researcher, workspace, tenant, quota
):
    child = actions.create_quota(
        tenant=tenant,
        name="kid",
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=4,
        parent=quota,
    )
    parent_page = owner_client.get(reverse("owner-quota-delete", args=[quota.pk]))
    assert 'data-blocked="1"' in parent_page.text and "kid" in parent_page.text
    url = reverse("owner-quota-delete", args=[child.pk])
    page = owner_client.get(url)
    assert "team-a: 12 → <strong>16</strong>" in page.text
    assert owner_client.post(url, {"token": "stale"}).status_code == 200
    assert Quota.objects.filter(pk=child.pk).exists()
    gone = owner_client.post(url, {"confirm": "1", "token": token_of(page)})
    assert gone.status_code == 302 and not Quota.objects.filter(pk=child.pk).exists()
    assert AuditEntry.objects.get(action="quota.delete").actor == owner
    submit(researcher, workspace, quota)
    used = actions.create_quota(
        tenant=tenant, name="used", resource_type="Lingjun", gpu_type="H200", gpus=0
    )
    workspace.quotas.add(used)
    submit(researcher, workspace, used, idle_resources=IdleResources.ONLY)
    blocked = owner_client.get(reverse("owner-quota-delete", args=[used.pk]))
    assert 'data-blocked="1"' in blocked.text and "Jobs were submitted" in blocked.text


def test_a_second_preview_of_the_same_state_reuses_the_unchanged_plan(quota, lent):
    from jobs.actions import quota_changes
    from jobs.forecast import current_snapshot
    from policy.quota_preview import QuotaEdit

    quota_changes._BASELINES.clear()
    with time_machine.travel(timezone.now().replace(second=5), tick=False):
        snapshot = current_snapshot()
        first = quota_changes.what_if(snapshot, QuotaEdit(quota.pk, {"gpus": 2}))
        second = quota_changes.what_if(snapshot, QuotaEdit(quota.pk, {"gpus": 12}))
        assert len(quota_changes._BASELINES) == 1
        assert first.over and not second.over
        quota_changes.what_if(current_snapshot(), QuotaEdit(quota.pk, {"gpus": 2}))
        assert len(quota_changes._BASELINES) == 1  # the same state read again: the same key
    mine = lent["mine"]
    more = submit(mine.owner, mine.workspace, quota, name="more", workers=1, gpus_per_worker=1)
    place(more, lent["node"])
    quota_changes.what_if(current_snapshot(), QuotaEdit(quota.pk, {"gpus": 2}))
    assert len(quota_changes._BASELINES) == 2  # a state that moved is planned again


def test_re_parent_a_quota_with_its_preview(owner, owner_client, tenant, quota, other_quota):
    kid = actions.create_quota(
        tenant=tenant,
        name="kid",
        resource_type=quota.resource_type,
        gpu_type=quota.gpu_type,
        gpus=4,
        parent=quota,
    )
    edit = reverse("owner-quota-edit", args=[kid.pk])
    form = form_of(kid, parent=other_quota.pk)
    page = owner_client.post(edit, form)
    own = page.text
    assert "team-a: 12 → <strong>16</strong>" in own and "team-b: 8 → <strong>4</strong>" in own
    assert Quota.objects.get(pk=kid.pk).parent == quota
    saved = owner_client.post(edit, form | {"confirm": "1", "token": token_of(page)})
    assert saved.status_code == 302 and Quota.objects.get(pk=kid.pk).parent == other_quota
    entry = AuditEntry.objects.get(action="quota.change")
    assert entry.detail["changes"] == {"parent": [quota.pk, other_quota.pk]}


def test_each_htmx_panel_brings_its_own_heading(owner_client, quota, tenant):
    """The panel HTMX swaps holds the page's heading: after a preview, a step back and a
    second preview with another name, the heading names what is shown now."""
    new = reverse("owner-quota-new", args=[tenant.pk]) + f"?parent={quota.pk}"
    child = {"name": "first-name", "gpus": 1, "parent": quota.pk, "weight": 1}

    def heading(response) -> str:
        return re.search(r"<h1>(.*?)</h1>", response.text).group(1)

    assert heading(owner_client.get(new, **HTMX)) == f"New child quota of {quota.name}"
    first = owner_client.post(new, child, **HTMX)
    assert heading(first) == "Preview: new quota first-name"
    back = owner_client.post(new, child | {"back": "1"}, **HTMX)
    assert heading(back) == f"New child quota of {quota.name}"
    second = owner_client.post(new, child | {"name": "second-name"}, **HTMX)
    assert heading(second) == "Preview: new quota second-name"
    edit = reverse("owner-quota-edit", args=[quota.pk])
    assert heading(owner_client.post(edit, form_of(quota, weight=2), **HTMX)) == (
        f"Preview: change to {quota.name}"
    )
    assert heading(owner_client.get(edit, **HTMX)) == f"Edit quota {quota.name}"
