"""Researcher pages, mounted at /jobs/ (console.urls)."""

from django.urls import path

from web import views, views_compare, views_create, views_templates

app_name = "web"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views_create.job_create, name="create"),
    path("new/hint/", views_create.job_plan_hint, name="create-hint"),
    path("templates/", views_templates.template_list, name="templates"),
    path("templates/<int:pk>/delete/", views_templates.template_delete, name="template-delete"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/logs/", views.job_logs, name="logs"),
    path("<int:pk>/logs/raw/", views.job_logs_raw, name="logs-raw"),
    path("<int:pk>/metrics/", views.job_metrics, name="metrics"),
    path("<int:pk>/stop/", views.job_stop, name="stop"),
    path("<int:pk>/restart/", views.job_restart, name="restart"),
    path("<int:pk>/compare/", views_compare.job_compare, name="compare"),
    path("<int:pk>/save-template/", views_templates.job_save_template, name="save-template"),
]
