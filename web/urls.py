"""Researcher pages, mounted at /jobs/ (console.urls)."""

from django.urls import path

from web import views, views_create

app_name = "web"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views_create.job_create, name="create"),
    path("new/hint/", views_create.job_plan_hint, name="create-hint"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/logs/", views.job_logs, name="logs"),
    path("<int:pk>/logs/raw/", views.job_logs_raw, name="logs-raw"),
    path("<int:pk>/metrics/", views.job_metrics, name="metrics"),
    path("<int:pk>/stop/", views.job_stop, name="stop"),
    path("<int:pk>/restart/", views.job_restart, name="restart"),
]
