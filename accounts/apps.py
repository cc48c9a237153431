from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and API tokens"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from accounts import login_limits

        user_login_failed.connect(login_limits.note_failure, dispatch_uid="login-limits-fail")
        user_logged_in.connect(login_limits.note_success, dispatch_uid="login-limits-ok")
