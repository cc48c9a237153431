"""Live logs: hostile text stays text, the follower advances with ?after= and stops at the end."""

from datetime import timedelta

import time_machine
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from jobs.models import Pod
from policy.statuses import JobStatus
from tests.web.conftest import Tree, add_log, finish, free_gpus, place

HOSTILE = [
    "<script>alert('owned')</script>",
    '<div hx-get="/admin/evil" hx-trigger="load" hx-swap-oob="true" id="job-live">x</div>',
    "\x1b[31mred error\x1b[0m done",
    '"><img src=x onerror=alert(1)>',
]


def _hostile_job(job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, ["starting", *HOSTILE])
    return pod


def _assert_inert(html: str) -> None:
    tree = Tree(html)
    # No element the log could have created: no script, no injected htmx attribute, no img.
    assert not [e for e in tree.elements if e.tag == "script" and "alert" in e.text]
    assert not [e for e in tree.elements if e.attrs.get("hx-get") == "/admin/evil"]
    assert not [e for e in tree.elements if e.tag == "img"]
    # The text is there, escaped, inside an element htmx will not process.
    for needle in ("<script>alert('owned')</script>", 'hx-get="/admin/evil"', "red error done"):
        holders = tree.containing(needle)
        assert holders, needle
        assert all(h.inside("hx-disable") for h in holders), needle
    assert "\x1b" not in html
    assert "&lt;script&gt;" in html


def test_detail_page_renders_hostile_log_lines_inert(member_client, job, node):
    _hostile_job(job, node)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    _assert_inert(html)
    log = Tree(html).by_id("log-lines")
    assert log is not None and "hx-disable" in log.attrs


def test_viewer_gets_hostile_lines_as_json_text(member_client, job, node):
    """The live viewer inserts each line with textContent (static/console.js), never as
    HTML; the JSON carries the text with control sequences stripped and nothing else."""
    _hostile_job(job, node)
    url = reverse("web:logs", args=[job.pk]) + "?after=-1&format=json"
    response = member_client.get(url)
    assert response["Content-Type"] == "application/json"
    texts = [line["text"] for line in response.json()["lines"]]
    assert texts == ["starting", *HOSTILE[:2], "red error done", HOSTILE[3]]
    assert "textContent" in (settings.BASE_DIR / "static" / "console.js").read_text()
    assert ".innerHTML" not in (settings.BASE_DIR / "static" / "console.js").read_text()


def test_full_log_page_renders_hostile_lines_inert(member_client, job, node):
    _hostile_job(job, node)
    _assert_inert(member_client.get(reverse("web:logs", args=[job.pk])).text)


def test_raw_download_keeps_the_bytes_as_plain_text(member_client, job, node):
    _hostile_job(job, node)
    response = member_client.get(reverse("web:logs-raw", args=[job.pk]))
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"].startswith("attachment;")
    body = b"".join(response.streaming_content).decode()
    assert body == "\n".join(["starting", *HOSTILE]) + "\n"


def _follow(client, url: str) -> dict:
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    return response.json()


def test_viewer_follows_new_lines_and_advances_its_cursor(member_client, job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, ["line-0", "line-1"])
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    viewer = Tree(html).by_id("log-lines")
    assert viewer.attrs["data-after"] == "1" and "data-live" in viewer.attrs
    assert viewer.inside("hx-disable")
    source = viewer.attrs["data-src"]
    assert "format=json" in source

    add_log(pod, 2, ["line-2", "\x1b[31mline-3\x1b[0m"])
    page = _follow(member_client, source + "&after=1")
    assert [(line["seq"], line["text"]) for line in page["lines"]] == [
        (2, "line-2"),
        (3, "line-3"),  # control sequences stripped for display; the raw download keeps them
    ]
    assert all(line["at"] for line in page["lines"])  # the console's receive time
    assert page["next_after"] == 3 and page["complete"] is False

    # Nothing new: no lines, same cursor, keeps following while the job runs.
    page = _follow(member_client, source + "&after=3")
    assert page == {
        "lines": [],
        "next_after": 3,
        "complete": False,
        "log_gap": "",
        "newer_attempt": None,
    }


def test_viewer_reads_a_cursor_in_the_middle_of_a_chunk(member_client, job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, [f"l{i}" for i in range(10)])
    add_log(pod, 10, ["l10"])
    url = reverse("web:logs", args=[job.pk]) + f"?attempt={pod.attempt}&rank=0&after=6"
    assert [line["text"] for line in _follow(member_client, url + "&format=json")["lines"]] == [
        "l7",
        "l8",
        "l9",
        "l10",
    ]
    # The plain page (the "Full log" link, no JavaScript needed) shows the same lines (read
    # from the log's own elements: a random token elsewhere on the page may contain "l8").
    page = Tree(member_client.get(url).text)
    lines = [e.text.strip() for e in page.elements if e.attrs.get("class") == "log-line"]
    assert lines == ["l7", "l8", "l9", "l10"]


def test_viewer_is_told_when_the_log_is_complete(member_client, job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, ["only line"])
    Pod.objects.filter(pk=pod.pk).update(
        status="Succeeded", exit_code=0, started_at=timezone.now(), finished_at=timezone.now()
    )
    from jobs.actions.transitions import transition
    from policy.statuses import Actor

    with time_machine.travel(timezone.now(), tick=False) as clock:
        transition(job, JobStatus.COMPLETED, reason="done", actor=Actor.AGENT)
        url = reverse("web:logs", args=[job.pk]) + "?format=json&after=0"
        # Just finished: late lines may still be on their way, keep following; no timer
        # ends it (docs/agent-protocol.md, "End of a worker's log").
        assert _follow(member_client, url)["complete"] is False
        clock.shift(timedelta(seconds=1))
        assert _follow(member_client, url)["complete"] is False
        # The agent's end of the stream was acknowledged: complete.
        Pod.objects.filter(pk=pod.pk).update(logs_delivered=True)
        assert _follow(member_client, url)["complete"] is True
        # A reader that is behind still gets its lines first.
        behind = _follow(member_client, url.replace("after=0", "after=-1"))
        assert behind["complete"] is True and behind["lines"][0]["text"] == "only line"


def test_finished_job_page_does_not_follow(member_client, job, node):
    with time_machine.travel(timezone.now() - timedelta(hours=1), tick=False):
        finish(job, node)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert "data-live" not in Tree(html).by_id("log-lines").attrs


def test_worker_tabs_select_the_log(member_client, researcher, workspace, quota, node):
    from tests.web.conftest import submit

    job = submit(researcher, workspace, quota, workers=2)
    pods = place(job, node)
    add_log(pods[0], 0, ["from rank zero"])
    add_log(pods[1], 0, ["from rank one"])
    url = reverse("web:detail", args=[job.pk])
    assert "from rank zero" in member_client.get(url).text
    html = member_client.get(url + "?rank=1").text
    assert "from rank one" in html and "from rank zero" not in html
    assert member_client.get(url + "?rank=x").status_code == 400


def test_bad_log_parameters_are_400(member_client, job):
    url = reverse("web:logs", args=[job.pk])
    assert member_client.get(url + "?after=abc").status_code == 400
    assert member_client.get(url + "?rank=1e9").status_code == 400


def test_tail_shows_the_newest_lines_across_chunks(member_client, job, node):
    from jobs.logview import read_tail

    pod = place(job, node)[0]
    add_log(pod, 0, [f"old-{i}" for i in range(600)])
    add_log(pod, 600, [f"new-{i}" for i in range(3)])
    lines = read_tail(pod, 5)
    assert [(x.seq, x.text) for x in lines] == [
        (598, "old-598"),
        (599, "old-599"),
        (600, "new-0"),
        (601, "new-1"),
        (602, "new-2"),
    ]
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert "old-102" not in html and "old-103" in html and "new-2" in html
    assert "Showing the newest lines" in html


# Restarts: the viewer follows the job from attempt to attempt -----------------------------


def _shown(tree: Tree) -> list[str]:
    """The lines of the job page's log viewer."""
    return [e.text for e in tree.elements if e.attrs.get("class") == "log-line"]


def _restart(job, node, pod, *, at) -> Pod:
    """A Synchronous restart (docs/statuses.md): the worker failed at `at`, the job went back to
    Pending as attempt 2 and the scheduler placed the new attempt's worker."""
    from jobs.actions.transitions import transition
    from policy.statuses import Actor, PodStatus

    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED, exit_code=1, finished_at=at)
    transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.AGENT, attempt=2)
    transition(job, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
    new = Pod.objects.create(
        job=job, attempt=2, rank=0, node=node, gpu_indices=[0], gpus=1,
        charged_quota=job.quota, status=PodStatus.RUNNING,
    )  # fmt: skip
    transition(job, JobStatus.RUNNING, reason="all workers running", actor=Actor.AGENT)
    return new


def test_viewer_is_not_complete_while_a_newer_attempt_has_lines(member_client, job, node):
    """The race of the API's follow mode, through the job page's own viewer: the page was
    opened on attempt 1, the job failed, restarted and finished before the next poll. The
    poll for attempt 1 must not say `complete` (the viewer would stop and never show attempt
    2); it points to attempt 2 instead, whose lines the viewer then reads from the start."""
    from jobs.actions.transitions import transition
    from policy.statuses import Actor

    pod = place(job, node)[0]
    add_log(pod, 0, ["attempt one"])
    Pod.objects.filter(pk=pod.pk).update(started_at=timezone.now())  # it ran
    viewer = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text).by_id("log-lines")
    source, after = viewer.attrs["data-src"], viewer.attrs["data-after"]
    assert "attempt=1" in source and "data-live" in viewer.attrs
    with time_machine.travel(timezone.now(), tick=False) as clock:
        new = _restart(job, node, pod, at=timezone.now())
        add_log(new, 0, ["attempt two"])
        transition(job, JobStatus.COMPLETED, reason="done", actor=Actor.AGENT)
        # Attempt 1's worker just ended: its last lines may still arrive, stay on it.
        page = _follow(member_client, f"{source}&after={after}")
        assert page["complete"] is False and page.get("newer_attempt") is None
        clock.shift(timedelta(seconds=1))
        page = _follow(member_client, f"{source}&after={after}")
        assert page["complete"] is False and page.get("newer_attempt") is None
        # Attempt 1's end of stream acknowledged by the agent: pointed to attempt 2.
        Pod.objects.filter(pk=pod.pk).update(logs_delivered=True)
        page = _follow(member_client, f"{source}&after={after}")
        assert page["lines"] == [] and page["complete"] is False
        assert page["newer_attempt"] == 2
        # The viewer moves to the newer attempt (console.js) and reads it from the start;
        # its worker ended and its agent acknowledged the end of its log.
        Pod.objects.filter(pk=new.pk).update(
            status="Succeeded", finished_at=timezone.now(), logs_delivered=True
        )
        moved = _follow(member_client, source.replace("attempt=1", "attempt=2") + "&after=-1")
        assert [line["text"] for line in moved["lines"]] == ["attempt two"]
        assert moved["complete"] is True and moved["newer_attempt"] is None


def test_viewer_keeps_following_between_attempts(member_client, job, node):
    """Restarting (Pending, then Starting) before the new attempt's worker exists: the job
    is not final, so the viewer keeps polling the old attempt and is pointed on later."""
    from jobs.actions.transitions import transition
    from policy.statuses import Actor, PodStatus

    pod = place(job, node)[0]
    add_log(pod, 0, ["attempt one"])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED, finished_at=timezone.now())
    transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.AGENT, attempt=2)
    url = reverse("web:logs", args=[job.pk]) + "?attempt=1&rank=0&format=json&after=0"
    with time_machine.travel(timezone.now() + timedelta(seconds=60), tick=False):
        page = _follow(member_client, url)
        assert page["lines"] == [] and page["next_after"] == 0
        assert page["complete"] is False and page.get("newer_attempt") is None
        # The page opened now shows attempt 1 (the newest with a worker) and follows it.
        html = member_client.get(reverse("web:detail", args=[job.pk])).text
        assert "data-live" in Tree(html).by_id("log-lines").attrs


def test_old_attempt_tab_is_history_and_does_not_follow(member_client, job, node):
    """A tab opened on an attempt that already has a newer one (its worker ended and its
    lines had time to arrive) shows it as it is: nothing more can come, so no polling, and
    the viewer does not wander off to another attempt under that tab."""
    pod = place(job, node)[0]
    add_log(pod, 0, ["attempt one"])
    with time_machine.travel(timezone.now() - timedelta(hours=1), tick=False):
        new = _restart(job, node, pod, at=timezone.now())
    add_log(new, 0, ["attempt two"])
    url = reverse("web:detail", args=[job.pk])
    old = Tree(member_client.get(url + "?attempt=1&rank=0").text)
    assert _shown(old) == ["attempt one"]
    assert "data-live" not in old.by_id("log-lines").attrs
    newest = Tree(member_client.get(url).text)
    assert _shown(newest) == ["attempt two"] and "data-live" in newest.by_id("log-lines").attrs


def test_default_log_is_the_workers_newest_attempt(
    member_client, researcher, workspace, quota, node
):
    """After an Asynchronous restart only the failed worker has the newer attempt: worker
    0's log is still its attempt 1, which the page shows and follows by default."""
    from policy.statuses import PodStatus
    from tests.web.conftest import submit

    job = submit(researcher, workspace, quota, workers=2)
    pods = place(job, node)
    add_log(pods[0], 0, ["rank zero, attempt one"])
    Pod.objects.filter(pk=pods[1].pk).update(status=PodStatus.FAILED)
    Pod.objects.create(
        job=job, attempt=2, rank=1, node=node, gpu_indices=free_gpus(node, 1), gpus=1,
        charged_quota=job.quota, status=PodStatus.RUNNING,
    )  # fmt: skip
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    viewer = tree.by_id("log-lines")
    assert _shown(tree) == ["rank zero, attempt one"] and "data-live" in viewer.attrs
    assert "attempt=1&rank=0" in viewer.attrs["data-src"]
    page = _follow(member_client, reverse("web:logs", args=[job.pk]) + "?format=json&after=-1")
    assert [line["text"] for line in page["lines"]] == ["rank zero, attempt one"]
