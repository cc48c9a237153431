"""Settings, demo data, in-process loops and logging of the console shell."""

import json
import logging
import os
import subprocess
import sys
import threading

import pytest

from accounts.models import ApiToken
from accounts.tokens import matches, split_prefix
from console.demo import ensure_demo_data
from console.logfilters import QuietAgentRequests
from console.loops import Loop
from quotas.models import Quota, Workspace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _settings_check(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
    clean.pop("SECRET_KEY", None)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_refuses_to_start_without_secret_key():
    result = _settings_check(CONSOLE_ENV="production", ALLOWED_HOSTS="console.example.com")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_bad_boolean_setting_fails_loudly():
    result = _settings_check(DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr


@pytest.mark.django_db
def test_demo_data_is_created_once_and_reused(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first = ensure_demo_data()
    counts = (Workspace.objects.count(), Quota.objects.count(), ApiToken.objects.count())
    second = ensure_demo_data()
    assert second == first
    assert (Workspace.objects.count(), Quota.objects.count(), ApiToken.objects.count()) == counts
    assert counts == (2, 3, 1)
    token = ApiToken.objects.get()
    assert token.prefix == split_prefix(first.api_token, "gqc")
    assert matches(first.api_token, token.digest)
    assert first.api_token not in token.digest
    assert oct((tmp_path / "demo-credentials.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.django_db
def test_demo_data_is_written_through_the_apps_actions(settings, tmp_path):
    """The seed is a write like any other (quotas.actions): audited once, and a second run
    writes nothing of the quotas' tables."""
    from audit.models import AuditEntry

    settings.VAR_DIR = tmp_path
    ensure_demo_data()
    actions = sorted(AuditEntry.objects.values_list("action", flat=True))
    assert actions.count("quota.add") == 3
    assert actions.count("workspace.bind_quotas") == 2
    assert actions.count("workspace.member_add") == 5  # the researcher, admin and owner
    assert {"tenant.add", "workspace.add"} <= set(actions)
    researcher = Workspace.objects.get(name="vision").members.get(username="researcher")
    assert researcher.check_password(
        json.loads((tmp_path / "demo-credentials.json").read_text())["researcher_password"]
    )
    ensure_demo_data()
    assert AuditEntry.objects.count() == len(actions)


@pytest.mark.django_db
def test_lost_demo_credentials_are_made_again(settings, tmp_path):
    """Without its credentials file the seed sets new passwords on the same users and
    replaces the demo token (accounts.actions), keeping one token."""
    from django.contrib.auth import get_user_model

    from accounts.api_auth import authenticate_token

    settings.VAR_DIR = tmp_path
    first = ensure_demo_data()
    (tmp_path / "demo-credentials.json").unlink()
    again = ensure_demo_data()
    assert again.admin_password != first.admin_password
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(again.admin_password)
    assert get_user_model().objects.count() == 3
    assert ApiToken.objects.count() == 1
    assert authenticate_token(f"Bearer {first.api_token}") is None
    assert authenticate_token(f"Bearer {again.api_token}") is not None


def test_loop_runs_on_wake_and_survives_errors():
    calls = []
    ran_twice = threading.Event()

    def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first cycle fails")
        ran_twice.set()

    loop = Loop("probe", work, interval=3600)
    loop.start()
    try:
        loop.woken.set()
        assert ran_twice.wait(5), "the loop did not run again after a failing cycle"
    finally:
        loop.stop()
        loop.join(5)
    assert not loop.is_alive()


@pytest.mark.parametrize(
    ("message", "status", "kept"),
    [
        ('"POST /api/v1/agent/heartbeat/ HTTP/1.1" 200 45', 200, False),
        ('"POST /api/v1/agent/heartbeat/ HTTP/1.1" 401 80', 401, True),
        ('"GET /jobs/ HTTP/1.1" 200 1000', 200, True),
    ],
)
def test_quiet_agent_requests_filter(message, status, kept):
    record = logging.LogRecord("django.server", logging.INFO, "", 0, message, (), None)
    record.status_code = status
    assert QuietAgentRequests().filter(record) is kept


@pytest.mark.django_db
def test_a_rotated_demo_token_is_replaced_by_a_live_one(settings, tmp_path):
    """`make run` prints the demo token on every start: never one that was revoked."""
    from accounts.actions import rotate_api_token
    from accounts.api_auth import authenticate_token

    settings.VAR_DIR = tmp_path
    first = ensure_demo_data()
    rotate_api_token(ApiToken.objects.get().user)  # the researcher rotated it in the console
    assert authenticate_token(f"Bearer {first.api_token}") is None
    again = ensure_demo_data()
    assert again.api_token != first.api_token
    assert authenticate_token(f"Bearer {again.api_token}") is not None
    assert json.loads((tmp_path / "demo-credentials.json").read_text())["api_token"] == (
        again.api_token
    )
