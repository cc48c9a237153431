"""Researcher pages: job list, create form, detail with workers, events and live logs.

Function views, thin over web.forms / jobs.actions. With HTMX a page polls a named partial
of its own template (`page.html#name`) and gets 286 (stop polling) once nothing can change;
without HTMX every page is plain links and POST-redirect-GET forms.
"""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from jobs import logview
from jobs.access import get_job_for_user, member_workspace_ids, visible_jobs
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.submit import JobStillActive, ResumeRefused, resubmit_job
from jobs.actions.transitions import TransitionConflict
from jobs.filters import JobFilters, filter_jobs, parse_job_filters, with_live_resources
from jobs.forecast import cached_expected_starts
from jobs.models import Job, Pod
from jobs.paging import BadPageRequest, page_of_jobs
from jobs.result_reads import result_report
from jobs.runtime import pod_spans, running_spans
from policy.display import is_live, running_time
from policy.rendezvous import job_roles, rendezvous_of
from policy.secrets import redact_env
from policy.statuses import FINAL_JOB_STATUSES, WAITING_JOB_STATUSES, IdleResources, JobStatus
from protocol import limits
from web import charts as metrics
from web.forms import JobForm, initial_from_job

CHECKPOINTS_SHOWN = 10  # newest live checkpoints on the job page


def _partial(request: HttpRequest, template: str, context: dict, *, live: bool) -> HttpResponse:
    response = render(request, template, context)
    return response if live else HttpResponseStopPolling(response.content)


def _list_choices(user) -> dict:
    """What the filter form offers: the user's quotas and the members of their workspaces."""
    from django.contrib.auth import get_user_model

    from quotas.access import workspace_quotas

    members = (
        get_user_model()
        .objects.filter(memberships__workspace_id__in=member_workspace_ids(user))
        .distinct()
        .order_by("username")
        .values_list("username", flat=True)
    )
    return {
        "quota_names": list(workspace_quotas(user).order_by("name").values_list("name", flat=True)),
        "owner_names": list(members[:200]),
        "statuses": [s.value for s in JobStatus],
        "idle_modes": [m.value for m in IdleResources],
        "sorts": SORT_LABELS,
        "since_choices": SINCE_LABELS,
    }


SORT_LABELS = [
    ("-created", "Newest first"),
    ("created", "Oldest first"),
    ("-priority", "Highest priority"),
    ("name", "Name"),
    ("-gpus", "Most GPUs"),
]
SINCE_LABELS = [("1h", "Last hour"), ("24h", "Last 24 hours"), ("7d", "Last 7 days")]
SINCE_LABELS.append(("30d", "Last 30 days"))


@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    error = ""
    try:
        filters = parse_job_filters(request.GET)
        jobs = filter_jobs(
            visible_jobs(request.user), filters, user=request.user, now=timezone.now()
        )
        page, next_cursor = page_of_jobs(
            with_live_resources(jobs),
            cursor=request.GET.get("cursor"),
            limit=50,
            sort=filters.sort,
        )
    except BadPageRequest as exc:
        error, page, next_cursor = exc.message, [], None
        filters = JobFilters()
    live = any(is_live(job.status) for job in page)
    now, spans = timezone.now(), running_spans(job.pk for job in page)
    for job in page:
        job.running_for = running_time(spans.get(job.pk, ()), job.finished_at or now)
    waiting = {job.pk for job in page if job.status in WAITING_JOB_STATUSES}
    if waiting:
        estimates = cached_expected_starts(waiting)
        for job in page:
            job.expected_start = estimates.get(job.pk)
    params = filters.params()
    context = {
        "jobs": page,
        "next_cursor": next_cursor,
        "filters": filters,
        "query": urlencode(params),
        "status": params.get("status", ""),
        "error": error,
        "live": live,
    }
    if request.htmx:
        return _partial(request, "web/jobs/list.html#rows", context, live=live)
    context |= _list_choices(request.user)
    return render(request, "web/jobs/list.html", context, status=400 if error else 200)


def _int_arg(request: HttpRequest, name: str, default: int | None) -> int | None:
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    if not (raw.isascii() and raw.lstrip("-").isdigit()) or len(raw) > 18:
        raise ValueError(name)
    return int(raw)


def _log_context(job: Job, pod: Pod | None, lines: list, *, caught_up: bool) -> dict:
    after = lines[-1].seq if lines else -1
    state = logview.follow(job, pod, caught_up=caught_up, now=timezone.now())
    return {
        "log_pod": pod,
        "log_lines": lines,
        "log_after": after,
        "log_complete": state.complete,
        "log_newer_attempt": state.newer_attempt,
        "log_gap": state.gap,
        # A page opened on an attempt that already has a newer one shows it as history: its
        # worker has ended and its lines are all here, and the viewer stays on that tab.
        "log_live": not state.complete and state.newer_attempt is None,
    }


@login_required
@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_job_for_user(request.user, pk)
    pods = list(
        Pod.objects.filter(job=job)
        .select_related("node", "charged_quota")
        .order_by("-attempt", "rank")
    )
    event_count = job.events.count()
    events = list(
        job.events.select_related("user").order_by("-created_at", "-id")[: limits.EVENTS_SHOWN]
    )
    events.reverse()
    live = is_live(job.status)
    job.running_for = running_time(pod_spans(pods), job.finished_at or timezone.now())
    roles = job_roles(job)  # workers grouped by role (docs/distributed.md)
    for pod in pods:
        pod.role = roles[pod.rank] if pod.rank < len(roles) else ""
    context = {
        "job": job,
        "env_shown": redact_env(job.env or {}),  # secrets never shown (policy.secrets)
        "pods": pods,
        "role_counts": {role: roles.count(role) for role in dict.fromkeys(roles)},
        "rendezvous": rendezvous_of(job),
        "events": events,
        "events_hidden": max(event_count - limits.EVENTS_SHOWN, 0),
        # The checkpoints one can resume from; the pruned ones (folders the SDK deleted)
        # only as a count: a long fault-tolerant job has hundreds.
        "checkpoints": list(job.checkpoints.filter(pruned_at__isnull=True)[:CHECKPOINTS_SHOWN]),
        "checkpoints_pruned": job.checkpoints.filter(pruned_at__isnull=False).count(),
        "live": live,
        "expected_start": (
            cached_expected_starts({job.pk}).get(job.pk)
            if job.status in WAITING_JOB_STATUSES
            else None
        ),
    }
    try:
        rank = _int_arg(request, "rank", 0)
        attempt = _int_arg(request, "attempt", None)
        units_after = _int_arg(request, "units_after", 0) or 0
    except ValueError:
        return HttpResponseBadRequest("rank, attempt and units_after must be integers")
    # The result (docs/results.md): its verdict, identity and one page of units.
    context["result"] = result_report(job, after=units_after)
    if request.htmx:
        return _partial(request, "web/jobs/detail.html#live", context, live=live)
    pod = logview.pick_pod(job, rank=rank, attempt=attempt)
    lines = logview.read_tail(pod) if pod else []
    # The tail holds the newest lines stored; the viewer continues after the last one.
    context |= _log_context(job, pod, lines, caught_up=True)
    context["log_truncated"] = bool(lines) and lines[0].seq > 0
    context["chart_titles"] = metrics.CHARTS
    context["workers"] = sorted({(p.attempt, p.rank) for p in pods}, key=lambda w: (-w[0], w[1]))
    context["log_attempt"] = pod.attempt if pod else job.attempt
    context["log_rank"] = pod.rank if pod else (rank or 0)
    return render(request, "web/jobs/detail.html", context)


def _line_json(line: logview.LogLine) -> dict:
    """A line as the log viewer shows it: control sequences stripped (it is inserted as
    text, never as HTML), with the time the console received it."""
    return {"seq": line.seq, "text": line.display, "at": line.at.isoformat() if line.at else None}


@login_required
@require_GET
def job_logs(request: HttpRequest, pk: int) -> HttpResponse:
    """Log lines after `?after=<seq>`: JSON for the job page's live viewer
    (`format=json`), or a plain page of them (the "Full log" link; works without JS)."""
    job = get_job_for_user(request.user, pk)
    try:
        rank = _int_arg(request, "rank", 0)
        attempt = _int_arg(request, "attempt", None)
        after = _int_arg(request, "after", -1)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc} must be an integer")
    pod = logview.pick_pod(job, rank=rank, attempt=attempt)
    missing = logview.missing_pod(job, pod, rank=rank, attempt=attempt)
    if missing:
        raise Http404(missing)
    as_json = request.GET.get("format") == "json"
    limit = logview.DEFAULT_LIMIT if as_json else logview.MAX_LIMIT
    lines = logview.read_after(pod, after, limit) if pod else []
    context = {"job": job} | _log_context(job, pod, lines, caught_up=len(lines) < limit)
    if not lines:
        context["log_after"] = after
    if as_json:
        return JsonResponse(
            {
                "lines": [_line_json(line) for line in lines],
                "next_after": context["log_after"],
                "complete": context["log_complete"],
                # Why the worker's log may lack its last lines (its node was lost), once
                # ended: the viewer shows it under the log.
                "log_gap": context["log_gap"],
                # The viewer moves there (after=-1) once a poll brings no more lines.
                "newer_attempt": context["log_newer_attempt"],
            }
        )
    context["log_attempt"] = pod.attempt if pod else attempt or job.attempt
    context["log_rank"] = pod.rank if pod else rank
    context["more"] = len(lines) >= limit
    return render(request, "web/jobs/logs.html", context)


@login_required
@require_GET
def job_metrics(request: HttpRequest, pk: int) -> JsonResponse:
    """The job page's chart data (GPU utilisation and memory, progress, step rate, metrics)."""
    job = get_job_for_user(request.user, pk)
    return JsonResponse(metrics.job_series(job) | {"live": is_live(job.status)})


@login_required
@require_GET
def job_logs_raw(request: HttpRequest, pk: int) -> HttpResponse:
    """The stored bytes of one worker's log as a download (never rendered as HTML)."""
    job = get_job_for_user(request.user, pk)
    try:
        rank = _int_arg(request, "rank", 0)
        attempt = _int_arg(request, "attempt", None)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc} must be an integer")
    pod = logview.pick_pod(job, rank=rank, attempt=attempt)
    missing = logview.missing_pod(job, pod, rank=rank, attempt=attempt)
    if missing:  # a worker that never runs: not an empty file (one not placed yet is)
        raise Http404(missing)
    response = StreamingHttpResponse(
        logview.raw_text(pod) if pod else iter(()), content_type="text/plain; charset=utf-8"
    )
    name = f"job-{job.pk}-attempt-{pod.attempt if pod else job.attempt}-worker-{rank}.log"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_POST
def job_stop(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_job_for_user(request.user, pk)
    try:
        request_stop(job, user=request.user)
    except JobNotActive as exc:
        messages.error(request, f"Cannot stop job #{job.pk}: {exc}.")
    except TransitionConflict:
        messages.error(request, f"Job #{job.pk} changed meanwhile; try again.")
    else:
        messages.success(request, f"Stop requested for job #{job.pk}.")
    return redirect("web:detail", pk=job.pk)


@login_required
@require_POST
def job_restart(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_job_for_user(request.user, pk)
    if job.status not in FINAL_JOB_STATUSES:
        messages.error(request, f"Job #{job.pk} is still {job.status}; stop it first.")
        return redirect("web:detail", pk=job.pk)
    # A restart is a new job: creation rules still apply (see api.jobs.restart_job).
    form = JobForm(initial_from_job(job), user=request.user)
    if not form.is_valid():
        problems = "; ".join(str(m) for msgs in form.errors.values() for m in msgs)
        messages.error(request, f"Cannot restart job #{job.pk}: {problems}")
        return redirect("web:detail", pk=job.pk)
    # "Start from scratch" (docs/results.md): a folder of its own, nothing resumed or carried.
    from_scratch = request.POST.get("from_scratch") == "1"
    try:
        new_job = resubmit_job(job, user=request.user, from_scratch=from_scratch)
    except (JobStillActive, ResumeRefused) as exc:
        messages.error(request, f"Cannot restart job #{job.pk}: {str(exc).rstrip('.')}.")
        return redirect("web:detail", pk=job.pk)
    how = "from scratch " if from_scratch else ""
    messages.success(request, f"Job #{job.pk} restarted {how}as job #{new_job.pk}.")
    return redirect("web:detail", pk=new_job.pk)
