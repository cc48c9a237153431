"""The Usage page in Chromium (live test server): loads, draws its charts (time labels
apart, the future blank), the period picker swaps the report in place (HTMX), axe-core
finds nothing serious; screenshots go to var/artifacts/browser/usage/."""

import threading
from datetime import UTC, datetime

import pytest
import time_machine

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.layout import time_labels, wait_for_charts_width
from tests.e2e.test_pages_walk import ARTIFACTS, AXE, SERIOUS
from usage.actions.rollup import roll_up_usage

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"  # no scheduling cycle on commit: the history stays


def in_chromium(steps, *args) -> None:
    """`steps(browser, *args)` in Chromium, with Playwright's event loop in its own thread:
    the test's thread keeps using the ORM (and serves the live server)."""
    (ARTIFACTS / "usage").mkdir(parents=True, exist_ok=True)
    failures: list[BaseException] = []

    def run() -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                steps(browser, *args)
                browser.close()
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(300)
    assert not thread.is_alive(), "the browser did not finish"
    if failures:
        raise failures[0]


def test_usage_page_in_chromium(no_cycles, live_server, history, researcher):
    roll_up_usage(now=history["until"])
    in_chromium(walk, live_server.url)


def test_the_day_chart_in_chromium_is_blank_after_now_and_its_labels_apart(
    no_cycles, live_server, history, researcher, node
):
    """At 14:40 (the roll-up just ran): the hours from 15:00 are null in the drawn data,
    14:00 is the share of its 40 minutes, and no two time labels touch or repeat, at a
    desktop's width and a phone's."""
    until = history["until"]
    roll_up_usage(now=until)
    busy = round(100 * 3 / node.gpus, 2)  # the borrower's 3 GPUs, the only pod at 14:00
    with time_machine.travel(until, tick=True):
        in_chromium(day_chart, live_server.url, busy)


def day_chart(browser, url: str, busy: float) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, url)
    page.goto(f"{url}/usage/?period=day&date=2026-11-02")
    page.wait_for_selector("#usage-charts[data-loaded]")
    drawn = page.evaluate(
        "() => Object.fromEntries([...document.querySelectorAll('#usage-charts [data-chart]')]"
        ".map(f => [f.dataset.chart, f.querySelector('.chart-plot').uplot.data]))"
    )
    hours = [datetime.fromtimestamp(t, UTC).hour for t in drawn["cluster"][0]]
    assert hours == list(range(24))
    for chart in ("guarantee", "cluster"):
        for values in drawn[chart][1:]:
            assert values[15:] == [None] * 9, (chart, values)
            assert None not in values[:15], (chart, values)
    assert drawn["cluster"][1][14] == busy  # 3 of the node's GPUs the whole 40 minutes
    page.screenshot(path=str(ARTIFACTS / "usage" / "03-usage-day.png"), full_page=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        wait_for_charts_width(page)
        labels = time_labels(page)
        assert all(len(row) >= 3 for row in labels), labels
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(ARTIFACTS / "usage" / "04-usage-day-phone.png"), full_page=True)
    context.close()


def sign_in(page, url: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "correct-horse-battery")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def walk(browser, url: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    sign_in(page, url)
    page.goto(f"{url}/usage/?period=week&date=2026-11-02")
    page.wait_for_selector("#usage-charts[data-loaded]")
    labels = time_labels(page)  # a week by hour: one label a day or so, never overlapping
    assert len(labels) == 2 and all(len(row) >= 3 for row in labels), labels
    assert page.locator("tr[data-group='team-a']").count() == 1
    assert page.locator("#usage-charts canvas").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "usage" / "01-usage-week.png"), full_page=True)
    page.evaluate(AXE.read_text())
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    serious = [v["id"] for v in result["violations"] if v["impact"] in SERIOUS]
    assert not serious, serious
    page.select_option("#u-group", "user")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("tr[data-group='alice']")
    page.wait_for_selector("#usage-charts[data-loaded]")
    assert "group=user" in page.url  # hx-push-url: the swapped report has its own address
    page.screenshot(path=str(ARTIFACTS / "usage" / "02-usage-by-user.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280 and not problems, (width, problems)
    context.close()
