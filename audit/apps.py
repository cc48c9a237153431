from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from audit import subscribers

        user_login_failed.connect(subscribers.on_login_failed, dispatch_uid="audit-login-failed")
