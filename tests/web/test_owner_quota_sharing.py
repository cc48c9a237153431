# ruff: noqa: F811  (the fixtures imported from test_owner_quotas are parameters here)
"""The sharing options on the owners' quota pages (docs/scheduling.md, the decision table):
shown with the quota's values, previewed with the what-if before they are saved, saved
through quotas.actions; a member may not change them (the pages' access rules)."""

from django.urls import reverse

from jobs.models import Job
from policy.statuses import JobStatus
from quotas import actions
from quotas.models import Quota
from tests.web.conftest import submit
from tests.web.test_owner_quotas import (  # noqa: F401  (fixtures)
    _reclaim_at_once,
    effect_jobs,
    form_of,
    lent,
    owner,
    owner_client,
    stranger_client,
    token_of,
)


def test_the_form_shows_the_sharing_options_with_their_values(owner_client, quota):
    actions.update_quota(quota, reclaim_within_tree="LowerPriority")
    page = owner_client.get(reverse("owner-quota-edit", args=[quota.pk]))
    assert page.status_code == 200
    assert 'name="reclaim_within_tree"' in page.text
    assert '<option value="LowerPriority" selected>' in page.text
    assert (
        'name="preemption"' in page.text and 'name="borrow_within_tree_max_priority"' in page.text
    )


def test_reclaim_never_is_previewed_then_saved(
    owner_client, researcher, workspace, quota, other_quota, lent
):
    actions.update_quota(quota, gpus=6)  # 4 in quota + 2 lent: full
    waiting = submit(researcher, workspace, quota, name="next", workers=1, gpus_per_worker=2)
    actions.update_quota(quota, gpus=4)  # shrunk below what runs, by someone before
    actions.update_quota(other_quota, gpus=0)  # the borrower cannot be moved
    edit = reverse("owner-quota-edit", args=[quota.pk])
    grow = owner_client.post(edit, form_of(Quota.objects.get(pk=quota.pk), gpus=6))
    assert effect_jobs(grow, "reclaimed") == {lent["guest"].pk}  # today's rule: Any
    form = form_of(Quota.objects.get(pk=quota.pk), gpus=6, reclaim_within_tree="Never")
    page = owner_client.post(edit, form)
    assert effect_jobs(page, "reclaimed") == set(), page.text
    assert Quota.objects.get(pk=quota.pk).reclaim_within_tree == "Any"  # nothing saved yet
    saved = owner_client.post(edit, form | {"confirm": "1", "token": token_of(page)})
    assert saved.status_code == 302
    assert Quota.objects.get(pk=quota.pk).reclaim_within_tree == "Never"
    assert Job.objects.get(pk=lent["guest"].pk).status == JobStatus.RUNNING
    assert Job.objects.get(pk=waiting.pk).status != JobStatus.STARTING


def test_a_form_without_the_options_keeps_them(owner_client, quota):
    actions.update_quota(quota, preemption="LowerOrNewerEqualPriority", reclaim_within_tree="Never")
    edit = reverse("owner-quota-edit", args=[quota.pk])
    page = owner_client.post(edit, form_of(Quota.objects.get(pk=quota.pk), gpus=17))
    owner_client.post(edit, form_of(quota, gpus=17) | {"confirm": "1", "token": token_of(page)})
    saved = Quota.objects.get(pk=quota.pk)
    assert saved.gpus == 17
    assert (saved.preemption, saved.reclaim_within_tree) == ("LowerOrNewerEqualPriority", "Never")


def test_a_member_or_outsider_cannot_change_them(member_client, stranger_client, quota):
    edit = reverse("owner-quota-edit", args=[quota.pk])
    form = form_of(quota, reclaim_within_tree="Never")
    assert member_client.post(edit, form).status_code == 403
    assert stranger_client.post(edit, form).status_code == 404
    assert Quota.objects.get(pk=quota.pk).reclaim_within_tree == "Any"
