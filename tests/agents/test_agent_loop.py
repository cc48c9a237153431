"""The agent's loop driven step by step in-process (heartbeat, converge) against a live
console, with the real process runtime: deterministic, no timing."""

import json
import threading
import time

import pytest

from agents.actions import issue_bootstrap_token
from agents.node.agent import Agent, AgentConfig
from agents.node.state import AgentConfigError, StateStore
from cluster.models import Node
from jobs.actions.stop import request_stop
from jobs.models import Job, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import make_job

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 15.0


@pytest.fixture
def make_agent(live_server, tmp_path):
    made: list[Agent] = []

    def build(name: str = "loop-node", **extra) -> Agent:
        _, bootstrap = issue_bootstrap_token(None, "loop")
        config = AgentConfig(
            server=live_server.url,
            name=name,
            state_dir=tmp_path / name,
            bootstrap_token=bootstrap,
            fake_gpus="8xH200",
            heartbeat_interval=0.2,
            shutdown_grace=2,
            **extra,
        )
        agent = Agent(config)
        identity = agent.register_or_load()
        agent.client.token = identity["node_token"]
        agent._log_client = agent.client.copy()
        made.append(agent)
        return agent

    yield build
    for agent in made:
        agent.runtime.shutdown(0)
        agent.client.close()
        agent._log_client.close()
        agent.shipper.close_all()
        agent.store.unlock()


@pytest.fixture
def job_on(researcher, workspace, quota):
    def build(node, command="sleep 600", **extra):
        return make_job(
            owner=researcher,
            workspace=workspace,
            quota=quota,
            nodes=[node],
            command=command,
            **extra,
        )

    return build


def step(agent: Agent):
    reply = agent.heartbeat()
    assert reply is not None
    agent.converge(reply)
    return reply


def wait_exit(agent: Agent, pod: Pod) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if any(s.pod_id == pod.pk and not s.running for s in agent.runtime.workers()):
            return
        time.sleep(0.02)
    pytest.fail(f"pod {pod.pk} did not exit")


def test_a_pod_is_launched_once_however_often_it_is_desired(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(node)
    reply = step(agent)
    agent.converge(reply)  # the same desired state again
    step(agent)
    assert [s.pod_id for s in agent.runtime.workers()] == [pod.pk]
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.RUNNING
    saved = json.loads((agent.store.dir / "workers.json").read_text())
    record = saved["launched"][str(pod.pk)]
    assert (record["attempt"], record["finished"], record["error"], record["final"]) == (
        1,
        False,
        "",
        None,
    )
    assert record["progress_file"] and record["checkpoint_dir"]


def test_an_adopted_worker_keeps_reporting_its_progress(make_agent, job_on):
    """After an agent restart the new agent adopts the running worker and still reads its
    progress file; otherwise hang detection would see no progress and restart a healthy job."""
    first = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(
        node, command='echo \'{"step": 7, "total": 10}\' > "$PROGRESS_FILE"; sleep 600'
    )
    step(first)
    deadline = time.monotonic() + WAIT
    while (first.ledger.progress_of(pod.pk)[0] or None) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.ledger.progress_of(pod.pk)[0].step == 7
    first.store.unlock()  # the first agent "dies"; its worker keeps running

    second = make_agent("loop-node")
    second.recover()
    assert [s.pod_id for s in second.runtime.workers() if s.running] == [pod.pk]
    progress, _ = second.ledger.progress_of(pod.pk)
    assert progress is not None and progress.step == 7


def test_a_stop_for_a_pod_never_launched_ends_it_as_ordered(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    job, (pod,) = job_on(node)
    request_stop(Job.objects.get(pk=job.pk), reason="stopped by alice")
    reply = step(agent)
    assert [o.pod_id for o in reply.stop] == [pod.pk] and reply.run == []
    step(agent)
    pod.refresh_from_db()
    assert pod.status == PodStatus.STOPPED
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED
    assert agent.runtime.workers() == []


def test_the_pods_of_one_reply_are_recorded_in_one_write_before_any_launch(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (first,) = job_on(node)
    _, (second,) = job_on(node)
    _, (third,) = job_on(node)
    ids = {first.pk, second.pk, third.pk}
    writes: list[tuple[set[int], set[int]]] = []  # (recorded, launched) at each write
    save = agent.store.save_launched

    def spy(launched):
        writes.append((set(launched), {s.pod_id for s in agent.runtime.workers()}))
        save(launched)

    agent.store.save_launched = spy
    step(agent)
    assert {s.pod_id for s in agent.runtime.workers()} == ids
    # The write-ahead: all three recorded, none launched yet; then their paths once more.
    assert writes[0] == (ids, set())
    assert len(writes) == 2


def test_a_failed_write_ahead_launches_none_of_the_batch(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    job_on(node)
    job_on(node)

    def full(launched):
        raise OSError(28, "No space left on device")

    agent.store.save_launched = full
    reply = agent.heartbeat()
    with pytest.raises(OSError):  # the loop logs it and tries again at the next heartbeat
        agent.converge(reply)
    assert agent.runtime.workers() == []
    assert agent.launched == {}  # nothing recorded: both are launched at a later heartbeat


def test_a_pod_waits_for_gpus_an_old_worker_still_holds(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (old,) = job_on(node, command='trap "sleep 0.3; exit 0" TERM; while :; do sleep 0.05; done')
    step(agent)
    # The console gave the old worker up (its pod is final, so its GPU is free in the
    # database: two live pods never share one) while it still runs on the node.
    Pod.objects.filter(pk=old.pk).update(status=PodStatus.LOST)
    _, (new,) = job_on(node, command="echo new")  # the scheduler reused GPU 0
    assert new.gpu_indices == old.gpu_indices == [0]
    step(agent)
    assert {s.pod_id for s in agent.runtime.workers()} == {old.pk}  # new one waits
    wait_exit(agent, old)
    step(agent)  # the old worker has exited; the new pod launches
    assert new.pk in {s.pod_id for s in agent.runtime.workers()}


def test_a_pod_asking_for_a_gpu_the_node_lacks_fails(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _job, (pod,) = job_on(node)
    Pod.objects.filter(pk=pod.pk).update(gpu_indices=[9])
    step(agent)
    step(agent)
    pod.refresh_from_db()
    assert pod.status == PodStatus.FAILED
    assert pod.error_message == "GPU 9 does not exist on this node (8 GPUs)"


def test_exit_is_reported_after_the_last_log_lines(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(node, command="echo one; echo two; exit 4")
    step(agent)
    wait_exit(agent, pod)
    agent.shipper.flush(timeout=WAIT)
    step(agent)
    pod.refresh_from_db()
    # The error quotes the worker's output; the agent's banner is in the log only.
    assert (pod.status, pod.exit_code, pod.error_message) == (PodStatus.FAILED, 4, "one\ntwo")
    assert pod.log_next_seq == 3
    # Reported once: the agent forgets it, and the record says it is finished.
    assert agent.runtime.workers() == []
    assert agent.launched[pod.pk].finished


def test_an_exits_last_lines_ride_in_the_heartbeat_that_reports_it(make_agent, job_on):
    """This console takes logs in heartbeats: no log request and no wait before the exit
    is reported, and the exit says its log is delivered."""
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(node, command="echo one; echo two; exit 4")
    step(agent)
    assert agent.shipper.exits_ride  # the reply said `takes_logs`
    wait_exit(agent, pod)

    def no_log_request(batch):
        raise AssertionError(f"a log request was sent: {batch}")

    agent._log_client.send_logs = no_log_request
    step(agent)
    pod.refresh_from_db()
    assert (pod.status, pod.exit_code, pod.log_next_seq) == (PodStatus.FAILED, 4, 3)
    assert pod.logs_delivered
    assert agent.shipper._streams == {}  # acked in the reply: nothing left to send
    assert agent.launched[pod.pk].finished


def test_an_exit_the_console_did_not_take_is_reported_again(make_agent, job_on):
    agent = make_agent()
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(node, command="exit 5")
    step(agent)
    wait_exit(agent, pod)
    step(agent)
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.FAILED
    # As if the console had lost that report: the pod is live again in its eyes.
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, exit_code=None)
    reply = step(agent)  # lists the pod to run; the agent re-reports instead of relaunching
    assert [s.pod_id for s in reply.run] == [pod.pk]
    assert agent.runtime.workers() == []
    step(agent)
    pod.refresh_from_db()
    assert (pod.status, pod.exit_code) == (PodStatus.FAILED, 5)
    assert agent.launched[pod.pk].final["exit_code"] == 5


def test_one_agent_per_state_dir(make_agent, tmp_path, live_server):
    make_agent()
    with pytest.raises(AgentConfigError, match="another agent is running"):
        Agent(AgentConfig(server=live_server.url, name="x", state_dir=tmp_path / "loop-node"))


def test_an_unreadable_worker_record_stops_the_agent(tmp_path):
    store = StateStore(tmp_path / "s")
    store.workers_path.write_text("{not json")
    with pytest.raises(AgentConfigError, match="cannot read"):
        store.load_launched()


def test_an_exit_seen_before_its_exit_callback_ran_still_ends_its_log(make_agent, job_on):
    """Under load the heartbeat can see a worker done before the runtime's exit callback
    closed its log (CI's loaded rehearsal did): the report that carries the exit closes it,
    so the log's end rides with it all the same."""
    agent = make_agent()
    late = threading.Event()
    real = agent.runtime._on_exit

    def slow_callback(pod_id: int) -> None:
        late.wait(10)  # the heartbeat below runs first
        real(pod_id)

    agent.runtime._on_exit = slow_callback
    node = Node.objects.get(name="loop-node")
    _, (pod,) = job_on(node, command="echo one; echo two; exit 4")
    step(agent)
    wait_exit(agent, pod)
    step(agent)
    late.set()
    pod.refresh_from_db()
    assert (pod.status, pod.exit_code, pod.log_next_seq) == (PodStatus.FAILED, 4, 3)
    assert pod.logs_delivered


def _exits_per_heartbeat(agent: Agent, pods: list[Pod]) -> list[int]:
    """Run the agent's loop until these pods' exits reached the console; how many exits
    each heartbeat carried (those that carried any)."""
    exits_per_beat: list[int] = []
    real = agent.client.heartbeat

    def spy(beat, **kwargs):
        exits_per_beat.append(sum(1 for w in beat.workers if w.exit_code is not None))
        return real(beat, **kwargs)

    agent.client.heartbeat = spy
    loop = threading.Thread(target=agent.run, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + WAIT
        while Pod.objects.filter(pk__in=[p.pk for p in pods], finished_at=None).exists():
            assert time.monotonic() < deadline, "the exits were not reported"
            time.sleep(0.02)
    finally:
        agent.stop.set()
        agent.wake.set()
        loop.join(WAIT)
    return [n for n in exits_per_beat if n]


def test_a_gangs_exits_are_reported_in_one_heartbeat(
    make_agent, researcher, workspace, quota, monkeypatch
):
    """The loop gathers the exits of a job whose other workers still run here
    (docs/agent-protocol.md, "Exits gathered"): the two workers of one job end together and
    reach the console in one report, so their GPUs are free at once instead of in two steps.
    The second worker ends 50 ms after the first; the window is widened here so that a busy
    machine's launch spread cannot split them; without gathering the first exit goes alone."""
    from agents.node import waking
    from agents.node.runtimes import simulated

    assert waking.EXIT_GATHER >= 0.02
    monkeypatch.setattr(waking, "EXIT_GATHER", 0.5)
    lengths = iter([0.3, 0.35])
    monkeypatch.setattr(simulated, "run_seconds", lambda env: next(lengths))
    agent = make_agent(runtime="simulated")
    node = Node.objects.get(name="loop-node")
    _, pods = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node, node],  # two workers of one job on this node
        command="simulated",
        env={"SIM_RUN_SECONDS": "0.3"},
    )
    assert _exits_per_heartbeat(agent, pods) == [2]


def test_a_lone_workers_exit_is_reported_at_once(make_agent, job_on, monkeypatch):
    """A job with nothing else running here has no exit to wait for: its exit is reported
    without the gathering window (widened to 10 s here: it would show)."""
    from agents.node import waking

    monkeypatch.setattr(waking, "EXIT_GATHER", 10.0)
    agent = make_agent(runtime="simulated")
    node = Node.objects.get(name="loop-node")
    _, pods = job_on(node, command="simulated", env={"SIM_RUN_SECONDS": "0.2"})
    job_on(node, command="simulated", env={"SIM_RUN_SECONDS": "600"})  # another job runs on
    started = time.monotonic()
    assert _exits_per_heartbeat(agent, pods) == [1]
    assert time.monotonic() - started < 8.0
