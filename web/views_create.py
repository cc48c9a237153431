"""The Create job page and its live hint.

The page lays `web.forms.JobForm` out in sections (basics, resources, Idle Resources,
Automatic Fault Tolerance behind "Modify Configuration", advanced); the quota picker says how
much of each quota is used and free (the scheduler's numbers, `policy.accounting`). While the
user types, HTMX posts the form to `job_plan_hint`, which validates it without saving and
asks the scheduler's own `plan()` what it would do with this job now: start (In Quota),
start on borrowed idle capacity (Not in Quota), or queue, and why, plus the expected start
from the same what-if run as every waiting job's (`jobs.forecast`).
"""

from dataclasses import replace

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from jobs.access import get_job_for_user
from jobs.folders import FolderRaced
from jobs.forecast import current_snapshot, expected_starts
from jobs.scheduler.cycle import plan_options
from policy import jobspec
from policy.accounting import QuotaUsage, account
from policy.jobspec import ADVANCED, FAULT_TOLERANCE
from policy.scheduler.model import JobSnap
from policy.scheduler.plan import plan
from policy.secrets import redacted_fields
from policy.statuses import IdleResources, JobStatus
from protocol import words
from web.forms import JobForm, initial_from_job
from web.views_templates import template_choices, template_initial

# The page's sections (policy.jobspec.PAGE): Automatic Fault Tolerance folds (its first field
# turns it on) and Advanced comes last; the others, in order, before them.
_PAGE = dict(jobspec.PAGE)
SECTIONS = [
    (title, names) for title, names in jobspec.PAGE if title not in (FAULT_TOLERANCE, ADVANCED)
]
FT_TOGGLE, *FT_FIELDS = _PAGE[FAULT_TOLERANCE]
REQUIRED = [f.name for f in jobspec.FIELDS if f.required]  # until given, the hint waits
WHAT_IF_ID = 2**62  # the job being typed: after every real job in admission order


def _describe_quotas(form: JobForm, snapshot) -> None:
    """Quota choices labelled with the scheduler's view of them: "3/4 GPUs used, 1 free"."""
    usage = account(snapshot).quotas
    choices = []
    for value, label in form.fields["quota"].widget.choices:
        quota = usage.get(int(value)) if str(value).isdigit() else None
        if quota is not None:
            label = f"{label} — {quota_hint(quota)}"
            if quota.waiting:
                label += f", {quota.waiting} waiting"
        choices.append((value, label))
    form.fields["quota"].widget.choices = choices


def quota_hint(quota: QuotaUsage) -> str:
    """Used and free of the guarantee its jobs' pods use: a tree quota's own guarantee, and
    its subtree's limit where it has one (docs/quota-tree.md "Accounting")."""
    if not quota.in_tree:
        return f"{quota.used}/{quota.size} {words.gpu_noun(quota.size)} used, {quota.free} free"
    hint = f"{quota.used}/{quota.own} own {words.gpu_noun(quota.own)} used, {quota.free} free"
    if quota.max_gpus is not None:
        hint += f", limit {quota.max_gpus} ({quota.subtree_used} in use)"
    return hint


def _layout(form: JobForm) -> dict:
    form.fields[FT_TOGGLE].widget.attrs["data-ft-toggle"] = ""
    ft_errors = any(form[name].errors for name in FT_FIELDS)
    ft_on = bool(form[FT_TOGGLE].value())
    return {
        "sections": [
            (title, [form[name] for name in names if name != "workspace" or form.show_workspace])
            for title, names in SECTIONS
        ],
        "ft_toggle": form[FT_TOGGLE],
        "ft_fields": [form[name] for name in FT_FIELDS],
        "ft_open": ft_on and (ft_errors or form.is_bound or bool(form.initial)),
        "advanced": [form[name] for name in _PAGE[ADVANCED]],
    }


@login_required
@require_http_methods(["GET", "POST"])
def job_create(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = JobForm(request.POST, user=request.user)
        if form.is_valid():
            try:
                job = form.create_job()
            except FolderRaced as exc:  # taken by a submission that committed meanwhile
                form.add_error(exc.field, str(exc))
            else:
                messages.success(request, f"Job #{job.pk} submitted.")
                return redirect("web:detail", pk=job.pk)
    else:
        initial = {}
        clone = request.GET.get("clone", "")
        if clone.isascii() and clone.isdigit():
            # A copy never carries a secret's value: the form asks for it again.
            initial = redacted_fields(initial_from_job(get_job_for_user(request.user, clone)))
        chosen = request.GET.get("template", "")
        if chosen.isascii() and chosen.isdigit():
            initial = template_initial(request.user, chosen)
        form = JobForm(user=request.user, initial=initial)
    _describe_quotas(form, current_snapshot())
    context = {
        "form": form,
        "cloning": bool(form.initial),
        "templates": template_choices(request.user),
        "template_chosen": request.GET.get("template", ""),
    } | _layout(form)
    return render(request, "web/jobs/new.html", context)


def what_if(form: JobForm, snapshot, now) -> dict:
    """What the scheduler would do with the (valid, unsaved) job of `form` right now."""
    data = form.cleaned_data
    quota = form.quota_obj
    job = JobSnap(
        id=WHAT_IF_ID,
        quota_id=quota.pk,
        workers=data["workers"],
        gpus_per_worker=data["gpus_per_worker"],
        cpus_per_worker=data["cpus_per_worker"],
        memory_gb_per_worker=data["memory_gb_per_worker"],
        priority=data["priority"],
        submitted_at=now,
        status=JobStatus.PENDING,
        idle_resources=IdleResources(data["idle_resources"]),
        name=data["name"],
    )
    snapshot = replace(snapshot, jobs=(*snapshot.jobs, job))
    decided = plan(snapshot, now, plan_options())
    names = {q.id: q.name for q in snapshot.quotas}
    result = {"quota": quota.name, "total_gpus": job.total_gpus}
    admission = decided.admission_for(job.id)
    if admission is not None:
        result |= {
            "outcome": "start" if admission.in_quota else "borrow",
            # The lender is said separately: only where it would be placed.
            "where": admission.where or admission.reason,
            "lender": ", ".join(  # a pooled idle job names each of its lenders
                names.get(q, "") for q in dict.fromkeys(admission.charged_gpus())
            ),
        }
        return result
    decision = decided.decision_for(job.id)
    victims = [p for p in decided.preemptions if p.for_job_id == job.id]
    result |= {
        "outcome": "queue",
        "reason": decision.reason if decision else "",
        "position": decision.position if decision else None,
        "victims": len(victims),
        "estimate": expected_starts(snapshot, now, targets={job.id}).get(job.id),
    }
    return result


def warnings_for(data: dict) -> list[str]:
    """Advice that does not stop a submission."""
    warnings = []
    if data.get("idle_resources") != IdleResources.OFF and not data.get("checkpoint_dir"):
        warnings.append(
            "Idle jobs are preempted whenever the lending quota needs its GPUs back, and this "
            "job names no checkpoint folder. Save checkpoints (agents.sdk.checkpoint) to a "
            "folder named under Advanced"
            + (
                "."
                if data.get("fault_tolerance")
                else ", and turn on Automatic Fault Tolerance so that a preempted run "
                "resumes instead of ending Preempted."
            )
        )
    return warnings


@login_required
@require_POST
def job_plan_hint(request: HttpRequest) -> HttpResponse:
    """The live hint under the form (HTMX): validates without saving; writes nothing."""
    form = JobForm(request.POST, user=request.user)
    context: dict = {}
    if form.is_valid():
        now = timezone.now()
        context = {"hint": what_if(form, current_snapshot(), now), "now": now}
        context["warnings"] = warnings_for(form.cleaned_data)
    elif not all(request.POST.get(name, "").strip() for name in REQUIRED):
        context = {"incomplete": True}
    else:
        problems = [
            f"{form.fields[name].label or name.capitalize()}: {errors[0]}"
            if name != "__all__"
            else errors[0]
            for name, errors in form.errors.items()
        ]
        context = {"problems": problems}  # every one: a summary of 3 of 6 misleads
    return render(request, "web/jobs/_plan_hint.html", context)
