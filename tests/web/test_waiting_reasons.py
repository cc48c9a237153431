"""A waiting job's reason and queue position follow every scheduling cycle on the console's
pages (not only when it first goes Pending → Inqueue), and its timeline does not grow."""

from django.urls import reverse

from jobs.models import JobEvent
from jobs.scheduler.cycle import run_cycle
from tests.conftest import make_node
from tests.web.conftest import Tree, submit


def status_line(client, job) -> tuple[str, str]:
    """(queue position, reason) as the job page's status line shows them."""
    tree = Tree(client.get(reverse("web:detail", args=[job.pk])).text)
    (line,) = [e for e in tree.elements if e.attrs.get("class") == "status-line"]
    spans = [e for e in tree.elements if e.parent is line and e.tag == "span"]
    position = [e.text.strip() for e in spans if e.attrs.get("class") == "muted"]
    (reason,) = [e.text.strip() for e in spans if e.attrs.get("class") == "reason"]
    return (position[0] if position else ""), reason


def test_reason_and_position_change_on_the_page_while_the_job_waits(
    member_client, researcher, workspace, quota, node
):
    submit(researcher, workspace, quota, name="running", gpus_per_worker=8)
    run_cycle()
    waiting = submit(researcher, workspace, quota, name="waiting", gpus_per_worker=8)
    run_cycle()
    assert status_line(member_client, waiting) == (
        "#1 in queue",
        "no node has 8 free H200 GPUs; all H200 GPUs are in use",
    )

    # A higher-priority job comes in ahead: position 2, on the next cycle.
    submit(researcher, workspace, quota, name="urgent", gpus_per_worker=8, priority=9)
    assert run_cycle().reasons_updated == 1
    assert status_line(member_client, waiting)[0] == "#2 in queue"

    # A new node lets the urgent job start: the waiting job is first again, and its reason
    # says what it waits for now (its quota of 16 GPUs is all in use).
    make_node("node-1")
    assert run_cycle().reasons_updated == 1
    position, reason = status_line(member_client, waiting)
    assert position == "#1 in queue"
    assert "quota" in reason and "no node has" not in reason, reason
    assert JobEvent.objects.filter(job=waiting).count() == 2  # submitted, Pending → Inqueue
