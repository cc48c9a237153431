"""24-hour UTC everywhere: the admin wrote "Dec. 1, 2026, 8:30 p.m."."""

from datetime import UTC, datetime

from django.template import Context, Template
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job


def test_a_datetime_renders_24_hour_utc(db):
    at = datetime(2026, 12, 1, 20, 30, tzinfo=UTC)
    assert Template("{{ at }}").render(Context({"at": at})) == "2026-12-01 20:30:00 UTC"


def test_the_admin_job_list_writes_24_hour_times(admin_client, researcher, workspace, quota):
    from tests.web.conftest import submit

    job = submit(researcher, workspace, quota)
    Job.objects.filter(pk=job.pk).update(created_at=datetime(2026, 12, 1, 20, 30, tzinfo=UTC))
    with timezone.override(UTC):
        html = admin_client.get(reverse("admin:jobs_job_changelist")).text
    assert "p.m." not in html and "a.m." not in html
    assert "2026-12-01 20:30" in html
