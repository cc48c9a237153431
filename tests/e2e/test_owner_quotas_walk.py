"""A quota owner manages the tree in a real browser (Debian's Chromium, with HTMX): creates
a child quota (previewed twice: the heading follows each swap), resizes a quota below what
runs with the preview (the job above the new guarantee named before anything is saved) and
confirms, creates a second child and moves the first under it with a limit, a lending limit
and a weight, creates a workspace bound to a quota, adds a member by e-mail, changes their
role, removes them after the confirmation page, and deletes the child quotas. Every step is
screenshotted into var/artifacts/browser/quota-owner-pages/, checked by axe-core and looked
at in a phone's window (docs/quota-tree.md "Owner pages")."""

import pytest

from tests.e2e.conftest import start_console, wait_for
from tests.e2e.test_pages_walk import Walk, status_is, submit

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def owned(tmp_path_factory):
    with start_console(tmp_path_factory.mktemp("owner-var")) as console:
        running = submit(
            console, name="holds-two", quota="vision-h200", gpus_per_worker=2, command="sleep 900"
        )
        wait_for(status_is(console, running, "Running"), 60, message="the job never ran")
        yield console, running


def test_an_owner_changes_the_tree_and_the_members_in_a_browser(browser, owned):
    console, running = owned
    walk = Walk(browser, console, "quota-owner-pages")
    page = walk.page
    walk.login(console.creds["owner_username"], console.creds["owner_password"])

    walk.visit("/quotas/")
    page.click("a[data-owner-tree='acme']")
    page.wait_for_load_state("networkidle")
    assert page.locator("tr[data-tree-quota='vision-h200']").count() == 1
    walk.check("tree")

    # A child quota of vision-h200: the preview, then the confirm (HTMX swaps the panel).
    page.click("a[aria-label='Add child of vision-h200']")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=name]", "vision-tmp")
    page.fill("input[name=gpus]", "1")
    walk.check("new-child-form")
    page.click("button[name=preview]")
    page.wait_for_selector("[data-section=preview]")
    assert page.locator("h1").inner_text() == "Preview: new quota vision-tmp"
    # Back to the form, another name, a second preview: the heading follows each swap.
    page.click("button[name=back]")
    page.wait_for_selector("button[name=preview]")
    assert page.locator("h1").inner_text() == "New child quota of vision-h200"
    page.fill("input[name=name]", "vision-nlp")
    page.click("button[name=preview]")
    page.wait_for_selector("[data-section=preview]")
    assert page.locator("h1").inner_text() == "Preview: new quota vision-nlp"
    assert "vision-h200: 4" in page.locator("[data-effect=own]").inner_text()
    walk.check("new-child-preview")
    page.click("button[name=confirm]")
    page.wait_for_selector("tr[data-tree-quota='vision-nlp']")
    assert "Quota vision-nlp created." in page.locator(".messages").inner_text()
    walk.check("tree-with-child")

    # Resize vision-h200 to 2: its own guarantee (1) is below the 2 GPUs its job holds.
    page.click("a[aria-label='Edit vision-h200']")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=gpus]", "2")
    page.click("button[name=preview]")
    page.wait_for_selector("[data-effect=over-jobs]")
    over = page.locator("[data-effect=over-jobs]").inner_text()
    assert f"#{running} holds-two" in over and "keeps running" in over
    walk.check("resize-preview")
    page.click("button[name=confirm]")
    page.wait_for_selector("tr[data-tree-quota='vision-nlp']")
    assert walk.values("tr[data-tree-quota='vision-h200']")["size"] == "2"
    walk.check("tree-resized")

    # A second child, then vision-nlp moved under it with a limit, lending limit and weight.
    page.click("a[aria-label='Add child of vision-h200']")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=name]", "vision-cv")
    page.fill("input[name=gpus]", "1")
    page.click("button[name=preview]")
    page.wait_for_selector("[data-section=preview]")
    page.click("button[name=confirm]")
    page.wait_for_selector("tr[data-tree-quota='vision-cv']")
    page.click("a[aria-label='Edit vision-nlp']")
    page.wait_for_load_state("networkidle")
    page.select_option("select[name=parent]", label="vision-cv")
    page.fill("input[name=max_gpus]", "1")
    page.fill("input[name=lending_limit]", "0")
    page.fill("input[name=weight]", "2")
    walk.check("reparent-form")
    page.click("button[name=preview]")
    page.wait_for_selector("[data-section=preview]")
    walk.check("reparent-preview")
    page.click("button[name=confirm]")
    page.wait_for_selector("text=Quota vision-nlp saved.")
    moved = walk.values("tr[data-tree-quota='vision-nlp']")
    assert (moved["max_gpus"], moved["lending_limit"]) == ("1", "0"), moved
    assert moved["weight"].startswith("2"), moved
    assert walk.values("tr[data-tree-quota='vision-cv']")["own"] == "0"
    walk.check("tree-reparented")

    # A new workspace bound to vision-h200.
    page.click("a:text('New workspace')")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=name]", "robotics")
    page.get_by_label("vision-h200", exact=True).check()
    walk.check("workspace-form")
    page.click("button:text('Create workspace')")
    page.wait_for_selector("text=Workspace robotics created.")
    walk.check("workspace-created")
    page.click("a:text('the tree of acme')")
    page.wait_for_load_state("networkidle")
    assert walk.values("tr[data-workspace='robotics']")["quotas"] == "1"

    # Members of speech: add the researcher by e-mail, then remove them.
    page.click("tr[data-workspace='speech'] a")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=user]", "nobody@example.com")
    page.click("[data-form=add-member] button[type=submit]")
    page.wait_for_selector("#id_user_error")
    walk.check("member-unknown")
    page.fill("input[name=user]", "researcher@example.com")
    page.click("[data-form=add-member] button[type=submit]")
    page.wait_for_selector("tr[data-member='researcher']")
    walk.check("member-added")
    row = page.locator("tr[data-member='researcher']")
    row.locator("select[name=role]").select_option("quota_owner")
    row.locator("button[type=submit]").click()
    page.wait_for_selector("text=researcher is now Quota owner.")
    assert page.locator("tr[data-member='researcher'] select[name=role]").input_value() == (
        "quota_owner"
    )
    walk.check("member-role")
    page.click("a[aria-label='Remove researcher']")
    page.wait_for_load_state("networkidle")
    walk.check("member-remove-confirm")
    page.click("button[name=confirm]")
    page.wait_for_selector(".messages")
    assert page.locator("tr[data-member='researcher']").count() == 0
    walk.check("member-removed")

    # Delete the (empty) child quotas: their guarantees go back to vision-h200.
    page.click("a:text('the tree of acme')")
    page.wait_for_load_state("networkidle")
    page.click("a[aria-label='Delete vision-nlp']")
    page.wait_for_selector("[data-effect=own]")
    walk.check("delete-preview")
    page.click("button[name=confirm]")
    page.wait_for_selector("text=Quota vision-nlp deleted.")
    assert page.locator("tr[data-tree-quota='vision-nlp']").count() == 0
    page.click("a[aria-label='Delete vision-cv']")
    page.wait_for_selector("[data-effect=own]")
    page.click("button[name=confirm]")
    page.wait_for_selector("text=Quota vision-cv deleted.")
    assert walk.values("tr[data-tree-quota='vision-h200']")["own"] == "2"
    walk.check("tree-after-delete")
    walk.close()


def test_an_owner_uses_the_admin_and_reads_the_audit_log(browser, owned):
    """Not staff, the owner signs in to /admin/ (their tenant only), edits a quota there:
    the first save shows the preview and saves nothing, the second saves; the tenant's
    audit page lists the change, and its CSV link carries the filters."""
    console, _ = owned
    walk = Walk(browser, console, "quota-owner-admin")
    page = walk.page
    walk.login(console.creds["owner_username"], console.creds["owner_password"])
    walk.visit("/admin/")
    assert page.locator("a:text-is('Quotas')").count() == 1
    assert page.locator("a:text-is('Tenants')").count() == 0
    walk.check("admin-index")
    walk.visit("/admin/quotas/quota/")
    page.click("#result_list a:text-is('vision-h200')")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=weight]", "3")
    page.click("input[name=_save]")
    page.wait_for_load_state("networkidle")
    assert "Nothing is saved yet" in page.locator(".errornote, .errorlist").all_inner_texts()[-1]
    walk.check("admin-quota-preview")
    page.click("input[name=_save]")
    page.wait_for_load_state("networkidle")
    assert "was changed successfully" in page.locator(".messagelist").inner_text()

    walk.visit("/quotas/")
    page.click("a[data-owner-tree='acme']")
    page.wait_for_load_state("networkidle")
    page.click("a:text('audit log')")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=action]", "quota.change")
    page.click("[data-section=audit-filters] button[type=submit]")
    page.wait_for_load_state("networkidle")
    rows = page.locator("table[data-section=audit] tbody tr")
    assert "weight: 1.0 → 3.0" in rows.first.inner_text()
    assert "action=quota.change" in page.locator("a[data-csv]").get_attribute("href")
    walk.check("audit")
    walk.close()
