"""The Usage page in Chromium (live test server): loads, draws its charts, the period
picker swaps the report in place (HTMX), axe-core finds nothing serious; screenshots go to
var/artifacts/browser/usage/."""

import threading

import pytest

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.test_pages_walk import ARTIFACTS, AXE, SERIOUS
from usage.actions.rollup import roll_up_usage

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"  # no scheduling cycle on commit: the history stays


def test_usage_page_in_chromium(no_cycles, live_server, history, researcher):
    roll_up_usage(now=history["until"])
    (ARTIFACTS / "usage").mkdir(parents=True, exist_ok=True)
    failures: list[BaseException] = []

    def run() -> None:
        # Playwright's event loop in its own thread: the test's thread keeps using the ORM.
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                walk(browser, live_server.url)
                browser.close()
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(300)
    assert not thread.is_alive(), "the browser did not finish"
    if failures:
        raise failures[0]


def walk(browser, url: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "correct-horse-battery")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    page.goto(f"{url}/usage/?period=week&date=2026-11-02")
    page.wait_for_selector("#usage-charts[data-loaded]")
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
