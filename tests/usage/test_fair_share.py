"""Historical fair share end to end (SQLite and PostgreSQL): usage buckets → the roll-up's
decayed borrowing → the snapshot → the idle pass's order; and the Quotas page's section
(owner, member, outsider), in one query whatever the number of quotas."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.statuses import IdleResources
from quotas.models import Quota, QuotaDecayedUsage, Role, Tenant
from tests.conftest import make_node, make_user
from tests.usage.test_page import client_of
from tests.web.conftest import submit
from usage.actions.rollup import roll_up_usage
from usage.models import UsageBucket

pytestmark = pytest.mark.django_db
ONLY = IdleResources.ONLY


@pytest.fixture
def lender(tenant, workspace):
    q = Quota.objects.create(
        tenant=tenant, name="team-c", resource_type="Lingjun", gpu_type="H200", gpus=8
    )
    workspace.quotas.add(q)
    return q


@pytest.fixture
def borrowed_before(tenant, quota, other_quota, lender):
    """team-a and team-b guarantee nothing; team-a borrowed 8 GPUs for a day, three days
    ago (as the roll-up wrote it); one node of 8 GPUs."""
    Quota.objects.filter(pk__in=[quota.pk, other_quota.pk]).update(gpus=0)
    make_node()
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    UsageBucket.objects.bulk_create(
        UsageBucket(span=span, start=day, quota_id=q, borrowed_us=us, lent_us=lent)
        for span in ("d", "m")
        for q, us, lent in ((quota.pk, 8 * 86400 * 10**6, 0), (lender.pk, 0, 8 * 86400 * 10**6))
    )


@pytest.mark.parametrize("on", [True, False])
def test_the_quota_with_less_decayed_borrowing_borrows_first(
    on,
    tenant,
    borrowed_before,
    quota,
    other_quota,
    researcher,
    outsider,
    workspace,
    other_workspace,
):
    Tenant.objects.filter(pk=tenant.pk).update(
        historical_fair_share=on, fair_share_half_life_hours=24
    )
    roll_up_usage()
    first = submit(researcher, workspace, quota, name="a", gpus_per_worker=8, idle_resources=ONLY)
    later = submit(
        outsider, other_workspace, other_quota, name="b", gpus_per_worker=8, idle_resources=ONLY
    )
    snapshot, _ = load_snapshot()
    history = {q.name: q.history_gpus for q in snapshot.quotas}
    if on:
        # 8 GPUs over [3 days + t, 2 days + t] ago (t: the time since midnight), half-life a
        # day: 8 x ln2 x (2^-(2+t) - 2^-(3+t)) / ln2 = 2^-t GPUs on average.
        assert 0.5 <= history["team-a"] <= 1.0 and history["team-b"] == 0
        assert QuotaDecayedUsage.objects.count() == 3
    else:
        assert set(history.values()) == {0.0} and not QuotaDecayedUsage.objects.exists()
    assert run_cycle().admitted == ((later.id,) if on else (first.id,))


def test_the_quotas_page_shows_the_order_to_who_sees_the_quotas(
    tenant, borrowed_before, researcher, outsider, workspace
):
    Tenant.objects.filter(pk=tenant.pk).update(historical_fair_share=True)
    roll_up_usage()
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    with CaptureQueriesContext(connection) as seen:
        html = client_of(owner).get("/quotas/").content.decode()
    # Read twice whatever the number of quotas: with the snapshot's quotas, and the section's.
    assert sum("quotadecayedusage" in q["sql"] for q in seen.captured_queries) == 2
    assert 'data-section="fair-share"' in html
    rows = {p.split('"')[0]: p for p in html.split('data-fair-quota="')[1:]}
    assert set(rows) == {"team-a", "team-b", "team-c"}
    assert 'data-k="rank">3<' in rows["team-a"]  # it borrowed most: it borrows last
    member = client_of(researcher).get("/quotas/").content.decode()
    assert {p.split('"')[0] for p in member.split('data-fair-quota="')[1:]} == {"team-a", "team-c"}
    mine = client_of(outsider).get("/quotas/").content.decode()
    assert {p.split('"')[0] for p in mine.split('data-fair-quota="')[1:]} == {"team-b"}
    Quota.objects.bulk_create(
        Quota(tenant=tenant, name=f"more-{i}", resource_type="Lingjun", gpu_type="H200", gpus=0)
        for i in range(5)
    )
    roll_up_usage(timezone.now() + timedelta(minutes=1))
    with CaptureQueriesContext(connection) as again:
        assert html.count("data-fair-quota") + 5 == (
            client_of(owner).get("/quotas/").content.decode().count("data-fair-quota")
        )
    assert sum("quotadecayedusage" in q["sql"] for q in again.captured_queries) == 2
    Tenant.objects.filter(pk=tenant.pk).update(historical_fair_share=False)
    assert 'data-section="fair-share"' not in client_of(owner).get("/quotas/").content.decode()


def test_the_tenant_switch_is_validated_and_audited(tenant, django_capture_on_commit_callbacks):
    from audit.models import AuditEntry
    from quotas import actions

    with pytest.raises(actions.QuotaChangeRefused) as refused:
        actions.update_tenant(tenant, fair_share_half_life_hours=0)
    assert set(refused.value.errors) == {"fair_share_half_life_hours"}
    with django_capture_on_commit_callbacks(execute=True):
        actions.update_tenant(tenant, historical_fair_share=True, fair_share_half_life_hours=72)
    tenant.refresh_from_db()
    assert tenant.historical_fair_share and tenant.fair_share_half_life_hours == 72
    assert AuditEntry.objects.filter(action="tenant.change").count() == 1
