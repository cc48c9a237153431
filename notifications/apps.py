from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Cached rules carry their user's e-mail (notifications.outbox): any save or delete
        # of a rule or a user makes every process read them again.
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from accounts.versions import bump
        from notifications.models import NotificationRule
        from notifications.outbox import RULES_VERSION

        def stale(**kwargs) -> None:
            bump(RULES_VERSION)

        for model in (NotificationRule, get_user_model()):
            post_save.connect(stale, sender=model, weak=False, dispatch_uid=f"rules-{model}")
            post_delete.connect(stale, sender=model, weak=False, dispatch_uid=f"rules-d-{model}")
