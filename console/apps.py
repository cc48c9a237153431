from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from console import triggers

        triggers.install()  # the core's wake-ups travel by Celery, in-process or eagerly
