"""Every documented setting can be set from the environment.

The documented settings are the rows of the settings tables (a Markdown table whose first
column is headed "variable" or "setting": README's "Settings", docs/sign-in.md's). For each
one a fresh `python -c` process imports `console.settings` with the variable set, and the
setting must have taken the value. Conversely every variable `console/settings.py` reads is
in a table.
"""

import ast
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_HEADER = re.compile(r"^\|\s*(variable|setting)\s*\|", re.IGNORECASE)
_NAME = re.compile(r"`([A-Z][A-Z0-9_]+)`")
READERS = {"env_str", "env_int", "env_bool", "env_list", "env_rate", "env_float"}


def settings_tables() -> dict[str, str]:
    """{variable: "document:line"} over every settings table of the documentation."""
    found: dict[str, str] = {}
    for path in DOCUMENTS:
        inside = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _HEADER.match(line):
                inside = True
            elif inside and line.startswith("|"):
                for name in _NAME.findall(line.split("|")[1]):
                    found.setdefault(name, f"{path.relative_to(ROOT)}:{number}")
            else:
                inside = False
    return found


def variables_read() -> set[str]:
    """The variables `console/settings.py` (and what it imports of ours) reads."""
    names = set()
    for path in (ROOT / "console" / "settings.py", ROOT / "console" / "oidc_settings.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in READERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(node.args[0].value)
    return names


DOCUMENTED = settings_tables()
PRODUCTION = {"CONSOLE_ENV": "production", "SECRET_KEY": "k" * 50, "ALLOWED_HOSTS": "h.example"}
POSTGRES = {"DATABASE_URL": "postgres://u@db.example.org:5432/consoledb"}
SMTP = {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}
OIDC = {
    "OIDC_CLIENT_ID": "console",
    "OIDC_CLIENT_SECRET": "s3cret",
    "OIDC_ISSUER": "https://idp.example.org",
}
_DB = "s.DATABASES['default']"
_MAIL = "s.MAILERS['default']['OPTIONS']"
# Variables that are not simply `console.settings.<NAME>` with a value of its default's
# type: name → (value, expression over the settings module `s`, expected, other variables).
SPECIAL: dict[str, tuple[str, str, object, dict[str, str]]] = {
    "CONSOLE_ENV": ("production", "s.CONSOLE_ENV", "production", PRODUCTION),
    "CONSOLE_VAR_DIR": ("{tmp}/elsewhere", "str(s.VAR_DIR)", "{tmp}/elsewhere", {}),
    "DATABASE_URL": (POSTGRES["DATABASE_URL"], f"{_DB}['NAME']", "consoledb", {}),
    "SQLITE_PATH": ("{tmp}/other.sqlite3", f"{_DB}['NAME']", "{tmp}/other.sqlite3", {}),
    "SQLITE_TEST_PATH": ("{tmp}/t.sqlite3", f"{_DB}['TEST']['NAME']", "{tmp}/t.sqlite3", {}),
    "CONN_MAX_AGE": ("7", f"{_DB}['CONN_MAX_AGE']", 7, POSTGRES),
    "DB_STATEMENT_TIMEOUT": (
        "7",
        f"'statement_timeout=7000' in {_DB}['OPTIONS']['options']",
        True,
        POSTGRES,
    ),
    "DB_LOCK_TIMEOUT": ("7", f"'lock_timeout=7000' in {_DB}['OPTIONS']['options']", True, POSTGRES),
    "DB_IDLE_IN_TRANSACTION_TIMEOUT": (
        "7",
        f"'idle_in_transaction_session_timeout=7000' in {_DB}['OPTIONS']['options']",
        True,
        POSTGRES,
    ),
    "CONSOLE_LOOPS": ("eager", "s.CONSOLE_LOOPS", "eager", {}),
    "RATE_LIMIT_STORE": ("redis", "s.RATE_LIMIT_STORE", "redis", {}),
    "TRUST_X_FORWARDED_PROTO": ("true", "s.SECURE_PROXY_SSL_HEADER is not None", True, {}),
    "SECURE_SSL_REDIRECT": ("false", "s.SECURE_SSL_REDIRECT", False, PRODUCTION),
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": (
        "false",
        "s.SECURE_HSTS_INCLUDE_SUBDOMAINS",
        False,
        PRODUCTION,
    ),
    "LOG_FORMAT": ("json", "s.LOG_FORMAT", "json", {}),
    "LOG_LEVEL": ("DEBUG", "s.LOGGING['root']['level']", "DEBUG", {}),
    "WORKER_FENCE_TIMEOUT": ("120", "s.WORKER_FENCE_TIMEOUT", 120, {}),
    "AGENT_WAIT_POLL_MS": ("250", "s.AGENT_WAIT_POLL", 0.25, {}),
    "EMAIL_BACKEND": (
        "django.core.mail.backends.locmem.EmailBackend",
        "s.MAILERS['default']['BACKEND']",
        "django.core.mail.backends.locmem.EmailBackend",
        {},
    ),
    "EMAIL_HOST": ("smtp.example.org", f"{_MAIL}['host']", "smtp.example.org", SMTP),
    "EMAIL_PORT": ("587", f"{_MAIL}['port']", 587, SMTP),
    "EMAIL_HOST_USER": ("mailer", f"{_MAIL}['username']", "mailer", SMTP),
    "EMAIL_HOST_PASSWORD": ("pw", f"{_MAIL}['password']", "pw", SMTP),
    "EMAIL_USE_TLS": ("true", f"{_MAIL}['use_tls']", True, SMTP),
    "OIDC_SIGN_ALGO": ("ES256", "s.OIDC_SIGN_ALGO", "ES256", OIDC),
    "OIDC_SCOPES": ("openid email groups", "s.OIDC_SCOPES", "openid email groups", OIDC),
    "OIDC_GROUP_ROLES": (
        "acme-owners=acme:quota_owner",
        "s.OIDC_GROUP_ROLES",
        "acme-owners=acme:quota_owner",
        OIDC,
    ),
}
PROBE = (
    "import json, sys\n"
    "import console.settings as s\n"
    "print(json.dumps(eval(sys.argv[1], {'s': s}), default=str))"
)
BASELINE = "{k: getattr(s, k) for k in dir(s) if k.isupper()}"


def _environment(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any documented variable (nor the test suite's
    own settings module), on a data folder of its own, plus `extra`."""
    skip = set(DOCUMENTED) | variables_read() | {"DJANGO_SETTINGS_MODULE", "PYTHONWARNINGS"}
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env |= {"CONSOLE_VAR_DIR": str(tmp), "PYTHONPATH": str(ROOT)}
    return env | extra


def _probe(tmp: Path, expression: str, extra: dict[str, str]) -> tuple[bool, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, expression],
        cwd=ROOT,
        env=_environment(tmp, extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:
        return False, done.stderr.strip().splitlines()[-1:]
    return True, json.loads(done.stdout)


def _plan(name: str, default: object, tmp: Path) -> tuple[dict[str, str], str, object] | str:
    """What to set for `name`, what to read back and what it must be; or why it cannot."""
    if name in SPECIAL:
        value, expression, expected, others = SPECIAL[name]
        if name.startswith("OIDC_") and not others:
            others = OIDC
        fill = (lambda v: v.replace("{tmp}", str(tmp))) if "{tmp}" in str(value) else str
        expected = fill(expected) if isinstance(expected, str) else expected
        return others | {name: fill(value)}, expression, expected
    others = OIDC if name.startswith("OIDC_") else {}
    expression = f"s.{name}"
    if isinstance(default, bool):
        return others | {name: "false" if default else "true"}, expression, not default
    if isinstance(default, int):
        return others | {name: str(default + 7)}, expression, default + 7
    if isinstance(default, float):
        return others | {name: "0.25"}, expression, 0.25
    if isinstance(default, list):
        return (
            others | {name: "a.example.org,b.example.org"},
            expression,
            [
                "a.example.org",
                "b.example.org",
            ],
        )
    if isinstance(default, str):
        value = "7/11" if re.fullmatch(r"\d+/\d+", default) else f"https://{name.lower()}.example"
        return others | {name: value}, expression, value
    return f"console.settings has no {name} of a plain type (got {default!r}): add it to SPECIAL"


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict[str, tuple]:
    """Every documented variable set alone (with what it needs) in a fresh process, four at
    a time: name → (plan, (ok, value read))."""
    tmp = tmp_path_factory.mktemp("settings-probe")
    ok, baseline = _probe(tmp, BASELINE, {})
    assert ok, baseline
    plans = {name: _plan(name, baseline.get(name), tmp) for name in DOCUMENTED}

    def run(name: str):
        plan = plans[name]
        if isinstance(plan, str):
            return name, (plan, None)
        env, expression, _ = plan
        return name, (plan, _probe(tmp, expression, env))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, sorted(DOCUMENTED)))


def test_the_tables_are_found():
    assert {"SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM", "OIDC_ISSUER", "DATABASE_URL"} <= set(
        DOCUMENTED
    )
    assert DOCUMENTED["OIDC_ISSUER"].startswith("docs/sign-in.md:")


def test_every_variable_the_settings_read_is_documented():
    assert sorted(variables_read() - set(DOCUMENTED)) == []


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_a_documented_setting_is_set_from_the_environment(probed, name):
    plan, read = probed[name]
    assert not isinstance(plan, str), f"{name} ({DOCUMENTED[name]}): {plan}"
    env, expression, expected = plan
    ok, value = read
    assert ok, f"{name}={env[name]!r} ({DOCUMENTED[name]}) stops the start: {value}"
    assert value == expected, f"{name}={env[name]!r} ({DOCUMENTED[name]}): {expression} = {value!r}"
