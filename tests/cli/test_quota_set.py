"""`gpu-console quota set team-a --gpus 16 --preview`: the owners' API from the command
line, against a live console: the dry run prints the preview and saves nothing; the token
it prints saves exactly that; a member is refused."""

import pytest

from accounts.actions import issue_api_token
from cli.__main__ import main
from quotas.models import Quota, Role
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def run(live_server, token: str, *argv: str) -> int:
    return main(["--url", live_server.url, "--token", token, *argv])


def test_quota_set_previews_then_saves(live_server, capsys, workspace, quota, other_quota):
    _, token = issue_api_token(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    assert run(live_server, token, "quota", "set", "team-a", "--gpus", "12", "--preview") == 0
    out = capsys.readouterr().out
    assert "nothing saved" in out and "team-a: 16 → 12 of its own" in out
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    saving = out.strip().splitlines()[-1].split("gpu-console ", 1)[1].split()
    assert saving[:5] == ["quota", "set", "team-a", "--gpus", "12"] and saving[5] == "--confirm"
    assert run(live_server, token, *saving) == 0
    assert "team-a saved: 12 GPUs guaranteed, no limit" in capsys.readouterr().out
    assert Quota.objects.get(pk=quota.pk).gpus == 12
    assert run(live_server, token, "quota", "set", "team-a", "--max-gpus", "none") == 0


def test_quota_set_refused_for_a_member(live_server, capsys, workspace, quota):
    _, token = issue_api_token(make_user("alice", workspace))
    assert run(live_server, token, "quota", "set", "team-a", "--gpus", "1") == 2
    assert "quota owners" in capsys.readouterr().err
    assert Quota.objects.get(pk=quota.pk).gpus == 16
