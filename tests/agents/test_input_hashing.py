"""Hashing a job's data folders before its start (docs/results.md, "Run identity";
`result_inputs_sha256`), driven step by step in-process against a live console with the
real process runtime: the agent's loop goes on heartbeating while a (slowed) hash runs in
its own thread, the worker starts only once it is done, an agent restarted meanwhile starts
it again rather than losing it, a stop ends it unlaunched, and a bound starts it without a
content digest."""

import hashlib
import json
import time

import pytest

from cluster.models import Node
from jobs.actions.stop import request_stop
from jobs.models import AttemptFacts, Job, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import stored_lines
from tests.agents.test_agent_loop import (  # noqa: F401 - the fixtures (F811 below)
    WAIT,
    job_on,
    make_agent,
    step,
)

pytestmark = pytest.mark.django_db(transaction=True)

LABELS = b"seven\n"


def _hashed_job(job_on, node, workspace, tmp_path):  # noqa: F811
    area = tmp_path / node.name / "checkpoints" / f"ws-{workspace.pk}"
    data = area / "datasets" / "mnist"
    data.mkdir(parents=True)
    (data / "labels.txt").write_bytes(LABELS)
    job, (pod,) = job_on(
        node, command='cat "$DATA_MNIST/labels.txt"', data={"mnist": "datasets/mnist"},
        result_contract={"inputs_sha256": True}, cpus_per_worker=1, memory_gb_per_worker=1,
    )  # fmt: skip
    manifest = area / f"job-{job.pk}" / "output" / f"job-{job.pk}" / "attempt-1.inputs.sha256"
    return job, pod, manifest


def _until_launched(agent, pod) -> None:
    deadline = time.monotonic() + WAIT
    while pod.pk not in {s.pod_id for s in agent.runtime.workers()}:
        assert time.monotonic() < deadline, "the worker was not launched once hashed"
        time.sleep(0.05)
        step(agent)


def _finished(agent, pod) -> Pod:
    deadline = time.monotonic() + WAIT
    while (found := Pod.objects.get(pk=pod.pk)).status in (PodStatus.STARTING, PodStatus.RUNNING):
        assert time.monotonic() < deadline, f"pod {pod.pk} did not finish"
        agent.shipper.flush(timeout=WAIT)
        time.sleep(0.05)
        step(agent)
    return found


def test_heartbeats_go_on_while_the_inputs_are_hashed(
    make_agent,  # noqa: F811
    job_on,  # noqa: F811
    workspace,
    tmp_path,
    held_file_hash,
):
    entered, gate = held_file_hash
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    job, pod, manifest = _hashed_job(job_on, node, workspace, tmp_path)
    step(agent)  # recorded, then its inputs hashed off the loop
    assert entered.wait(WAIT)
    record = json.loads((agent.store.dir / "workers.json").read_text())["launched"][str(pod.pk)]
    assert record["preparing"] is True
    for _ in range(5):  # the loop is not held: every heartbeat is answered, nothing launched
        reply = agent.heartbeat()
        assert reply is not None and [s.pod_id for s in reply.run] == [pod.pk]
        agent.converge(reply)
    assert agent.runtime.workers() == []
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.STARTING  # not reported meanwhile
    gate.set()
    _until_launched(agent, pod)
    assert _finished(agent, pod).status == PodStatus.SUCCEEDED
    text = manifest.read_bytes()
    assert text == f"{hashlib.sha256(LABELS).hexdigest()}  mnist/labels.txt\n".encode()
    facts = AttemptFacts.objects.get(job=job)
    assert facts.inputs_sha256 == hashlib.sha256(text).hexdigest()
    assert (facts.inputs_files, facts.inputs_bytes) == (1, len(LABELS))
    assert facts.inputs_fingerprint  # the fingerprint too, as before
    lines = stored_lines(pod)
    assert "[agent] hashing inputs: 1 file, 0.0 GB" in lines
    hashed = next(i for i, line in enumerate(lines) if line.startswith("[agent] inputs hashed"))
    assert lines.index("seven") > hashed  # the program ran after the hash


def test_an_agent_restarted_while_hashing_starts_the_worker_again(
    make_agent,  # noqa: F811
    job_on,  # noqa: F811
    workspace,
    tmp_path,
    held_file_hash,
):
    entered, gate = held_file_hash
    first = make_agent()
    node = Node.objects.get(name="loop-node")
    job, pod, manifest = _hashed_job(job_on, node, workspace, tmp_path)
    step(first)
    assert entered.wait(WAIT)
    first.hashing.stop()  # the first agent "dies" while its hash is held: its thread ends
    first.store.unlock()

    second = make_agent("loop-node")
    second.recover()
    assert pod.pk not in second.launched  # never launched: forgotten, not "disappeared"
    gate.set()
    step(second)  # the console still lists it: hashed again, then launched once
    _until_launched(second, pod)
    found = _finished(second, pod)
    assert found.status == PodStatus.SUCCEEDED, found.error_message
    assert stored_lines(pod).count("seven") == 1
    facts = AttemptFacts.objects.get(job=job)
    assert facts.inputs_sha256 == hashlib.sha256(manifest.read_bytes()).hexdigest()


def test_a_stop_while_hashing_ends_the_worker_unlaunched(
    make_agent,  # noqa: F811
    job_on,  # noqa: F811
    workspace,
    tmp_path,
    held_file_hash,
):
    entered, _gate = held_file_hash
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    job, pod, _ = _hashed_job(job_on, node, workspace, tmp_path)
    step(agent)
    assert entered.wait(WAIT)
    request_stop(Job.objects.get(pk=job.pk), reason="stopped by alice")
    step(agent)  # the stop order cancels the hash
    step(agent)  # and its end is reported
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.STOPPED
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED
    assert agent.runtime.workers() == []


def test_past_a_bound_the_worker_starts_without_a_content_digest(
    make_agent,  # noqa: F811
    job_on,  # noqa: F811
    workspace,
    tmp_path,
):
    agent = make_agent()
    agent.hashing.bounds["max_bytes"] = 1
    node = Node.objects.get(name="loop-node")
    job, pod, manifest = _hashed_job(job_on, node, workspace, tmp_path)
    step(agent)
    _until_launched(agent, pod)
    assert _finished(agent, pod).status == PodStatus.SUCCEEDED
    facts = AttemptFacts.objects.get(job=job)
    assert facts.inputs_sha256 == "" and facts.inputs_fingerprint and not manifest.exists()
    assert (
        "[agent] data folders' content not hashed: more than 0.0 GB (the run identity records "
        "no content sha256)"
    ) in stored_lines(pod)
