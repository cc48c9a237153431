"""Mounted at /api/v1/agent/ by console/urls.py."""

from django.urls import path, re_path

from agents import views

app_name = "agents"

urlpatterns = [
    path("register/", views.register, name="register"),
    path("heartbeat/", views.heartbeat, name="heartbeat"),
    path("logs/", views.logs, name="logs"),
    path("wait/", views.wait, name="wait"),
    re_path(r"^(?P<path>[\s\S]*)$", views.not_found),  # any path, a newline in it too
]
