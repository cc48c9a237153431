"""`gpu-console submit --template ddp-8gpu --set workers=4`: a job from a template of the
workspace, the given fields replacing its own, against a live console."""

import pytest

from accounts.actions import issue_api_token
from cli.__main__ import main
from jobs.actions.templates import save_template
from jobs.models import Job
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_from_a_template_with_a_setting(live_server, capsys, workspace, quota, node):
    user = make_user("alice", workspace)
    _, token = issue_api_token(user)
    fields = {
        "quota": str(quota.pk),
        "image": "pytorch:2.4",
        "command": "torchrun train.py",
        "workers": 2,
        "gpus_per_worker": 2,
        "env": {"LR": "0.1"},
    }
    save_template(workspace=workspace, name="ddp-8gpu", fields=fields, user=user)
    argv = [
        "--url",
        live_server.url,
        "--token",
        token,
        "submit",
        "--template",
        "ddp-8gpu",
        "--set",
        "workers=4",
        "--set",
        "name=sweep-a",
    ]
    assert main(argv) == 0
    job = Job.objects.get()
    assert (job.workers, job.gpus_per_worker, job.command) == (4, 2, "torchrun train.py")
    assert job.name == "sweep-a" and job.env == {"LR": "0.1"} and job.workspace_id == workspace.pk
    bad = [
        "--url",
        live_server.url,
        "--token",
        token,
        "submit",
        "--template",
        "ddp-8gpu",
        "--set",
        "workers=0",
    ]
    assert main(bad) != 0
    assert "workers" in capsys.readouterr().err
