"""The Grafana dashboard (deploy/grafana-dashboard.json) only queries metrics /metrics
exports, so it cannot drift silently from console/metrics.py."""

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from console.actions import record_run
from tests.conftest import make_node

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
NAME = re.compile(r"\bgpu_console_[a-z_]+")


@pytest.mark.django_db
def test_every_queried_metric_is_exported(settings, quota):
    settings.METRICS_TOKEN = "t" * 40
    make_node()
    from django.utils import timezone

    record_run("scheduler", timezone.now(), 0.1, None)
    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer " + "t" * 40).content.decode()
    exported = {
        sample.name for family in text_string_to_metric_families(body) for sample in family.samples
    }
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in NAME.findall(target["expr"])
    }
    assert len(dashboard["panels"]) >= 10
    assert queried, "the dashboard queries nothing"
    assert queried <= exported, f"not exported: {sorted(queried - exported)}"
