"""A text longer than its limit is never cut by the create page: its inputs carry no
`maxlength` (a browser silently cuts a longer paste there), and the page shows the API's own
field error. A command's length is the one the API counts: the browser's CRLF line breaks
are read back as one character each. (The same through Chromium: tests/e2e.)"""

import json

import pytest
from django.urls import reverse

from jobs.models import Job
from protocol import limits
from tests.web.test_create_page import FORM

pytestmark = pytest.mark.django_db


def _page(client, quota, **changes):
    return client.post(reverse("web:create"), FORM | {"quota": str(quota.pk), **changes})


def _api(api, **changes):
    body = {"quota": "team-a", "image": "busybox", "command": "echo hi", **changes}
    return api.post(reverse("api:jobs"), json.dumps(body), content_type="application/json")


def test_no_input_of_the_page_has_a_maxlength(member_client, quota, node):
    html = member_client.get(reverse("web:create")).text
    assert 'name="command"' in html and 'name="name"' in html
    assert "maxlength" not in html.lower()


@pytest.mark.parametrize(
    ("field", "limit"),
    [("command", limits.COMMAND), ("name", limits.JOB_NAME), ("image", limits.IMAGE),
     ("checkpoint_dir", limits.CHECKPOINT_DIR)],
)  # fmt: skip
def test_one_character_too_many_is_the_apis_field_error(
    member_client, api, quota, node, field, limit
):
    value = "x" * (limit + 1)
    page = _page(member_client, quota, **{field: value})
    assert page.status_code == 200  # the form again, with the error; nothing cut, nothing made
    shown = page.context["form"].errors[field]
    error = _api(api, **{field: value}).json()["error"]
    assert error["field"] == field
    assert (
        shown
        == error["fields"][field]
        == [f"Ensure this value has at most {limit} characters (it has {limit + 1})."]
    )
    assert error["message"] in page.text
    assert Job.objects.count() == 0


def test_a_command_of_crlf_lines_counts_as_the_api_counts_it(member_client, api, quota, node):
    lines = ["x" * 99] * (limits.COMMAND // 100)
    typed = "\n".join(lines) + "\n"  # exactly the limit, as the user typed it
    assert len(typed) == limits.COMMAND
    response = _page(member_client, quota, command=typed.replace("\n", "\r\n"))
    assert response.status_code == 302, response.context["form"].errors
    assert Job.objects.get().command == typed.strip()
    assert _api(api, command=typed).status_code == 201
