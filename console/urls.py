from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/agent/", include("agents.urls")),
    path("api/v1/", include("api.urls")),
    path("jobs/", include("jobs.urls")),
    path("", include("console.site_urls")),
]
