"""Chart history through the real agent endpoint: each new progress step and each GPU sample
a heartbeat carries is kept, and the job page's metrics endpoint returns them per worker."""

from datetime import UTC, datetime, timedelta

import time_machine
from django.test import Client
from django.urls import reverse

from jobs.models import ProgressSample, WorkerGpuSample
from tests.agents.conftest import heartbeat, register

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def report(pod, step, loss, util) -> dict:
    return {
        "pod_id": pod.pk,
        "attempt": pod.attempt,
        "state": "running",
        "progress": {"step": step, "total": 100, "phase": "train", "metrics": {"loss": loss}},
        "gpu": {"gpus": 1, "utilization": util, "memory_used_mb": 2048},
    }


def test_heartbeats_build_the_charts(client, ft_job, researcher):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    for i, (step, loss, util) in enumerate([(10, 2.0, 80), (30, 1.5, 95), (30, 1.5, 90)]):
        with time_machine.travel(T0 + timedelta(seconds=10 * i), tick=False):
            heartbeat(client, token, [report(pod, step, loss, util)])
    # The same step twice is not new progress: two progress samples, three GPU samples.
    assert list(ProgressSample.objects.values_list("step", flat=True)) == [10, 30]
    assert WorkerGpuSample.objects.filter(pod=pod).count() == 3

    viewer = Client()
    viewer.force_login(researcher)
    data = viewer.get(reverse("web:metrics", args=[job.pk])).json()
    t0 = T0.timestamp()
    assert data["gpu_utilization"] == {
        "t": [t0, t0 + 10, t0 + 20],
        "series": [{"label": "worker 0", "values": [80, 95, 90]}],
    }
    assert data["gpu_memory"]["series"][0]["values"] == [2.0, 2.0, 2.0]
    assert data["progress"] == {
        "t": [t0, t0 + 10],
        "series": [{"label": "worker 0", "values": [10, 30]}],
    }
    assert data["step_rate"]["series"][0]["values"] == [2.0]  # 20 steps in 10 s
    assert data["metrics"]["series"] == [{"label": "loss", "values": [2.0, 1.5]}]
    assert data["live"] is True


def test_the_step_rate_is_measured_on_the_workers_clock(client, ft_job, researcher):
    """At a stop the agent sends two heartbeats a moment apart: the step made between them
    is not a burst of 6.7 steps/s when the worker really does 2 steps/s."""
    node, token = register(client)
    job, (pod,) = ft_job([node])
    worker_clock = 1_700_000_000.0
    for console_s, step, worker_s in [(0, 10, 0.0), (5, 20, 5.0), (5.3, 22, 6.0)]:
        body = report(pod, step, 1.0, 50)
        body["progress"]["at"] = worker_clock + worker_s
        with time_machine.travel(T0 + timedelta(seconds=console_s), tick=False):
            heartbeat(client, token, [body])
    viewer = Client()
    viewer.force_login(researcher)
    data = viewer.get(reverse("web:metrics", args=[job.pk])).json()
    assert data["step_rate"]["series"][0]["values"] == [2.0, 2.0]
    page = viewer.get(reverse("web:detail", args=[job.pk])).text
    assert "2.00 steps/s" in page
