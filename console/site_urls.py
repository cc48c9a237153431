"""Site pages at the root: home, login/logout, API token, health check."""

from django.contrib.auth import views as auth_views
from django.urls import path

from console import views
from notifications import views as notification_views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/token/", views.api_token, name="api-token"),
    path("healthz", views.healthz, name="healthz"),
    path("account/notifications/", notification_views.settings_page, name="notifications"),
]
