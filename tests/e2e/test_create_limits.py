"""A command one character over its limit, pasted into the create page in Chromium, is
neither cut nor submitted as a job: the page shows the API's own field error and keeps the
text; with the page's JavaScript on and off."""

import pytest

from protocol import limits
from tests.e2e.conftest import RunningConsole

pytestmark = pytest.mark.e2e

TOO_LONG = "x" * (limits.COMMAND + 1)
MESSAGE = (
    f"Ensure this value has at most {limits.COMMAND} characters (it has {limits.COMMAND + 1})."
)


def _jobs(console: RunningConsole) -> list[int]:
    response = console.api().get(f"{console.url}/api/v1/jobs?limit=200", timeout=60)
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()["jobs"]]


@pytest.mark.parametrize("javascript", [True, False], ids=["js-on", "js-off"])
def test_a_command_too_long_is_the_apis_field_error_never_cut(
    browser, running_console: RunningConsole, javascript
):
    console = running_console
    before = _jobs(console)
    context = browser.new_context(java_script_enabled=javascript)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{console.url}/login/")
    page.fill("input[name=username]", console.creds["researcher_username"])
    page.fill("input[name=password]", console.creds["researcher_password"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{console.url}/")

    page.goto(f"{console.url}/jobs/new/")
    quota = page.locator("select[name=quota] option", has_text="vision-h200 (Lingjun, H200)")
    page.select_option("select[name=quota]", value=quota.get_attribute("value"))
    page.fill("input[name=image]", "busybox")
    command = page.locator("textarea[name=command]")
    command.fill(TOO_LONG)  # typed into the field as a paste is: a maxlength would cut it
    assert len(command.input_value()) == len(TOO_LONG)
    # The answer is what is checked, not the page's subresources: "commit" (the response
    # arrived), then the locators below wait for their elements.
    with page.expect_navigation(wait_until="commit"):
        page.click("button[type=submit]")

    assert page.url.rstrip("/").endswith("/jobs/new")  # the form again, not a job's page
    assert page.locator("#id_command_error").inner_text().strip() == MESSAGE
    assert page.locator("textarea[name=command]").input_value() == TOO_LONG  # kept, not cut
    context.close()

    api = console.api().post(
        f"{console.url}/api/v1/jobs",
        json={"quota": "vision-h200", "image": "busybox", "command": TOO_LONG},
        timeout=60,
    )
    assert api.status_code == 400
    error = api.json()["error"]
    assert (error["field"], error["message"]) == ("command", MESSAGE)
    assert _jobs(console) == before  # nothing created
