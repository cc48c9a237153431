"""A researcher in a real browser (headless Chromium): log in, submit a job from the form,
and watch the detail page update itself through HTMX until the job is Completed (after one
Automatic Fault Tolerance restart, which the log viewer follows to the new attempt)."""

import pytest

from tests.e2e.conftest import RunningConsole

pytestmark = pytest.mark.e2e


def test_submit_from_form_and_watch_it_complete(browser, running_console: RunningConsole):
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{running_console.url}/login/")
    page.fill("input[name=username]", running_console.creds["researcher_username"])
    page.fill("input[name=password]", running_console.creds["researcher_password"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{running_console.url}/")  # the dashboard

    page.goto(f"{running_console.url}/jobs/new/")
    page.fill("input[name=name]", "browser-job")
    quota = page.locator("select[name=quota] option", has_text="vision-h200 (Lingjun, H200)")
    page.select_option("select[name=quota]", value=quota.get_attribute("value"))
    page.fill("input[name=image]", "busybox:latest")
    # Several lines: the browser submits them with CRLF, which must run as a shell script.
    # The first attempt fails; fault tolerance runs it again as attempt 2, which succeeds.
    page.fill(
        "textarea[name=command]",
        "sleep 2\nfor i in 1 2 3; do\n  echo browser-line-$i\ndone\nif true; then echo ok; fi\n"
        'if [ "$ATTEMPT" = 1 ]; then exit 3; fi\necho attempt-$ATTEMPT-done',
    )
    page.fill("input[name=gpus_per_worker]", "1")
    page.fill("input[name=cpus_per_worker]", "1")
    page.fill("input[name=memory_gb_per_worker]", "1")
    page.check("input[name=fault_tolerance]")
    page.select_option("select[name=restart_policy]", value="OnFailure")
    page.click("button[type=submit]")
    page.wait_for_url("**/jobs/*/")

    # No reload: the status badge and the log panel update through HTMX polling, and the
    # log viewer, opened on attempt 1, moves on to attempt 2 once attempt 1 has ended.
    page.locator("#job-live .status-line .badge", has_text="Completed").wait_for()
    page.locator("text=attempt-2-done").wait_for()
    logs = page.locator("#logs").inner_text()
    assert (
        logs.index("browser-line-1") < logs.index("browser-line-2") < logs.index("browser-line-3")
    )
    assert logs.index("browser-line-3") < logs.index("attempt 2") < logs.index("attempt-2-done")
    assert page.locator("#log-lines .log-attempt").inner_text() == "attempt 2"
    page.screenshot(path=str(running_console.var_dir / "job-detail.png"), full_page=True)


def test_api_docs_render_from_local_files_only(browser, running_console: RunningConsole):
    """Swagger UI draws the API's operations with every asset from the console itself
    (no CDN, no validator badge): requests elsewhere are refused and must not happen."""
    page = browser.new_page()
    page.set_default_timeout(60_000)
    elsewhere: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith(running_console.url) or url.startswith("data:"):
            request_route.continue_()
        else:
            elsewhere.append(url)
            request_route.abort()

    page.route("**/*", route)
    page.goto(f"{running_console.url}/api/v1/docs")
    page.locator("text=GPU console API").first.wait_for()
    page.locator("text=Submit a job").first.wait_for()
    page.get_by_text("A worker's log lines after a cursor").first.wait_for()
    assert elsewhere == []
    page.screenshot(path=str(running_console.var_dir / "api-docs.png"), full_page=True)
