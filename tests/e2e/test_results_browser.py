"""Counted results in a real browser (headless Chromium) against the real console
(`manage.py run_console` with its local agent, process runtime): a researcher submits the
partitioned example from the form with a work contract and reads the Result section once
it is Completed; a run that exits 0 after 5 of 8 partitions shows Failed, rejected, 2,500
of 4,000 items (docs/results.md)."""

import sys

import pytest

from tests.e2e.conftest import ROOT, RunningConsole, wait_for

pytestmark = pytest.mark.e2e
COMMAND = f"{sys.executable} {ROOT / 'examples' / 'partitioned.py'}"


def _login(browser, console: RunningConsole):
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{console.url}/login/")
    page.fill("input[name=username]", console.creds["researcher_username"])
    page.fill("input[name=password]", console.creds["researcher_password"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{console.url}/")
    return page


def _fill_create_form(page, console: RunningConsole, name: str) -> None:
    """The create page with the partitioned example on one GPU of vision-h200."""
    page.goto(f"{console.url}/jobs/new/")
    page.fill("input[name=name]", name)
    quota = page.locator("select[name=quota] option", has_text="vision-h200 (Lingjun, H200)")
    page.select_option("select[name=quota]", value=quota.get_attribute("value"))
    page.fill("input[name=image]", "python:3.12")
    page.fill("textarea[name=command]", COMMAND)
    page.fill("input[name=gpus_per_worker]", "1")
    page.fill("input[name=cpus_per_worker]", "1")
    page.fill("input[name=memory_gb_per_worker]", "1")


def test_the_result_of_a_contract_submitted_from_the_form(browser, running_console):
    page = _login(browser, running_console)
    _fill_create_form(page, running_console, "partitions")
    page.fill("input[name=result_unit]", "partition")
    page.fill("input[name=result_expected_units]", "p{1..8}")
    page.fill("input[name=result_expected_items]", "4000")
    page.click("button[type=submit]")
    page.wait_for_url("**/jobs/*/")
    page.locator("#job-live .status-line .badge", has_text="Completed").wait_for()
    page.reload()
    section = page.locator("section.result")
    assert section.get_attribute("data-result-state") == "accepted"
    text = section.inner_text()
    assert "result accepted (8/8 partitions, 4,000 items)" in text
    assert "8 of 8 partitions accepted · 4,000 of 4,000 items" in text
    assert page.locator("table.result-units tbody tr").count() == 8
    page.screenshot(path=str(running_console.var_dir / "result.png"), full_page=True)


def test_exit_0_after_five_partitions_shows_rejected(browser, running_console):
    api = running_console.api()
    body = {
        "quota": "vision-h200",
        "image": "python:3.12",
        "command": COMMAND,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "env": {"STOP_AFTER": "5"},
        "result_unit": "partition",
        "result_expected_units": "8",
        "result_expected_items": 4000,
    }
    created = api.post(f"{running_console.url}/api/v1/jobs", json=body, timeout=10)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    url = f"{running_console.url}/api/v1/jobs/{job_id}"
    job = wait_for(
        lambda: (j := api.get(url, timeout=5).json())["status"] in ("Completed", "Failed") and j,
        60,
    )
    assert job["status"] == "Failed" and job["result_state"] == "rejected"
    page = _login(browser, running_console)
    page.goto(f"{running_console.url}/jobs/{job_id}/")
    text = page.locator("section.result").inner_text()
    assert "exited 0 but result rejected: 5 of 8 partitions accepted; 2,500 of 4,000 items" in text
    assert "result_rejected" in text
    page.goto(f"{running_console.url}/jobs/")
    assert (
        "5 of 8 partitions accepted · 2,500 of 4,000 items"
        in page.locator("#job-rows").inner_text()
    )


def test_an_output_folder_inside_another_runs_is_refused_on_the_form(browser, running_console):
    """A declared output folder (docs/results.md, "An output folder of its own"): the first
    run's result lands there and is accepted; a second job naming a folder inside it is
    refused on the form with a field error naming the first, and nothing is created."""
    api = running_console.api()
    body = {
        "quota": "vision-h200",
        "image": "python:3.12",
        "command": COMMAND,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "result_unit": "partition",
        "result_expected_units": "p{1..8}",
        "result_output_dir": "campaign-b/results",
    }
    created = api.post(f"{running_console.url}/api/v1/jobs", json=body, timeout=10)
    assert created.status_code == 201, created.text
    first = created.json()["id"]
    url = f"{running_console.url}/api/v1/jobs/{first}"
    job = wait_for(
        lambda: (j := api.get(url, timeout=5).json())["status"] in ("Completed", "Failed") and j,
        60,
    )
    assert job["status"] == "Completed" and job["result_state"] == "accepted", job

    page = _login(browser, running_console)
    page.goto(f"{running_console.url}/jobs/{first}/")
    shown = page.locator("section.result [data-result-output-dir]").inner_text()
    assert "campaign-b/results" in shown
    _fill_create_form(page, running_console, "nested")
    page.fill("input[name=result_output_dir]", "campaign-b/results/more")
    with page.expect_navigation(wait_until="commit"):
        page.click("button[type=submit]")
    error = page.locator(".field.has-error", has=page.locator("input[name=result_output_dir]"))
    text = error.inner_text()
    assert f"inside campaign-b/results, which job #{first} uses for its result" in text
    newest = api.get(f"{running_console.url}/api/v1/jobs?limit=1", timeout=10).json()
    assert newest["jobs"][0]["id"] == first  # nothing was created
