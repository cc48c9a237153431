from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training jobs"

    def ready(self) -> None:
        from jobs.admission import cache

        cache.install()
