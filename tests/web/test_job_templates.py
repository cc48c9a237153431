"""Job templates on the pages (docs/templates.md): "Save as template" on a job's page, the
create page's picker pre-filling the form from one; outsiders see neither."""

import pytest
from django.urls import reverse

from jobs.models import JobTemplate
from jobs.templates import fields_from_job
from tests.web.conftest import Tree

pytestmark = pytest.mark.django_db


def test_save_a_job_as_a_template_then_start_a_new_one_from_it(
    member_client, colleague_client, job
):
    page = member_client.get(reverse("web:detail", args=[job.pk])).text
    (form,) = Tree(page).find(action=reverse("web:save-template", args=[job.pk]))
    assert "Save as template" in page and form.attrs["method"] == "post"
    saved = member_client.post(form.attrs["action"], {"template_name": "ddp-8gpu"})
    assert saved.status_code == 302
    template = JobTemplate.objects.get()
    assert (template.name, template.workspace_id) == ("ddp-8gpu", job.workspace_id)
    assert template.fields == fields_from_job(job)
    again = member_client.post(form.attrs["action"], {"template_name": "ddp-8gpu"}, follow=True)
    assert "already has a template" in again.text and JobTemplate.objects.count() == 1

    # A colleague of the workspace picks it on the create page: the form is pre-filled.
    create = reverse("web:create")
    blank = colleague_client.get(create).text
    (picker,) = Tree(blank).find(name="template")
    (option,) = [
        e for e in Tree(blank).find(value=str(template.pk)) if e.parent.attrs == picker.attrs
    ]
    assert option.text.strip() == "ddp-8gpu (vision)"
    response = colleague_client.get(f"{create}?template={template.pk}")
    form = response.context["form"]
    shown = {name: form[name].value() for name in ("quota", "image", "command", "workers")}
    assert shown == {
        "quota": str(job.quota_id),
        "image": job.image,
        "command": job.command,
        "workers": job.workers,
    }
    assert form["workspace"].value() == str(job.workspace_id)


def test_outsiders_neither_save_nor_pick(outsider_client, job, researcher):
    url = reverse("web:save-template", args=[job.pk])
    assert outsider_client.post(url, {"template_name": "x"}).status_code == 404
    template = JobTemplate.objects.create(
        workspace=job.workspace, name="mine", fields=fields_from_job(job), created_by=researcher
    )
    create = reverse("web:create")
    assert outsider_client.get(f"{create}?template={template.pk}").status_code == 404
    assert not Tree(outsider_client.get(create).text).find(name="template")
