"""Compare with run… (docs/results.md): what differs between two runs' identities — the
effective configuration key by key and what the runtime resolved. The same list as
`GET /api/v1/jobs/{id}/compare` (jobs.result_reads.run_comparison)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from jobs.access import MAX_ID, get_job_for_user
from jobs.result_reads import run_comparison
from policy.run_compare import shown


@login_required
@require_GET
def job_compare(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_job_for_user(request.user, pk)
    raw = request.GET.get("with", "").strip()
    if not raw and job.cloned_from_id:
        raw = str(job.cloned_from_id)  # a restart or clone: against its origin
    context: dict = {"job": job, "with_value": raw[:20], "error": "", "comparison": None}
    if raw:
        ascii_number = raw.isascii() and raw.isdigit()  # "²" is a digit int() refuses
        other_id = int(raw) if ascii_number and 0 < int(raw) <= MAX_ID else None
        if other_id is None:
            context["error"] = "Give the number of a job (run) to compare with."
        else:
            other = get_job_for_user(request.user, other_id)  # 404: not one the user sees
            comparison = run_comparison(job, other)
            comparison["rows"] = [
                (c["key"], shown(c["this"], c["this_set"]), shown(c["other"], c["other_set"]))
                for c in comparison["changes"]
            ]
            context |= {"comparison": comparison, "other": other}
    status = 400 if context["error"] else 200
    return render(request, "web/jobs/compare.html", context, status=status)
