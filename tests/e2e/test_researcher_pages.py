"""What a new researcher tripped on, in a real browser against the real embedded console:
the 404 page, the charts' time axis (UTC, 24-hour; one sample), narrow windows."""

import re
import sys

import pytest
import requests

from tests.e2e.conftest import ROOT, RunningConsole

pytestmark = pytest.mark.e2e

ONE_STEP = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from agents.sdk import progress
progress(1, 10)
time.sleep(600)
"""


def signed_in(browser, console: RunningConsole, width: int = 1280, who: str = "researcher"):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(f"{console.url}/login/")
    page.fill("input[name=username]", console.creds[f"{who}_username"])
    page.fill("input[name=password]", console.creds[f"{who}_password"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{console.url}/")
    return page


def api_submit(console: RunningConsole, **fields) -> int:
    body = {"quota": "vision-h200", "image": "busybox", "gpus_per_worker": 0,
            "cpus_per_worker": 1, "memory_gb_per_worker": 1, **fields}  # fmt: skip
    response = requests.post(
        f"{console.url}/api/v1/jobs",
        json=body,
        headers={"Authorization": f"Bearer {console.creds['api_token']}"},
        timeout=60,
    )
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


def stop(console: RunningConsole, job_id: int) -> None:
    requests.post(
        f"{console.url}/api/v1/jobs/{job_id}/stop",
        headers={"Authorization": f"Bearer {console.creds['api_token']}"},
        timeout=60,
    )


def test_an_unknown_job_gets_the_consoles_404_page_not_djangos_debug_page(browser, running_console):
    page = signed_in(browser, running_console)
    response = page.goto(f"{running_console.url}/jobs/999999/")
    assert response.status == 404
    text = page.locator("body").inner_text()
    assert "Not found" in text and "Dashboard" in text  # the console's page, with its nav
    assert "URLconf" not in text and "DEBUG = True" not in text


def test_a_chart_with_one_sample_has_a_short_utc_24_hour_axis(browser, running_console, tmp_path):
    script = tmp_path / "one_step.py"
    script.write_text(ONE_STEP)
    job_id = api_submit(running_console, name="one-step", command=f"{sys.executable} {script}")
    try:
        page = signed_in(browser, running_console)
        page.goto(f"{running_console.url}/jobs/{job_id}/")
        holder = page.locator('[data-chart="progress"] .chart-plot')
        # The charts load once the step arrived (reload: a new page load draws them).
        for _ in range(60):
            if page.evaluate("el => !!el.uplot", holder.element_handle()):
                break
            page.wait_for_timeout(1000)
            page.reload()
            holder = page.locator('[data-chart="progress"] .chart-plot')
        span = page.evaluate(
            "el => el.uplot.scales.x.max - el.uplot.scales.x.min", holder.element_handle()
        )
        assert 0 < span <= 3600, span  # not "Jun 2027 … Jun 2029"
        ticks = page.evaluate(
            "el => [...el.querySelectorAll('.chart-ticks span')].map(s => s.textContent)",
            holder.element_handle(),
        )  # the time labels: elements under the plot (static/console.js)
        assert ticks and all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in ticks), ticks
    finally:
        stop(running_console, job_id)


def job_status(console: RunningConsole, job_id: int) -> dict:
    return requests.get(
        f"{console.url}/api/v1/jobs/{job_id}",
        headers={"Authorization": f"Bearer {console.creds['api_token']}"},
        timeout=60,
    ).json()


def test_stop_asks_for_a_confirmation_first(browser, running_console):
    job_id = api_submit(running_console, name="to-stop", command="sleep 600")
    try:
        page = signed_in(browser, running_console)
        page.goto(f"{running_console.url}/jobs/{job_id}/")
        questions = []

        def answer(dialog, accept):
            questions.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", lambda d: answer(d, False))
        page.click("button.danger:has-text('Stop')")
        page.wait_for_timeout(500)
        assert questions and f"Stop job #{job_id}?" in questions[0]
        assert job_status(running_console, job_id)["stop_requested_at"] is None  # said no
        page.once("dialog", lambda d: answer(d, True))
        page.click("button.danger:has-text('Stop')")
        page.wait_for_load_state()
        for _ in range(60):
            if job_status(running_console, job_id)["stop_requested_at"]:
                break
            page.wait_for_timeout(500)
        assert job_status(running_console, job_id)["stop_requested_at"] is not None
    finally:
        stop(running_console, job_id)


NAV_MEASURE = """() => {
    const links = [...document.querySelectorAll('.topbar nav a')];
    return {
        page: document.documentElement.scrollWidth - window.innerWidth,
        navLinkTops: links.map(a => Math.round(a.getBoundingClientRect().top)),
        wrappedLinks: links.filter(a => a.getClientRects().length > 1).map(a => a.textContent),
        topbarHeight: document.querySelector('.topbar').getBoundingClientRect().height,
    };
}"""


def _no_overflow(page) -> dict:
    return page.evaluate(NAV_MEASURE)


def test_at_800_px_the_nav_stays_one_row_and_the_job_table_scrolls(browser, running_console):
    page = signed_in(browser, running_console, width=1280, who="owner")  # with the Admin link
    page.goto(f"{running_console.url}/jobs/")
    wide = _no_overflow(page)["topbarHeight"]
    page.set_viewport_size({"width": 800, "height": 900})
    measured = _no_overflow(page)
    assert len(set(measured["navLinkTops"])) == 1, measured  # one row of links
    assert not measured["wrappedLinks"], measured
    assert abs(measured["topbarHeight"] - wide) < 2, (wide, measured)  # nothing wrapped
    assert measured["page"] <= 0, measured  # nothing cut off beyond the window
    reach = page.evaluate(
        """() => { const w = document.querySelector('.table-wrap');
                   w.scrollLeft = w.scrollWidth;
                   const last = w.querySelector('thead th:last-child').getBoundingClientRect();
                   return last.right - w.getBoundingClientRect().right; }"""
    )
    assert reach <= 1, reach  # the last column can be scrolled into view


def test_the_notifications_events_are_a_styled_box(browser, running_console):
    page = signed_in(browser, running_console)
    page.goto(f"{running_console.url}/account/notifications/")
    box = page.locator("fieldset.choices")
    assert box.count() == 1
    style = box.evaluate(
        "el => getComputedStyle(el).borderTopStyle + ' ' + getComputedStyle(el).borderRadius"
    )
    assert style.startswith("solid") and not style.endswith(" 0px"), style


def test_the_admin_node_table_fits_at_1440_px(browser, running_console):
    page = signed_in(browser, running_console, width=1440, who="owner")
    page.goto(f"{running_console.url}/admin/cluster/node/")
    sizes = page.evaluate(
        """() => { const r = document.querySelector('#result_list');
                   return {page: document.documentElement.scrollWidth - window.innerWidth,
                           table: r.getBoundingClientRect().right - window.innerWidth}; }"""
    )
    print(sizes)
    assert sizes["page"] <= 0 and sizes["table"] <= 0, sizes
