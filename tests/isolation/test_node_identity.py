"""Node identity (issue 9, fourth bullet), with real agents over HTTP.

A name already registered is not taken over by whoever holds a bootstrap token: the
impostor is refused (409, the agent exits 3), the attempt is recorded where admins see it,
and the real agent keeps its node and its jobs. (The admin's deliberate re-registration is
tested in tests/agents/test_register.py.) The old code handed the name, and the job specs
with their env, to the impostor and locked the real agent out.
"""

import pytest
from django.test import Client

from agents.actions import issue_bootstrap_token
from agents.models import RegistrationOutcome, RegistrationRecord
from cluster.models import Node, NodeState
from policy.statuses import PodStatus
from tests.agents.agentproc import AgentProcess, pod_status, registered, stored_lines, wait_for
from tests.agents.conftest import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_impostor_with_a_bootstrap_token_cannot_take_a_registered_name(
    agents, live_server, researcher, workspace, quota, admin_user, tmp_path
):
    _, reusable = issue_bootstrap_token(None, "rack 7", single_use=False)
    real = agents("gpu-7", bootstrap=reusable)
    node = registered("gpu-7")
    token_prefix = node.token_prefix

    (tmp_path / "impostor").mkdir()
    impostor = AgentProcess(live_server.url, "gpu-7", tmp_path / "impostor" / "s", reusable)
    try:
        assert impostor.wait() == 3
    finally:
        impostor.kill()
    assert "registration refused: 409 name_taken" in impostor.output()

    node.refresh_from_db()
    assert node.token_prefix == token_prefix and node.state == NodeState.READY
    _job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command="echo still mine",
        env={"SECRET": "for the real node only"},
    )
    wait_for(lambda: pod_status(pod) == PodStatus.SUCCEEDED, "the real agent to run the job")
    assert "still mine" in stored_lines(pod)

    refused = RegistrationRecord.objects.get(outcome=RegistrationOutcome.REFUSED)
    assert (refused.name, refused.node_id) == ("gpu-7", node.pk)
    assert refused.bootstrap_prefix == reusable.split("_")[1]
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get("/admin/agents/registrationrecord/")
    assert page.status_code == 200
    assert "gpu-7" in page.content.decode() and "Refused" in page.content.decode()
    assert Node.objects.count() == 1
    assert real.terminate() == 0, real.output()
