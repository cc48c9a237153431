"""Every page in a real browser (Debian's Chromium), as a researcher and as a quota owner.

One console (`make run`'s processes) with a known state: a training job reporting progress,
an idle job borrowing another quota's GPUs, a failure, a finished job with a 200-character
name and a job waiting for its quota. Each page is screenshotted into var/artifacts/browser/
(kept by CI), checked by axe-core (no serious or critical violation), checked for CSP
violations and script errors, for empty bands in its cards and for chart labels that touch
or repeat, then looked at again in a phone's 390x844 window (no sideways scrolling, the
navigation's links all reachable; `Walk.phone`), and compared with the database: the
dashboard's and Quotas page's numbers with `manage.py quota_usage --json` (the
scheduler's own snapshot and accounting), lists and statuses with the API.
"""

import json
import re
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ROOT, RunningConsole, manage, start_console, wait_for
from tests.e2e.layout import (
    CARD_BANDS,
    PHONE,
    PHONE_LAYOUT,
    time_labels,
    wait_for_charts_width,
)

pytestmark = pytest.mark.e2e

ARTIFACTS = ROOT / "var" / "artifacts" / "browser"
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
SERIOUS = {"serious", "critical"}

TRAIN = """
import math, sys, time
sys.path.insert(0, {root!r})
from agents.sdk import progress
print("x" * 40000, flush=True)  # one long line
for step in range(1, 100000):
    progress(step, 100000, phase="train", loss=2.0 * math.exp(-step / 50) + 0.1)
    print(f"step {{step}} loss {{2.0 * math.exp(-step / 50):.4f}}", flush=True)
    if step % 100 == 3:  # in every tail the viewer shows (its last 500 lines)
        print("ERROR: transient glitch (an example error line)", flush=True)
    time.sleep(0.2)
"""


class Walk:
    """A browser page that records console errors, CSP violations and axe results, and
    looks at each page at a desktop's width and at a phone's."""

    def __init__(self, browser, console: RunningConsole, role: str) -> None:
        self.console = console
        self.role = role
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        self.page.on("response", self._response)
        self.shots = 0
        (ARTIFACTS / role).mkdir(parents=True, exist_ok=True)

    def _response(self, response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status} {response.url}")

    def _console(self, message) -> None:
        text = message.text
        if message.type == "error" or "Content Security Policy" in text:
            self.problems.append(f"{message.type}: {text}")

    def login(self, username: str, password: str) -> None:
        self.page.goto(f"{self.console.url}/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{self.console.url}/")

    def visit(self, path: str) -> None:
        self.page.goto(f"{self.console.url}{path}")
        self.page.wait_for_load_state("networkidle")

    def check(self, name: str, axe: bool = True) -> None:
        """Screenshot, axe-core and the problems seen so far, for the page shown now; then
        the same page at a phone's width (`phone`)."""
        self.shots += 1
        shot = ARTIFACTS / self.role / f"{self.shots:02d}-{name}.png"
        self.page.screenshot(path=str(shot), full_page=True)
        if axe:
            self._axe(name)
        width = self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, f"{self.role} {name}: the page is {width}px wide"
        assert self.page.evaluate(CARD_BANDS) == [], f"{self.role} {name}: empty bands"
        time_labels(self.page)
        self.phone(name)
        assert not self.problems, f"{self.role} {name}: {self.problems}"

    def _axe(self, name: str) -> None:
        if not self.page.evaluate("typeof window.axe !== 'undefined'"):
            self.page.evaluate(AXE.read_text())
        result = self.page.evaluate("axe.run(document, {resultTypes: ['violations']})")
        serious = [
            f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
            for v in result["violations"]
            if v["impact"] in SERIOUS
        ]
        assert not serious, f"{self.role} {name}: {serious}"

    def phone(self, name: str) -> None:
        """The page shown now in a 390x844 window: no sideways scrolling (a table scrolls
        in its own box), every link of the navigation on screen and clickable, no control
        sticking out, no empty band in a card, the charts redrawn with their labels apart.
        Back to the desktop's width afterwards (the page is not reloaded: a preview or a
        form's state shown by HTMX is measured as it is)."""
        self.page.set_viewport_size(PHONE)
        try:
            wait_for_charts_width(self.page)
            shot = ARTIFACTS / self.role / "phone" / f"{self.shots:02d}-{name}.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(shot), full_page=True)
            layout = self.page.evaluate(PHONE_LAYOUT)
            where = f"{self.role} {name} at 390px"
            assert layout["page"] <= PHONE["width"], f"{where}: {layout['page']}px wide"
            hidden = [link["text"] for link in layout["links"] if not link["reachable"]]
            assert not hidden, f"{where}: navigation links out of reach: {hidden}"
            assert not layout["sticking"], f"{where}: {layout['sticking']}"
            assert self.page.evaluate(CARD_BANDS) == [], f"{where}: empty bands"
            time_labels(self.page)
        finally:
            self.page.set_viewport_size({"width": 1280, "height": 900})
            wait_for_charts_width(self.page)

    def values(self, selector: str) -> dict[str, str]:
        """{data-k: text} inside the first element matching `selector`."""
        return self.page.eval_on_selector(
            selector,
            "root => Object.fromEntries([...root.querySelectorAll('[data-k]')]"
            ".map(e => [e.dataset.k, e.textContent.trim()]))",
        )

    def close(self) -> None:
        self.context.close()


def usage(console: RunningConsole) -> dict:
    return json.loads(manage(console.env, "quota_usage", "--json"))


def submit(console: RunningConsole, **fields) -> int:
    body = {
        "image": "busybox",
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "gpus_per_worker": 1,
        **fields,
    }
    response = console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def job(console: RunningConsole, job_id: int) -> dict:
    return console.api().get(f"{console.url}/api/v1/jobs/{job_id}", timeout=10).json()


def status_is(console, job_id, *statuses):
    return lambda: job(console, job_id)["status"] in statuses


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("walk-var")
    script = var_dir / "walk_train.py"
    script.write_text(TRAIN.format(root=str(ROOT)))
    output = var_dir / "train-output.txt"
    with start_console(var_dir) as console:
        ids = {
            "train": submit(
                console,
                name="resnet",
                quota="vision-h200",
                command=f"{sys.executable} -u {script} | tee {output}",
            ),
        }
        wait_for(status_is(console, ids["train"], "Running"), 60, message="train never ran")
        # Only Idle Resources, 3 GPUs: shared-h200 has 2, so it borrows vision-h200's.
        ids["borrower"] = submit(
            console,
            name="borrower",
            quota="shared-h200",
            gpus_per_worker=3,
            idle_resources="Only Idle Resources",
            command="sleep 900",
        )
        ids["failed"] = submit(
            console,
            name="crashy",
            quota="vision-h200",
            gpus_per_worker=0,
            command="echo 'Traceback (most recent call last):'; echo 'ValueError: bad'; exit 1",
        )
        ids["long"] = submit(
            console, name="n" * 200, quota="vision-h200", gpus_per_worker=0, command="echo done"
        )
        for key, statuses in (("borrower", {"Running"}), ("failed", {"Failed"})):
            wait_for(status_is(console, ids[key], *statuses), 60, message=f"{key} not {statuses}")
        wait_for(status_is(console, ids["long"], "Completed"), 60, message="long name job")
        # Off, 4 GPUs: vision-h200 runs 1 in quota, so it waits for its quota.
        ids["waiting"] = submit(console, name="waits", quota="vision-h200", gpus_per_worker=4,
                                command="echo")  # fmt: skip
        wait_for(status_is(console, ids["waiting"], "Inqueue"), 30, message="waiting job")
        # Progress samples for the charts.
        wait_for(
            lambda: (job(console, ids["train"])["pods"][0]["progress"] or {}).get("step", 0) > 8,
            60,
            message="no progress",
        )
        # Its estimate needs resnet's rate towards its total: one computed before that was
        # known says "unknown" and is cached for FORECAST_CACHE_SECONDS; wait until the
        # console estimates it (the pages below show the same cached estimate).
        wait_for(
            lambda: (job(console, ids["waiting"])["expected_start"] or {}).get("at"),
            60,
            message="the waiting job's start was never estimated",
        )
        yield {"console": console, "ids": ids, "output": output}


def _quota_checks(walk: Walk, numbers: dict, names: list[str], selector: str) -> None:
    for name in names:
        shown = walk.values(f"{selector}[data-quota='{name}']")
        expected = numbers[name]
        for key in ("size", "used", "in_quota", "idle_own", "lent", "free", "borrowed", "waiting"):
            assert shown[key] == str(expected[key]), (name, key, shown, expected)


def test_researcher_walks_every_page(browser, world):
    console, ids = world["console"], world["ids"]
    walk = Walk(browser, console, "researcher")
    walk.login(console.creds["researcher_username"], console.creds["researcher_password"])
    page = walk.page

    # Dashboard: the scheduler's numbers, the researcher's quotas only.
    walk.visit("/")
    numbers = {q["name"]: q for q in usage(console)["quotas"]}
    assert numbers["vision-h200"]["lent"] == 3 and numbers["vision-h200"]["in_quota"] == 1
    _quota_checks(walk, numbers, ["vision-h200", "shared-h200"], "article")
    assert page.locator("article[data-quota='speech-h200']").count() == 0
    pool = usage(console)["pools"][0]
    shown = walk.values("tr[data-pool='Lingjun/H200']")
    assert shown == {k: str(pool[k]) for k in ("in_use", "free", "unavailable", "total")}
    assert "crashy" in page.locator("[data-section=trouble]").inner_text()

    # The fake GPUs report 0% utilisation, but the training job started minutes ago: it is
    # not "held but idle for the last 10 minutes" (only workers that ran the whole window).
    walk.visit("/")
    assert "resnet" not in page.locator("[data-section=idle]").inner_text()
    walk.check("dashboard")

    # Quotas: usage, who borrows from whom, the queue with position and expected start.
    walk.visit("/quotas/")
    _quota_checks(walk, numbers, ["vision-h200", "shared-h200"], "tr")
    borrows = usage(console)["borrows"]
    assert [b["job_id"] for b in borrows] == [ids["borrower"]]
    row = page.locator(f"tr[data-job='{ids['borrower']}']").first.inner_text()
    assert "shared-h200" in row and "vision-h200" in row and "3" in row
    queued = job(console, ids["waiting"])
    row = page.locator(f"table[data-queue='vision-h200'] tr[data-job='{ids['waiting']}']")
    assert row.locator("[data-k=position]").inner_text() == str(queued["queue_position"])
    assert queued["status_reason"] in row.inner_text() and "est." in row.inner_text()
    walk.check("quotas")

    # Job list: the API's jobs in the same order; long names do not widen the page.
    walk.visit("/jobs/")
    api_ids = [j["id"] for j in console.api().get(f"{console.url}/api/v1/jobs").json()["jobs"]]
    shown_ids = page.eval_on_selector_all(
        "#job-rows tr td:first-child a", "links => links.map(a => +a.textContent.slice(1))"
    )
    assert shown_ids == api_ids
    assert "est." in page.locator("#job-rows tr", has_text="waits").inner_text()
    assert "1 In Quota" in page.locator("#job-rows tr", has_text="resnet").inner_text()
    assert "3 Not in Quota" in page.locator("#job-rows tr", has_text="borrower").inner_text()
    walk.check("job-list")
    page.select_option("#f-status", "Running")
    page.fill("#f-q", "resnet")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r".*[?&]q=resnet&status=Running&.*"))
    assert page.locator("#job-rows tr").count() == 1
    walk.check("job-list-filtered")

    # Job detail: charts, workers, the live log viewer.
    walk.visit(f"/jobs/{ids['train']}/")
    page.wait_for_selector("section.charts[data-loaded]")
    assert page.locator("figure[data-chart=progress] canvas").count() == 1
    assert all(len(labels) >= 2 for labels in time_labels(page))  # apart, none repeated
    assert page.locator("figure[data-chart=metrics] .u-legend").inner_text().count("loss") == 1
    gpus = page.locator("table.workers tbody tr td:nth-child(5) span[title]").first
    assert gpus.inner_text() == "1" and gpus.get_attribute("title") == "GPU indices: 0"
    log = page.locator("#log-lines")
    _follows_live(walk, console, ids["train"])
    # Scrolled up, the viewer stays put and offers to jump down.
    page.evaluate("document.querySelector('#log-lines').scrollTop = 0")
    first = _newest_seq(page)
    wait_for(lambda: _newest_seq(page) > first, 10, message="no new lines while scrolled up")
    assert page.evaluate("document.querySelector('#log-lines').scrollTop") == 0
    page.locator("[data-log-jump]").wait_for(state="visible")
    page.click("[data-log-jump]")
    wait_for(lambda: _at_bottom(page), 5, message="jump did not scroll down")
    # Search, first error, timestamps.
    # Terms every shown tail holds: on a loaded machine the page is reached minutes after
    # the job started, past the 500 lines the viewer shows (the loss is under 1 from step 35).
    page.fill("[data-log-search]", "loss 0.")
    assert re.match(r"[1-9]\d* match", page.locator("[data-log-matches]").inner_text())
    page.press("[data-log-search]", "Enter")
    assert "loss 0." in page.locator("#log-lines .log-line.current").inner_text()
    page.click("[data-log-first-error]")
    assert "ERROR: transient glitch" in page.locator("#log-lines .log-line.current").inner_text()
    assert not page.locator("#log-lines time").first.is_visible()
    page.check("[data-log-times]")
    assert page.locator("#log-lines time").first.is_visible()
    walk.check("job-detail")
    # The raw download: the worker's output unchanged, the long line whole.
    with page.expect_download() as download:
        page.click("text=Download raw")
    raw = Path(download.value.path()).read_text()
    mine = "".join(line + "\n" for line in raw.splitlines() if not line.startswith("[agent]"))
    written = world["output"].read_text()
    assert written.startswith(mine) and len(mine) > 40000
    assert "x" * 40000 + "\n" in mine
    assert log.count() == 1

    walk.visit(f"/jobs/{ids['waiting']}/")
    assert "Expected start:" in page.locator(".expected-start").inner_text()
    walk.check("job-detail-waiting")

    walk.visit(f"/jobs/{ids['failed']}/")
    assert "ValueError: bad" in page.locator("table.workers .error-tail").inner_text()
    page.wait_for_selector("section.charts[data-loaded]")
    empty = page.locator("figure[data-chart=progress] .chart-empty").inner_text()
    assert empty == "No samples were recorded."  # not "yet": the job is over
    walk.check("job-detail-failed")

    walk.visit(f"/jobs/{ids['train']}/logs/")
    walk.check("full-log")

    # Create: sections, the fault-tolerance panel, the live hint, the idle warning.
    walk.visit("/jobs/new/")
    panel = page.locator("details[data-ft-panel]")
    page.click("details[data-ft-panel] summary")
    assert panel.get_attribute("open") is None  # opens only when fault tolerance is on
    page.check("input[name=fault_tolerance]")
    assert panel.get_attribute("open") is not None
    assert page.locator("select[name=restart_policy]").is_visible()
    option = page.locator("select[name=quota] option", has_text="shared-h200")
    assert re.search(r"\d+/2 GPUs used, \d+ free", option.inner_text())
    page.select_option("select[name=quota]", value=option.get_attribute("value"))
    page.fill("input[name=image]", "busybox")
    page.fill("input[name=gpus_per_worker]", "1")
    page.fill("input[name=cpus_per_worker]", "1")
    page.fill("input[name=memory_gb_per_worker]", "1")
    page.fill("textarea[name=command]", "echo one\nsleep 1\necho two")
    page.locator("#plan-hint [data-outcome=start]").wait_for()
    page.select_option("select[name=idle_resources]", "Only Idle Resources")
    page.locator("#plan-hint .warning").wait_for()
    walk.check("create")
    page.select_option("select[name=idle_resources]", "Off")
    page.fill("input[name=name]", "from-the-form")
    page.click("form.job-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    created = int(page.url.rstrip("/").rsplit("/", 1)[1])
    wait_for(status_is(console, created, "Completed"), 60, message="form job")
    lines = console.api().get(f"{console.url}/api/v1/jobs/{created}/logs").json()["lines"]
    assert [line["text"] for line in lines if not line["text"].startswith("[agent]")] == [
        "one",
        "two",
    ]

    walk.visit(f"/jobs/new/?clone={ids['train']}")
    assert page.input_value("input[name=name]") == "resnet"
    walk.check("clone")

    # Usage (the roll-up runs every minute: the history may still be empty), notifications,
    # the API's documentation (Swagger UI's own page: no axe run).
    for period in ("week", "day"):
        walk.visit(f"/usage/?period={period}")
        page.wait_for_selector("#usage-charts[data-loaded]")
        walk.check(f"usage-{period}")
    walk.visit("/account/notifications/")
    walk.check("notifications")
    walk.visit("/api/v1/docs")
    page.locator("text=GPU console API").first.wait_for()
    walk.check("api-docs", axe=False)

    # API token: shown once after POST-redirect-GET, rotation asks first.
    walk.visit("/account/token/")
    page.click("form button[type=submit]")
    page.wait_for_url(re.compile(r".*confirm=rotate"))  # the demo token exists: confirm
    walk.check("token-confirm")
    page.click("text=Rotate and revoke")
    token = page.locator("[data-new-token]").inner_text()
    old = console.creds["api_token"]
    assert requests.get(
        f"{console.url}/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).ok
    assert console.api().get(f"{console.url}/api/v1/jobs", timeout=10).status_code == 401
    console.creds["api_token"] = token  # the demo token was rotated: use the new one
    assert old != token
    walk.check("token")
    page.reload()
    assert page.locator("[data-new-token]").count() == 0
    walk.close()


def _newest_seq(page) -> int:
    return page.evaluate(
        "(() => { const l = document.querySelectorAll('#log-lines .log-line');"
        " return l.length ? +l[l.length - 1].dataset.seq : -1; })()"
    )


def _at_bottom(page) -> bool:
    return page.evaluate(
        "(() => { const b = document.querySelector('#log-lines');"
        " return b.scrollHeight - b.scrollTop - b.clientHeight < 8; })()"
    )


def _follows_live(walk: Walk, console: RunningConsole, job_id: int) -> None:
    """A line the API has stored shows up in the viewer within a second or so, and the view
    stays at the bottom."""
    api = console.api()
    after = _newest_seq(walk.page)
    for _ in range(3):
        fresh = wait_for(
            lambda after=after: api.get(
                f"{console.url}/api/v1/jobs/{job_id}/logs", params={"after": after}, timeout=5
            ).json()["lines"],
            10,
            interval=0.05,
            message="no new log lines",
        )
        seq = fresh[0]["seq"]
        stored = time.monotonic()
        wait_for(lambda seq=seq: _newest_seq(walk.page) >= seq, 5, interval=0.05,
                 message="the viewer did not follow")  # fmt: skip
        assert time.monotonic() - stored < 2.0
        assert _at_bottom(walk.page)
        after = _newest_seq(walk.page)


def test_quota_owner_walks_every_page(browser, world):
    console, ids = world["console"], world["ids"]
    walk = Walk(browser, console, "quota-owner")
    walk.login(console.creds["owner_username"], console.creds["owner_password"])
    page = walk.page
    numbers = {q["name"]: q for q in usage(console)["quotas"]}

    walk.visit("/")
    _quota_checks(walk, numbers, ["vision-h200", "speech-h200", "shared-h200"], "article")
    walk.check("dashboard")

    walk.visit("/quotas/")
    _quota_checks(walk, numbers, ["vision-h200", "speech-h200", "shared-h200"], "tr")
    # The tenant's owner sees who borrows by name.
    assert "borrower" in page.locator(f"tr[data-job='{ids['borrower']}']").first.inner_text()
    pooled = usage(console)["pooled_idle"][0]
    assert walk.values("tr[data-pool='acme/H200']")["unused"] == str(pooled["unused"])
    walk.check("quotas")

    walk.visit("/jobs/")
    walk.check("job-list")
    walk.visit(f"/jobs/{ids['borrower']}/")
    assert "Not in Quota" in page.locator("table.workers").inner_text()
    walk.check("job-detail")
    walk.visit("/usage/")
    page.wait_for_selector("#usage-charts[data-loaded]")
    walk.check("usage")

    walk.visit("/admin/")
    walk.check("admin")
    walk.visit("/admin/quotas/quota/")
    walk.check("admin-quotas")
    vision = next(q for q in usage(console)["quotas"] if q["name"] == "vision-h200")
    walk.visit(f"/admin/quotas/quota/{vision['id']}/change/")
    assert "borrower" in page.locator(".field-who_uses_it").inner_text()
    walk.check("admin-quota")
    walk.visit("/admin/quotas/workspace/")
    walk.check("admin-workspaces")
    walk.visit("/admin/jobs/job/")
    walk.check("admin-jobs")
    walk.visit("/admin/cluster/node/")
    walk.check("admin-nodes")
    node_link = page.locator("#result_list tbody tr th a").first
    node_link.click()
    page.wait_for_load_state("networkidle")
    assert "resnet" in page.locator(".field-jobs_here").inner_text()
    walk.check("admin-node")
    # Drain: nothing new is placed there, and running jobs keep running.
    walk.visit("/admin/cluster/node/")
    page.check("#result_list tbody input[type=checkbox]")
    page.select_option("select[name=action]", "drain")
    page.click("button[name=index]")
    page.click("input[type=submit][value^='Yes, drain']")  # the confirmation page
    assert "Draining 1 node(s)" in page.locator(".messagelist").inner_text()
    assert "draining" in page.locator("#result_list").inner_text()
    walk.check("admin-nodes-draining")
    assert job(console, ids["train"])["status"] == "Running"
    # Uncordon again: the researcher's walk (in any order) submits jobs.
    page.check("#result_list tbody input[type=checkbox]")
    page.select_option("select[name=action]", "uncordon")
    page.click("button[name=index]")
    assert "Uncordoned 1 node(s)" in page.locator(".messagelist").inner_text()
    walk.close()
