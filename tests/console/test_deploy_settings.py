"""Production settings as the compose stack sets them: HSTS preload off unless asked, no
trust in X-Forwarded-Proto at the Django level (gunicorn decides), health checks exempt
from the HTTPS redirect, persistent connections checked before reuse, server-side timeouts
on PostgreSQL sessions, Celery time limits and recycling, JSON logs."""

import json
import os
import subprocess
import sys
import time

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError, connection

from console.env import postgres_session_options
from jobs.scheduler.cycle import SCHEDULER_LOCK_KEY, run_cycle
from tests.console.test_console import ROOT

PRODUCTION = {
    "CONSOLE_ENV": "production",
    "SECRET_KEY": "k3y-" + "abcdefghij0123456789" * 3,
    "ALLOWED_HOSTS": "console.example.com",
    "DATABASE_URL": "postgres://console:pw@db.invalid:5432/console",
    "REDIS_URL": "redis://redis.invalid:6379/0",
}
SHOW = (
    "import json; from django.conf import settings as s; print(json.dumps({"
    "'preload': s.SECURE_HSTS_PRELOAD, 'hsts': s.SECURE_HSTS_SECONDS,"
    "'proxy_header': s.SECURE_PROXY_SSL_HEADER, 'exempt': s.SECURE_REDIRECT_EXEMPT,"
    "'redirect': s.SECURE_SSL_REDIRECT, 'db': s.DATABASES['default'],"
    "'soft': s.CELERY_TASK_SOFT_TIME_LIMIT, 'hard': s.CELERY_TASK_TIME_LIMIT,"
    "'per_child': s.CELERY_WORKER_MAX_TASKS_PER_CHILD,"
    "'hijack': s.CELERY_WORKER_HIJACK_ROOT_LOGGER,"
    "'log_format': s.LOG_FORMAT, 'formatter': s.LOGGING['handlers']['console']['formatter']},"
    " default=str))"
)


def production_settings(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DB_", "SECURE_"))}
    for key in ("DATABASE_URL", "REDIS_URL", "CONSOLE_LOOPS", "METRICS_TOKEN", "LOG_FORMAT"):
        clean.pop(key, None)
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", SHOW],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings", **PRODUCTION, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_defaults():
    s = production_settings()
    assert s["preload"] is False
    assert s["hsts"] == 31536000
    assert s["proxy_header"] is None
    assert s["redirect"] is True
    assert s["exempt"] == ["^healthz$"]
    assert s["db"]["CONN_MAX_AGE"] == 60
    assert s["db"]["CONN_HEALTH_CHECKS"] is True
    assert s["db"]["OPTIONS"]["options"] == (
        "-c statement_timeout=60000 -c lock_timeout=30000 "
        "-c idle_in_transaction_session_timeout=60000"
    )
    assert (s["soft"], s["hard"], s["per_child"], s["hijack"]) == (120, 180, 1000, False)
    assert (s["log_format"], s["formatter"]) == ("json", "json")


def test_operator_choices():
    s = production_settings(
        SECURE_HSTS_PRELOAD="true",
        TRUST_X_FORWARDED_PROTO="true",
        DB_STATEMENT_TIMEOUT="0",
        DB_LOCK_TIMEOUT="0",
        DB_IDLE_IN_TRANSACTION_TIMEOUT="5",
        CONN_MAX_AGE="0",
    )
    assert s["preload"] is True
    assert s["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert s["db"]["OPTIONS"]["options"] == "-c idle_in_transaction_session_timeout=5000"
    assert s["db"]["CONN_MAX_AGE"] == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CELERY_TASK_TIME_LIMIT": "60", "CELERY_TASK_SOFT_TIME_LIMIT": "60"}, "must be above"),
        ({"METRICS_TOKEN": "short"}, "METRICS_TOKEN must be at least 32"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT must be json or plain"),
        ({"DB_LOCK_TIMEOUT": "-1"}, "DB_LOCK_TIMEOUT must be >= 0"),
    ],
)
def test_bad_values_fail_loudly(env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings", **PRODUCTION, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_session_options_leave_zero_out():
    assert postgres_session_options(statement_timeout=0, lock_timeout=2) == "-c lock_timeout=2000"
    assert postgres_session_options(statement_timeout=0) == ""


# --- on PostgreSQL: the limits are in force, and a stuck cycle cannot hold the lock ---------

needs_postgres = pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")


@pytest.mark.postgres
@needs_postgres
@pytest.mark.django_db
def test_sessions_have_the_limits():
    with connection.cursor() as cursor:
        shown = {}
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
            cursor.execute(f"SHOW {name}")
            shown[name] = cursor.fetchone()[0]
    assert shown == {
        "statement_timeout": "1min",
        "lock_timeout": "30s",
        "idle_in_transaction_session_timeout": "1min",
    }


def _holder(idle_timeout: int | None):
    """Another session that takes the scheduler's lock and then sits in its transaction,
    like a cycle stuck in Python."""
    import psycopg

    params = connection.get_connection_params()
    options = postgres_session_options(idle_in_transaction_session_timeout=idle_timeout or 0)
    holder = psycopg.connect(
        **{k: v for k, v in params.items() if k in {"host", "port", "user", "password"}},
        dbname=connection.settings_dict["NAME"],
        options=options,
    )
    holder.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_KEY])
    return holder


@pytest.mark.postgres
@needs_postgres
@pytest.mark.django_db(transaction=True)
def test_a_waiting_cycle_gives_up_after_lock_timeout():
    holder = _holder(None)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '1s'")
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"):
            run_cycle()
        assert time.monotonic() - started < 20
    finally:
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


@pytest.mark.postgres
@needs_postgres
@pytest.mark.django_db(transaction=True)
def test_a_stuck_lock_holder_is_ended_by_the_server_and_the_next_cycle_runs():
    holder = _holder(1)  # the session option the settings set, at 1 s instead of 60 s
    try:
        run_cycle()  # waits (under the 30 s lock_timeout) until the server ends the holder
        with pytest.raises(Exception, match=r"idle-in-transaction|terminat|closed"):
            holder.execute("SELECT 1")
    finally:
        holder.close()


@pytest.mark.parametrize("preload", ["false", "true"])
def test_check_deploy_passes_with_preload_off_or_on(preload):
    """Preload off is a decision, so Django's W021 reminder is silenced only then."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={
            **clean,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            **PRODUCTION,
            "SECURE_HSTS_PRELOAD": preload,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
