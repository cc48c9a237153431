"""The job page: Workers GPUs column, honest worker and job reasons, expected start, charts
and log viewer markup, the metrics endpoint's access; the site's Content-Security-Policy."""

import pytest
from django.urls import reverse
from django.utils import timezone

from cluster.models import Node, NodeState
from jobs.actions.transitions import transition
from jobs.logview import NODE_LOST_GAP
from jobs.models import Pod
from policy.statuses import Actor, JobStatus, PodStatus
from tests.web.conftest import Tree, finish, place, submit


def test_workers_show_the_gpu_count_with_indices_on_hover(
    member_client, researcher, workspace, quota, node
):
    job = submit(researcher, workspace, quota, gpus_per_worker=1)
    (pod,) = place(job, node)
    Pod.objects.filter(pk=pod.pk).update(gpu_indices=[4])  # the one GPU it got is number 4
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    (cell,) = [e for e in tree.elements if e.attrs.get("title") == "GPU indices: 4"]
    assert cell.text == "1"  # one GPU, not "GPUs 4"


def test_a_failed_worker_shows_its_tail_as_an_error(member_client, job, node):
    (pod,) = place(job, node)
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED, error_message="CUDA error")
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    (tail,) = tree.containing("CUDA error")
    assert tail.attrs["class"] == "error-tail"


@pytest.mark.parametrize("status", [PodStatus.STOPPED, PodStatus.PREEMPTED, PodStatus.SUCCEEDED])
def test_only_a_failed_worker_shows_its_output_tail(member_client, job, node, status):
    """The README: only a failed worker's output tail is shown (a stopped or preempted one's
    last lines are in its log, not an error)."""
    (pod,) = place(job, node)
    Pod.objects.filter(pk=pod.pk).update(status=status, error_message="step 17 loss 0.3")
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert "step 17 loss 0.3" not in html


def test_a_stopping_job_says_it_is_stopping(member_client, job, node):
    place(job, node)
    member_client.post(reverse("web:stop", args=[job.pk]))
    detail = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    (reason,) = [e for e in detail.elements if e.attrs.get("class") == "reason"]
    assert reason.text == "stopping: stopped by alice"  # not "all workers running"
    listed = Tree(member_client.get(reverse("web:list")).text)
    (badge,) = [e for e in listed.elements if e.text == "Stopping…"]
    assert badge.attrs["title"] == "stopping: stopped by alice"


def test_a_waiting_job_shows_its_expected_start(member_client, researcher, workspace, quota, node):
    big = submit(researcher, workspace, quota, gpus_per_worker=8, max_runtime_seconds=3600)
    place(big, node)
    waiting = submit(researcher, workspace, quota, gpus_per_worker=8)
    transition(waiting, JobStatus.INQUEUE, reason="no node has 8 free", actor=Actor.SCHEDULER)
    html = member_client.get(reverse("web:detail", args=[waiting.pk])).text
    assert "Expected start:" in html and "an estimate" in html
    assert f"when job #{big.pk} ends (max runtime)" in html


def test_charts_and_log_viewer_markup(member_client, job, node):
    place(job, node)
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    charts = tree.by_id("charts")
    assert charts.attrs["data-src"] == reverse("web:metrics", args=[job.pk])
    keys = [e.attrs["data-chart"] for e in tree.elements if "data-chart" in e.attrs]
    assert keys == ["gpu_utilization", "gpu_memory", "progress", "step_rate", "metrics"]
    for control in ("data-log-search", "data-log-first-error", "data-log-times", "data-log-follow"):
        assert [e for e in tree.elements if control in e.attrs], control
    (raw,) = [e for e in tree.elements if e.text == "Download raw"]
    assert "download" in raw.attrs


def test_metrics_access(member_client, outsider_client, client, job, node):
    place(job, node)
    url = reverse("web:metrics", args=[job.pk])
    assert member_client.get(url).status_code == 200
    assert outsider_client.get(url).status_code == 404
    assert client.get(url).status_code == 302
    assert member_client.post(url).status_code == 405


def test_a_finished_job_has_no_live_charts(member_client, job, node):
    finish(job, node)
    assert member_client.get(reverse("web:metrics", args=[job.pk])).json()["live"] is False


def test_every_page_sends_a_strict_content_security_policy(member_client, job):
    for url in ("/", "/quotas/", "/jobs/", "/jobs/new/", f"/jobs/{job.pk}/", "/login/"):
        policy = member_client.get(url)["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["default-src"] == "'self'"
        # Only this site, plus the request's nonce where a page (the admin) uses one.
        assert directives["script-src"].split(" ")[0] == "'self'"
        assert directives["style-src"].split(" ")[0] == "'self'"
        assert directives["object-src"] == "'none'"
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "*" not in policy and "http" not in policy


def test_pages_have_no_inline_scripts_styles_or_handlers(member_client, job, node):
    place(job, node)
    for url in ("/", "/quotas/", "/jobs/", "/jobs/new/", f"/jobs/{job.pk}/", "/account/token/"):
        tree = Tree(member_client.get(url).text)
        for e in tree.elements:
            assert "style" not in e.attrs, (url, e.tag)
            assert not [a for a in e.attrs if a.startswith("on")], (url, e.tag)
            if e.tag == "script":
                assert e.attrs.get("src") and not e.text.strip(), url
            assert e.tag != "style", url


def test_expected_starts_are_shared_for_a_while(
    settings, researcher, workspace, quota, node, django_assert_num_queries
):
    from django.core.cache import cache

    from jobs.forecast import cached_expected_starts

    settings.FORECAST_CACHE_SECONDS = 10
    cache.clear()
    waiting = submit(researcher, workspace, quota, gpus_per_worker=2)
    first = cached_expected_starts({waiting.pk})
    assert first[waiting.pk].known
    with django_assert_num_queries(0):  # the page's next poll reuses it
        assert cached_expected_starts({waiting.pk}) == first
    cache.clear()


def test_the_api_gives_the_expected_start_labelled_an_estimate(
    api, researcher, workspace, quota, node
):
    running = submit(researcher, workspace, quota, gpus_per_worker=8, max_runtime_seconds=600)
    place(running, node)
    waiting = submit(researcher, workspace, quota, gpus_per_worker=8)
    detail = api.get(reverse("api:job", args=[waiting.pk])).json()
    assert detail["expected_start"]["estimate"] is True
    assert detail["expected_start"]["at"] and "max runtime" in detail["expected_start"]["basis"]
    assert api.get(reverse("api:job", args=[running.pk])).json()["expected_start"] is None
    listed = {j["id"]: j for j in api.get(reverse("api:jobs")).json()["jobs"]}
    assert listed[waiting.pk]["expected_start"] == detail["expected_start"]
    assert listed[running.pk]["expected_start"] is None


def test_pruned_checkpoints_are_counted_not_listed(member_client, job, node):
    from django.utils import timezone

    from jobs.models import Checkpoint

    place(job, node)
    now = timezone.now()
    for step in range(1, 28):
        Checkpoint.objects.create(
            job=job, attempt=1, step=step * 100, path=f"step-{step * 100}", size_bytes=10,
            checksum="ab", committed=True, pruned_at=None if step > 25 else now,
        )  # fmt: skip
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    paths = [e.text for e in tree.elements if e.tag == "code" and e.text.startswith("step-")]
    assert paths == ["step-2700", "step-2600"]
    (note,) = [e for e in tree.elements if "data-checkpoints-pruned" in e.attrs]
    assert note.text.startswith("25 older checkpoints pruned")


def test_every_time_on_the_job_page_says_utc(member_client, job, node):
    place(job, node)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    started = html[html.index("<dt>Started</dt>") :]
    assert started[: started.index("</dd>")].endswith(" UTC")


def test_a_chart_without_samples_says_what_is_true(
    member_client, researcher, workspace, quota, node
):
    """A live job's empty chart waits for samples; a finished one's had none recorded."""
    running = submit(researcher, workspace, quota, name="live")
    place(running, node)
    page = member_client.get(reverse("web:detail", args=[running.pk])).text
    assert "No samples yet." in page and "No samples were recorded." not in page
    done = finish(submit(researcher, workspace, quota, name="done", gpus_per_worker=0), node)
    page = member_client.get(reverse("web:detail", args=[done.pk])).text
    assert "No samples were recorded." in page and "No samples yet." not in page


@pytest.mark.parametrize(
    ("gpus", "cpus", "shown"),
    [(1, 1, "1 \u00d7 (1 GPU, 1 CPU, 4 GB)"), (2, 8, "1 \u00d7 (2 GPUs, 8 CPUs, 4 GB)")],
)
def test_the_workers_size_agrees_with_its_numbers(
    member_client, researcher, workspace, quota, gpus, cpus, shown
):
    size = {"gpus_per_worker": gpus, "cpus_per_worker": cpus, "memory_gb_per_worker": 4}
    job = submit(researcher, workspace, quota, **size)
    assert f"<dd>{shown}</dd>" in member_client.get(reverse("web:detail", args=[job.pk])).text


def test_the_log_viewer_of_a_job_not_placed_yet_follows_its_first_worker(
    member_client, researcher, workspace, quota, node
):
    """A page opened while the job waits must show the worker's lines once it runs, without
    a reload: its viewer already polls rank 0 of the current attempt (the browser test saw
    a page rendered a moment before the first placement stay empty)."""
    job = submit(researcher, workspace, quota)
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    box = tree.by_id("log-lines")
    src = reverse("web:logs", args=[job.pk]) + "?attempt=1&rank=0&format=json"
    assert (box.attrs.get("data-src"), box.attrs.get("data-after")) == (src, "-1")
    assert "data-live" in box.attrs
    empty = member_client.get(src + "&after=-1").json()
    assert empty == {
        "lines": [],
        "next_after": -1,
        "complete": False,
        "log_gap": "",
        "newer_attempt": None,
    }
    (pod,) = place(job, node)
    Pod.objects.filter(pk=pod.pk).update(log_next_seq=0)
    assert member_client.get(src + "&after=-1").status_code == 200
    # A job that ended before any placement has nothing to follow.
    transition(job, JobStatus.STOPPED, reason="stopped", actor=Actor.USER)
    Pod.objects.filter(job=job).delete()
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    assert "data-src" not in tree.by_id("log-lines").attrs


def test_a_log_cut_short_by_a_lost_node_says_so(member_client, researcher, workspace, quota, node):
    """The API's `log_gap` on the pages too: under the viewer (also once a live viewer sees
    the log end: its poll carries it) and at the end of the full log."""
    job = submit(researcher, workspace, quota)
    (pod,) = place(job, node)
    now = timezone.now()
    Pod.objects.filter(pk=pod.pk).update(
        status=PodStatus.LOST, started_at=now, finished_at=now, log_next_seq=0
    )
    transition(job, JobStatus.FAILED, reason="node lost", actor=Actor.SCHEDULER)
    Node.objects.filter(pk=node.pk).update(state=NodeState.LOST)
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    (notice,) = _gap_notices(tree)
    assert notice.text.strip() == NODE_LOST_GAP and "hidden" not in notice.attrs
    poll = reverse("web:logs", args=[job.pk]) + "?attempt=1&rank=0&format=json&after=-1"
    assert member_client.get(poll).json()["log_gap"] == NODE_LOST_GAP
    full = Tree(member_client.get(reverse("web:logs", args=[job.pk])).text)
    assert [e.text.strip() for e in _gap_notices(full)] == [NODE_LOST_GAP]
    # A whole log says nothing.
    Node.objects.filter(pk=node.pk).update(state=NodeState.READY)
    Pod.objects.filter(pk=pod.pk).update(logs_delivered=True)
    tree = Tree(member_client.get(reverse("web:detail", args=[job.pk])).text)
    assert "hidden" in _gap_notices(tree)[0].attrs


def _gap_notices(tree: Tree) -> list:
    return [e for e in tree.elements if "data-log-gap" in e.attrs]
