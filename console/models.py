"""The shell's own table: what each background loop has done (for /metrics)."""

from django.db import models


class LoopRun(models.Model):
    """What each background loop (scheduler cycle, monitors) has done, written by the loop
    itself after every run (console.actions): /metrics reads it, so every web replica
    reports the same numbers, whichever Celery worker or process ran the loop."""

    name = models.CharField(max_length=100, primary_key=True)
    runs = models.PositiveBigIntegerField(default=0)
    failures = models.PositiveBigIntegerField(default=0)
    seconds_total = models.FloatField(default=0)
    last_seconds = models.FloatField(default=0)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.runs} runs"
