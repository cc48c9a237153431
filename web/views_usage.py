"""The Usage page (docs/usage-history.md): GPU-hours of a period by quota, workspace, user
or GPU type, charts of use against guarantee and of the cluster's utilisation, top users,
idle-held GPU-hours, and the same rows as CSV. Mounted at /usage/ (console.site_urls)."""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from usage.report import UsageRequest, csv_text, scope_for
from usage.report import usage_page as report_page
from web.usage_page import UsageForm, chart_series, group_totals, top_users, totals_of

GROUPS_SHOWN = 100  # the most used groups in the table; the CSV has every one


def _form(request: HttpRequest):
    form = UsageForm(request.GET)
    form.is_valid()  # field errors show on the form; the defaults fill what is missing
    wanted = form.usage_request(timezone.now().date()) if not form.errors else None
    return form, wanted


def _pages(query: dict, wanted: UsageRequest, next_offset: int | None) -> dict:
    """Per job: links to the pages before and after (plain links, HTMX-boosted)."""
    if wanted.group_by != "job":
        return {}
    page = wanted.offset // wanted.limit + 1
    out: dict = {"page": page}
    if page > 1:
        out["previous_url"] = "?" + urlencode(query | {"page": page - 1})
    if next_offset is not None:
        out["next_url"] = "?" + urlencode(query | {"page": page + 1})
    return out


@login_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    form, wanted = _form(request)
    context: dict = {"form": form, "wanted": wanted}
    if wanted is not None:
        scope = scope_for(request.user)
        if request.GET.get("format") == "csv":
            rows = report_page(scope, wanted)[0]
            response = HttpResponse(csv_text(rows), content_type="text/csv; charset=utf-8")
            name = f"usage-{wanted.group_by}-{wanted.since:%Y%m%d}-{wanted.until:%Y%m%d}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        rows, next_offset = report_page(scope, wanted, by_period=False, shown=GROUPS_SHOWN)
        query = {k: v for k, v in request.GET.items() if k != "format"}
        groups = group_totals(rows, ordered=True)  # most used first (per job: the page's)
        context |= _pages(query, wanted, next_offset)
        context |= {
            "groups": groups[:GROUPS_SHOWN],
            "groups_hidden": max(len(groups) - GROUPS_SHOWN, 0),
            "totals": totals_of(rows),
            "top": top_users(scope, wanted),
            "csv_url": "?" + urlencode(query | {"format": "csv"}),
            "charts_url": "charts/?" + urlencode(query),  # relative to /usage/
        }
    status = 400 if form.errors else 200
    template = "web/usage/usage.html#report" if request.htmx else "web/usage/usage.html"
    return render(request, template, context, status=status)


@login_required
@require_GET
def usage_charts(request: HttpRequest) -> JsonResponse:
    """The page's chart data (uPlot, static/console.js): the quotas shown, all GPU types."""
    form, wanted = _form(request)
    if wanted is None:
        return JsonResponse(
            {"error": {"code": "validation_error", "fields": form.errors}}, status=400
        )
    return JsonResponse(chart_series(scope_for(request.user), wanted, timezone.now()))
