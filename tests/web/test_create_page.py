"""The Create job page: sections, the quota picker's numbers, the live plan() hint, the idle
warning, clone, and the form bugs (CRLF commands, help text)."""

import pytest
from django.urls import reverse

from jobs.models import Job
from jobs.scheduler.cycle import load_snapshot
from policy.accounting import account
from tests.conftest import make_node
from tests.web.conftest import HTMX, Tree, borrow, place, submit
from web.forms import JobForm, initial_from_job

FORM = {
    "image": "busybox",
    "command": "echo hi",
    "workers": "1",
    "gpus_per_worker": "2",
    "cpus_per_worker": "4",
    "memory_gb_per_worker": "16",
    "priority": "1",
    "idle_resources": "Off",
}


def hint(client, quota, **changes) -> Tree:
    data = FORM | {"quota": str(quota.pk)} | {k: str(v) for k, v in changes.items()}
    response = client.post(reverse("web:create-hint"), data, **HTMX)
    assert response.status_code == 200
    return response.text


@pytest.fixture
def small_quota(tenant, workspace):
    from quotas.models import Quota, ResourceType

    q = Quota.objects.create(
        tenant=tenant, name="small", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=2
    )
    workspace.quotas.add(q)
    return q


def test_the_page_is_in_sections_with_fault_tolerance_behind_modify_configuration(
    member_client, quota, node
):
    html = member_client.get(reverse("web:create")).text
    legends = [e.text for e in Tree(html).elements if e.tag == "legend"]
    assert legends == [
        "Basics",
        "Resources",
        "Idle Resources",
        "Distributed",
        "Result",  # the work contract (docs/results.md)
        "Automatic Fault Tolerance",
        "Advanced",
    ]
    tree = Tree(html)
    (panel,) = tree.find(data_ft_panel="")
    assert panel.tag == "details" and "open" not in panel.attrs  # closed while FT is off
    summary = [e for e in tree.elements if e.tag == "summary"]
    assert summary[0].text == "Modify Configuration"
    inside = {e.attrs.get("name") for e in tree.elements if e.attrs.get("name") and _in(e, panel)}
    assert inside == {
        "run_type",
        "max_restarts",
        "restart_policy",
        "hang_detection",
        "hang_timeout",
        "hang_action",
    }
    (toggle,) = tree.find(name="fault_tolerance")
    assert "data-ft-toggle" in toggle.attrs and not _in(toggle, panel)
    # Without JavaScript the panel's fields stay hidden unless the toggle is checked (CSS).
    css = (member_client.get("/static/console.css").getvalue()).decode()
    assert ":not(:has([data-ft-toggle]:checked)) details.ft-config" in css


def _in(element, container) -> bool:
    node = element.parent
    while node is not None:
        if node is container:
            return True
        node = node.parent
    return False


def test_help_text_is_shown_as_text(member_client, quota, node):
    html = member_client.get(reverse("web:create")).text
    assert "default job-&lt;id&gt;." in html  # was rendered as a tag: "default job-."


def test_the_quota_picker_shows_used_and_free(member_client, researcher, workspace, quota, node):
    place(submit(researcher, workspace, quota, gpus_per_worker=3), node)
    html = member_client.get(reverse("web:create")).text
    usage = account(load_snapshot()[0]).quotas[quota.pk]
    assert f"team-a (Lingjun, H200) — {usage.used}/16 GPUs used, {usage.free} free" in html
    assert usage.used == 3


def test_a_crlf_command_is_stored_with_unix_line_endings(member_client, researcher, quota, node):
    data = FORM | {
        "quota": str(quota.pk),
        "command": "sleep 4\r\nif true; then\r\n echo ok\r\nfi\r\n",
    }
    response = member_client.post(reverse("web:create"), data)
    assert response.status_code == 302
    assert Job.objects.get().command == "sleep 4\nif true; then\n echo ok\nfi"


def test_hint_would_start_now(member_client, quota, node):
    html = hint(member_client, quota)
    assert 'data-outcome="start"' in html and "Would start now" in html
    assert "placed on node-0 (GPUs 0-1)" in html
    assert Job.objects.count() == 0  # the hint writes nothing


def test_hint_would_borrow_idle_gpus(
    member_client, researcher, workspace, small_quota, quota, node
):
    # small (2 GPUs) is full; its Lingjun tenant-mate team-a lends idle capacity.
    place(submit(researcher, workspace, small_quota, gpus_per_worker=2), node)
    html = hint(member_client, small_quota, idle_resources="Acceptable")
    assert 'data-outcome="borrow"' in html and "borrowed GPUs" in html and "team-a" in html


def test_hint_says_where_a_borrower_goes_apart_from_its_lender(
    member_client, researcher, workspace, small_quota, quota, node
):
    """Where the pods go comes from the admission's own field, not from its reason's text
    (which names the lender too): the sentence names each once."""
    place(submit(researcher, workspace, small_quota, gpus_per_worker=2), node)
    html = hint(member_client, small_quota, idle_resources="Acceptable")
    assert "(Not in Quota): placed on node-0 (GPUs 2-3)." in html
    assert "idle resources of quota" not in html


def test_hint_would_queue_and_says_why_with_an_estimate(
    member_client, researcher, workspace, small_quota, node
):
    running = submit(researcher, workspace, small_quota, gpus_per_worker=2, max_runtime_seconds=600)
    place(running, node)
    html = hint(member_client, small_quota)
    assert 'data-outcome="queue"' in html
    assert "quota small: 2/2 GPUs in use, job needs 2" in html
    assert "position 1" in html
    assert "Expected start" in html and "max runtime" in html


def test_hint_reports_problems_and_prompts_on_an_empty_form(member_client, quota, node):
    html = hint(member_client, quota, gpus_per_worker=99)
    assert 'data-outcome="invalid"' in html and "GPUs per worker" in html
    empty = member_client.post(reverse("web:create-hint"), {}, **HTMX).text
    assert 'data-outcome="incomplete"' in empty


def test_the_hint_lists_every_problem(member_client, quota, node):
    bad = {
        "gpus_per_worker": 99,
        "cpus_per_worker": -1,
        "memory_gb_per_worker": -1,
        "priority": 42,
        "max_runtime_seconds": -5,
        "checkpoint_dir": "/etc",
    }
    html = hint(member_client, quota, **bad)
    assert html.count("<li>") == len(bad), html


def test_an_absolute_checkpoint_folder_is_a_field_error_not_made_relative(
    member_client, quota, node
):
    html = hint(member_client, quota, checkpoint_dir="/etc")
    assert 'data-outcome="invalid"' in html and "not an absolute path" in html


def test_idle_job_without_a_checkpoint_folder_is_warned(member_client, quota, node):
    html = hint(member_client, quota, idle_resources="Only Idle Resources")
    assert "names no checkpoint folder" in html and "Automatic Fault Tolerance" in html
    quiet = hint(member_client, quota, idle_resources="Only Idle Resources", checkpoint_dir="ck")
    assert "names no checkpoint folder" not in quiet
    assert "names no checkpoint folder" not in hint(member_client, quota)


def test_hint_needs_post_and_login(member_client, client, quota, node):
    assert member_client.get(reverse("web:create-hint")).status_code == 405
    response = client.post(reverse("web:create-hint"), FORM)
    assert response.status_code == 302 and "login" in response["Location"]


def test_hint_refuses_a_quota_of_another_workspace(member_client, other_quota, node):
    html = hint(member_client, other_quota)
    assert 'data-outcome="invalid"' in html and "not bound to any of your workspaces" in html


def test_clone_prefills_every_field(member_client, researcher, workspace, quota, node):
    job = submit(
        researcher,
        workspace,
        quota,
        name="original",
        image="pytorch:2.4",
        command="torchrun\ntrain.py",
        workers=2,
        gpus_per_worker=4,
        cpus_per_worker=8,
        memory_gb_per_worker=64,
        priority=7,
        idle_resources="Acceptable",
        env={"SEED": "7", "LR": "0.1"},
        max_runtime_seconds=7200,
        fault_tolerance=True,
        ft_config={
            "run_type": "Asynchronous",
            "max_restarts": 9,
            "policy": "OnFailure",
            "hang_detection": True,
            "hang_timeout": 600,
            "hang_action": "stop",
        },
        checkpoint_dir="runs/original",
    )
    response = member_client.get(reverse("web:create") + f"?clone={job.pk}")
    form = response.context["form"]
    expected = initial_from_job(job)
    shown = {name: form[name].value() for name in expected}
    # The textarea's text (PostgreSQL's jsonb does not keep the keys' order).
    assert sorted(shown.pop("env").splitlines()) == ["LR=0.1", "SEED=7"]
    assert shown.pop("data") == ""  # no data folders: an empty textarea
    assert shown == {k: v for k, v in expected.items() if k not in ("env", "data")}
    # Every field of the form is prefilled, and submitting it as is reproduces the job.
    assert set(expected) == set(JobForm.base_fields)
    tree = Tree(response.text)
    (panel,) = tree.find(data_ft_panel="")
    assert "open" in panel.attrs  # fault tolerance is on: its configuration is shown
    data = {
        k: ("on" if v is True else "" if v in (False, None) else v) for k, v in expected.items()
    }
    data["env"] = "SEED=7\nLR=0.1"
    data["data"] = ""
    assert member_client.post(reverse("web:create"), data).status_code == 302
    clone = Job.objects.exclude(pk=job.pk).get()
    fields = [
        "name",
        "image",
        "command",
        "workers",
        "gpus_per_worker",
        "cpus_per_worker",
        "memory_gb_per_worker",
        "priority",
        "idle_resources",
        "env",
        "max_runtime_seconds",
        "fault_tolerance",
        "ft_config",
        "quota_id",
    ]
    assert {f: getattr(clone, f) for f in fields} == {f: getattr(job, f) for f in fields}
    # A clone is a new run: a folder of its own, never the original's (docs/fault-tolerance.md).
    assert clone.checkpoint_dir == ""


def test_borrow_helper_sanity(researcher, workspace, quota, other_quota, node):
    job = submit(researcher, workspace, quota, idle_resources="Only Idle Resources")
    (pod,) = borrow(job, make_node("node-9"), other_quota, [0])
    assert not pod.in_quota and pod.charged_quota == other_quota
