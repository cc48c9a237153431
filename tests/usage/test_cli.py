"""`gpu-console usage` against a live test server (real HTTP, the real API)."""

import json

import pytest

from accounts.actions import issue_api_token
from cli.__main__ import main
from usage.actions.rollup import roll_up_usage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"  # no scheduling cycle on commit: the history stays


@pytest.fixture
def cli_env(no_cycles, live_server, history, researcher, monkeypatch, tmp_path):
    roll_up_usage(now=history["until"])
    _, token = issue_api_token(researcher)
    monkeypatch.setenv("GPU_CONSOLE_URL", live_server.url)
    monkeypatch.setenv("GPU_CONSOLE_TOKEN", token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return history


def test_usage_by_quota_as_a_table_json_and_csv(cli_env, capsys):
    assert main(["usage", "--by", "quota", "--since", "2026-11-01", "--until", "2026-12-01"]) == 0
    out = capsys.readouterr().out
    assert "team-a" in out and "IN QUOTA" in out
    assert main(["usage", "--since", "2026-11-01", "--until", "2026-12-01", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["group"] for r in rows] == ["team-a"]
    assert (
        main(["usage", "--by", "user", "--since", "2026-11-01", "--until", "2026-12-01", "--csv"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("group,start,") and len(lines) == 3


def test_a_bad_date_is_refused_naming_the_field(cli_env, capsys):
    assert main(["usage", "--since", "someday"]) == 2
    assert "(since)" in capsys.readouterr().err
