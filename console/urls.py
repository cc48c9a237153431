from django.contrib import admin
from django.urls import include, path

from accounts.login_limits import admin_login_form

# The admin's sign-in is limited like the console's (accounts.login_limits).
admin.site.login_form = admin_login_form()

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/agent/", include("agents.urls")),
    path("api/v1/", include("api.urls")),
    path("jobs/", include("web.urls")),
    path("", include("console.site_urls")),
]

# An exception raised outside a view (a middleware's session or user lookup) that is a lost
# database connection is a 503 too, retried when safe (console.dbretry).
handler500 = "console.dbretry.server_error"
