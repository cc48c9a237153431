"""`logs -f` ends only at the end of the log (issue 34, item 4; docs/agent-protocol.md, "End
of a worker's log"): a follower's log is complete once the agent acknowledged the end of
every line of the worker (`LogLines.end`), or its node was lost (`log_gap` says so), never
on a timer. The old rule called it complete a few heartbeats after the job ended while the
agent was still shipping: with tens of thousands of fast lines a follower missed thousands.
"""

import time

import pytest
from django.test import Client
from django.utils import timezone

from cluster.models import Node, NodeState
from jobs.models import Job, Pod
from policy.statuses import FINAL_JOB_STATUSES, JobStatus, PodStatus
from tests.agents.agentproc import IMAGE_LINE, registered
from tests.agents.conftest import make_job
from tests.conftest import make_node

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LINES = 45_000  # under the agent's burst: none dropped, every one must arrive
PAD = "x" * 300  # ~14 MB in all: the agent ships for seconds after the worker exits


def follow_all(client: Client, job: Job, token: str, timeout: float = 120) -> tuple[list, dict]:
    """`gpu-console logs -f`: pages of lines until the answer says complete."""
    headers = {"Authorization": f"Bearer {token}"}
    after, texts = -1, []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        url = f"/api/v1/jobs/{job.pk}/logs?after={after}&limit=5000&follow=true&wait=2"
        data = client.get(url, headers=headers).json()
        texts += [line["text"] for line in data["lines"]]
        after = data["next_after"]
        if data["complete"]:
            return texts, data
    pytest.fail(f"the follower never saw the log complete ({len(texts)} lines)")


def test_a_follower_gets_every_fast_line_before_the_log_is_complete(
    agents, researcher, workspace, quota, api_token, settings
):
    # The old rule's wait was three heartbeat intervals after the job ended: 3 s here.
    settings.AGENT_HEARTBEAT_INTERVAL = 1
    agents("shipper")
    node = registered("shipper")
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=f"python3 -c \"[print(f'line {{i}} {PAD}') for i in range({LINES})]\"",
    )
    texts, last = follow_all(Client(), job, api_token)
    job.refresh_from_db()
    assert job.status in FINAL_JOB_STATUSES and job.status == JobStatus.COMPLETED
    assert texts[0] == IMAGE_LINE  # the agent's own first line
    assert len(texts) - 1 == LINES, f"{len(texts) - 1} of {LINES} lines"
    assert texts[1:] == [f"line {i} {PAD}" for i in range(LINES)]
    assert last["log_gap"] == ""
    pod = Pod.objects.get(pk=pod.pk)
    assert pod.logs_delivered and pod.log_next_seq == LINES + 1


def test_a_worker_of_a_lost_node_ends_its_log_with_a_gap(api_token, job_factory):
    """No end of stream will ever come from a Lost node: the log ends, and says why."""
    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    node = make_node("gone")
    job, (pod,) = job_factory([node], pod_status=PodStatus.LOST, status=JobStatus.FAILED)
    now = timezone.now()
    Pod.objects.filter(pk=pod.pk).update(started_at=now, finished_at=now, log_next_seq=0)
    data = api.get(f"/api/v1/jobs/{job.pk}/logs").json()
    assert data["complete"] is False  # the node may still ship: not lost yet
    Node.objects.filter(pk=node.pk).update(state=NodeState.LOST)
    data = api.get(f"/api/v1/jobs/{job.pk}/logs").json()
    assert data["complete"] is True and "node was lost" in data["log_gap"]
