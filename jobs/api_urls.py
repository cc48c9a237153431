"""Researcher API, mounted at /api/v1/ (console.urls). A trailing slash is optional."""

from django.urls import re_path

from accounts.api_auth import not_found
from jobs import api

urlpatterns = [
    re_path(r"^jobs/?$", api.jobs_collection, name="api-jobs"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/?$", api.job_detail, name="api-job"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/logs/?$", api.job_logs, name="api-job-logs"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/stop/?$", api.job_stop, name="api-job-stop"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/restart/?$", api.job_restart, name="api-job-restart"),
    re_path(r"^nodes/?$", api.nodes_collection, name="api-nodes"),
    # Anything else under /api/v1/ answers in the API's error shape, not an HTML page.
    re_path(r"^.*$", not_found),
]
