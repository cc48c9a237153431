"""Site pages at the root: the dashboard (home), quotas, login/logout, API token, health."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import health, metrics
from web import account, oidc, overview, views_usage
from web import notifications as notification_views

urlpatterns = [
    path("", overview.dashboard, name="home"),
    path("quotas/", overview.quotas_page, name="quotas"),
    path("quotas/", include("web.urls_quotas")),
    path("usage/", views_usage.usage_page, name="usage"),
    path("usage/charts/", views_usage.usage_charts, name="usage-charts"),
    path("login/", account.LoginView.as_view(), name="login"),
    # Sign-in with the organisation's identity provider (docs/sign-in.md): 404 while off.
    path("login/oidc/", oidc.ProviderLogin.as_view(), name="oidc-login"),
    path("login/oidc/callback/", oidc.ProviderCallback.as_view(), name="oidc-callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/token/", account.api_token, name="api-token"),
    path("account/notifications/", notification_views.settings_page, name="notifications"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("favicon.ico", health.favicon, name="favicon"),
]
