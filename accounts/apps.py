from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and API tokens"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from accounts import login_limits

        user_login_failed.connect(login_limits.note_failure, dispatch_uid="login-limits-fail")
        user_logged_in.connect(login_limits.note_success, dispatch_uid="login-limits-ok")

        # Cached tokens carry their user (accounts.api_auth): any save or delete of either
        # (the admin's edits, a deactivated user) makes every process read them again.
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from accounts.actions import TOKENS_VERSION
        from accounts.models import ApiToken
        from accounts.versions import begin_request, bump, end_request

        def stale(**kwargs) -> None:
            bump(TOKENS_VERSION)

        for model in (ApiToken, get_user_model()):
            post_save.connect(stale, sender=model, weak=False, dispatch_uid=f"tokens-{model}")
            post_delete.connect(stale, sender=model, weak=False, dispatch_uid=f"tokens-d-{model}")

        # The caches' versions: read once per request (accounts.versions).
        from django.core.signals import request_finished, request_started

        request_started.connect(begin_request, dispatch_uid="versions-begin")
        request_finished.connect(end_request, dispatch_uid="versions-end")
