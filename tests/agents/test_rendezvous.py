"""Where a job's workers meet (docs/distributed.md): the address each agent reports, the
port the cycle reserves on rank 0's node per attempt, and the variables each worker spec
carries; a synchronous restart gives every worker the new attempt's rendezvous."""

import json

import pytest

from jobs.actions.submit import JobSpec, create_job
from jobs.models import Job, Pod
from jobs.scheduler.cycle import run_cycle
from policy.rendezvous import (
    Framework,
    Meeting,
    Shape,
    choose_port,
    hostfile,
    role_counts,
    roles,
    worker_env,
)
from policy.statuses import JobStatus, PodStatus
from protocol.agent import NodeFacts
from tests.agents.conftest import exited, heartbeat, register, running

# -- the pure rules ------------------------------------------------------------------------


def test_a_port_is_the_next_free_one_after_the_previous():
    assert choose_port(100, 103, set(), None) == 100
    assert choose_port(100, 103, {100}, None) == 101
    assert choose_port(100, 103, set(), 101) == 102  # a new attempt: not its last port
    assert choose_port(100, 103, {100}, 103) == 101  # wraps around
    assert choose_port(100, 101, {100, 101}, None) is None  # the range is full


def test_torchrun_counts_processes_and_sets_its_pet_variables():
    meeting = Meeting(hosts=("10.0.0.2", "10.0.0.3"), port=29501, attempt=2)
    env = worker_env(Shape(Framework.PYTORCH, gpus_per_worker=4), meeting, 1)
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.0.0.2"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29501"
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("2", "1", "4")
    assert env["WORLD_SIZE"] == "8"  # processes: 2 nodes x 4
    assert env["PET_NNODES"] == "2" and env["PET_NODE_RANK"] == "1"
    assert env["TORCHELASTIC_RUN_ID"] == "attempt-2"
    generic = worker_env(Shape(gpus_per_worker=4), meeting, 1)
    assert generic["WORLD_SIZE"] == "2" and "PET_NNODES" not in generic


def test_tf_config_names_every_role_and_this_task():
    hosts = ("a", "b", "c", "c")  # two tasks on node c take consecutive ports
    meeting = Meeting(hosts=hosts, port=2222, attempt=1)
    shape = Shape(Framework.TENSORFLOW, ps_workers=1)
    assert roles(shape, 4) == ("chief", "ps", "worker", "worker")
    assert role_counts(shape, 4) == {"chief": 1, "ps": 1, "worker": 2}
    configs = [json.loads(worker_env(shape, meeting, r)["TF_CONFIG"]) for r in range(4)]
    assert configs[0]["cluster"] == {
        "chief": ["a:2222"],
        "ps": ["b:2222"],
        "worker": ["c:2222", "c:2223"],
    }
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0},
        {"type": "ps", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)


def test_mpi_gives_the_launcher_the_hosts_with_their_slots():
    shape = Shape(Framework.MPI, gpus_per_worker=2)
    env = worker_env(shape, Meeting(hosts=("a", "b", "a"), port=2000, attempt=1), 0)
    assert env["MPI_HOSTS"] == "a:4,b:2"
    assert env["WORKER_ROLE"] == "launcher" and env["WORLD_SIZE"] == "6"
    assert hostfile(shape, ("a", "b", "a")) == "a slots=4\nb slots=2\n"


def test_mpi_workers_get_the_exec_channel_one_server_per_node():
    shape = Shape(Framework.MPI, gpus_per_worker=1)
    meeting = Meeting(hosts=("a", "b", "a", "c", "b"), port=2000, attempt=3)
    envs = [worker_env(shape, meeting, rank, token="t0k") for rank in range(5)]
    # rank 0 launches; the first worker on each other node serves it; the rest (rank 0's
    # node included) wait on their node's server.
    assert [e["MPI_EXEC_ROLE"] for e in envs] == ["launcher", "serve", "follow", "serve", "follow"]
    assert [e["MPI_EXEC_ADDR"] for e in envs] == ["a", "b", "a", "c", "b"]
    assert {e["MPI_EXEC_SERVERS"] for e in envs} == {"b,c"}
    assert {(e["MPI_EXEC_PORT"], e["MPI_EXEC_TOKEN"]) for e in envs} == {("2000", "t0k")}
    # No channel without the console's token, and none for other frameworks.
    assert "MPI_EXEC_ROLE" not in worker_env(shape, meeting, 0)
    pytorch = Shape(Framework.PYTORCH, gpus_per_worker=1)
    assert not any(k.startswith("MPI_") for k in worker_env(pytorch, meeting, 1, token="t"))


def test_node_facts_send_address_and_ports_only_when_set():
    assert "address" not in NodeFacts().model_dump()  # an older console refuses them
    facts = NodeFacts(address="10.0.0.2", rendezvous_ports=(30000, 30009))
    assert facts.model_dump()["rendezvous_ports"] == (30000, 30009)
    with pytest.raises(ValueError, match="first port"):
        NodeFacts(rendezvous_ports=(30009, 30000))


# -- the console ---------------------------------------------------------------------------


def test_a_node_is_reached_at_its_advertised_address_else_where_it_registered_from(db, client):
    advertised, _ = register(client, "a", address="10.0.0.2", rendezvous_ports=[30000, 30009])
    assert advertised.address == "10.0.0.2"
    assert (advertised.rendezvous_port_first, advertised.rendezvous_port_last) == (30000, 30009)
    seen, token = register(client, "b")
    assert seen.address == "127.0.0.1"  # what the console saw (the test client's address)
    assert heartbeat(client, token, address="10.0.0.9").status_code == 200
    seen.refresh_from_db()
    assert seen.address == "10.0.0.9"


def _specs(client, token, workers=()) -> dict[int, dict]:
    reply = heartbeat(client, token, workers=workers).json()
    return {spec["rank"]: spec for spec in reply["run"]}


@pytest.fixture
def two_nodes(db, client):
    a, token_a = register(client, "a", address="10.0.0.2", rendezvous_ports=[30000, 30001])
    b, token_b = register(client, "b", address="10.0.0.3", rendezvous_ports=[30000, 30001])
    return (a, token_a), (b, token_b)


def _job(researcher, workspace, quota, **spec) -> Job:
    return create_job(
        user=researcher,
        workspace=workspace,
        quota=quota,
        spec=JobSpec(name="ddp", image="pytorch:2", command="torchrun train.py", **spec),
    )


def test_every_worker_meets_at_rank_zeros_node_and_port(
    client, two_nodes, researcher, workspace, quota
):
    (a, token_a), (b, token_b) = two_nodes
    job = _job(
        researcher,
        workspace,
        quota,
        workers=2,
        gpus_per_worker=8,
        distributed={"framework": "pytorch", "nproc_per_node": 0},
    )
    run_cycle()
    job.refresh_from_db()
    master = {p.rank: p.node_id for p in Pod.objects.filter(job=job)}[0]
    addresses = {a.pk: "10.0.0.2", b.pk: "10.0.0.3"}
    specs = {**_specs(client, token_a), **_specs(client, token_b)}
    assert set(specs) == {0, 1}
    for rank, spec in specs.items():
        env = spec["rendezvous"]
        assert env["MASTER_ADDR"] == addresses[master]
        assert env["MASTER_PORT"] == str(job.rendezvous_port) == "30000"
        assert (env["NODE_RANK"], env["NNODES"], env["NPROC_PER_NODE"]) == (str(rank), "2", "8")
        assert env["WORLD_SIZE"] == "16"
    assert job.rendezvous_node_id == master and job.rendezvous_attempt == 1

    # A second job whose rank 0 lands on the same node gets the other port of its range.
    other = _job(researcher, workspace, quota, workers=1, gpus_per_worker=0)
    run_cycle()
    other.refresh_from_db()
    same = other.rendezvous_node_id == job.rendezvous_node_id
    assert other.rendezvous_port == (30001 if same else 30000)
    # Once the first job is final its port is free again (the row keeps it, as a record).
    Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED)
    third = _job(researcher, workspace, quota, workers=1, gpus_per_worker=0)
    run_cycle()
    third.refresh_from_db()
    assert third.rendezvous_port in (30000, 30001)


def test_a_synchronous_restart_gives_every_worker_the_new_attempts_rendezvous(
    client, two_nodes, researcher, workspace, quota
):
    (a, token_a), (b, token_b) = two_nodes
    job = _job(
        researcher,
        workspace,
        quota,
        workers=2,
        gpus_per_worker=8,
        fault_tolerance=True,
        ft_config={"policy": "OnFailure", "max_restarts": 3},
    )
    run_cycle()
    job.refresh_from_db()
    first_port = job.rendezvous_port
    pods = {p.node_id: p for p in Pod.objects.filter(job=job)}
    heartbeat(client, token_a, workers=[running(pods[a.pk])])
    heartbeat(client, token_b, workers=[running(pods[b.pk])])
    # One worker fails: the whole job restarts (Synchronous); the other is stopped.
    heartbeat(client, token_a, workers=[exited(pods[a.pk], 1, "boom")])
    heartbeat(client, token_b, workers=[exited(pods[b.pk], 143)])
    job.refresh_from_db()
    assert job.attempt == 2 and job.status == JobStatus.PENDING, job.status_reason
    run_cycle()
    job.refresh_from_db()
    assert job.rendezvous_attempt == 2
    assert job.rendezvous_port != first_port  # never the old master's port
    specs = {**_specs(client, token_a), **_specs(client, token_b)}
    assert {s["attempt"] for s in specs.values()} == {2}
    assert {s["rendezvous"]["MASTER_PORT"] for s in specs.values()} == {str(job.rendezvous_port)}
    assert Pod.objects.filter(job=job, attempt=2, status=PodStatus.STARTING).count() == 2


def test_an_mpi_attempt_carries_its_own_exec_token_to_every_worker(
    client, two_nodes, researcher, workspace, quota, api_token
):
    (a, token_a), (b, token_b) = two_nodes
    job = _job(
        researcher,
        workspace,
        quota,
        workers=2,
        gpus_per_worker=8,
        distributed={"framework": "mpi"},
        fault_tolerance=True,
        ft_config={"policy": "OnFailure", "max_restarts": 3},
    )
    run_cycle()
    specs = {**_specs(client, token_a), **_specs(client, token_b)}
    envs = {rank: spec["rendezvous"] for rank, spec in specs.items()}
    assert [envs[r]["MPI_EXEC_ROLE"] for r in (0, 1)] == ["launcher", "serve"]
    first = envs[0]["MPI_EXEC_TOKEN"]
    assert len(first) == 40 and envs[1]["MPI_EXEC_TOKEN"] == first
    assert envs[0]["MPI_EXEC_SERVERS"] == envs[1]["MPI_EXEC_ADDR"] != envs[0]["MPI_EXEC_ADDR"]

    pods = {p.node_id: p for p in Pod.objects.filter(job=job)}
    heartbeat(client, token_a, workers=[exited(pods[a.pk], 1, "boom")])
    heartbeat(client, token_b, workers=[exited(pods[b.pk], 143)])
    run_cycle()
    again = {**_specs(client, token_a), **_specs(client, token_b)}
    tokens = {spec["rendezvous"]["MPI_EXEC_TOKEN"] for spec in again.values()}
    assert len(tokens) == 1 and first not in tokens  # the next attempt's, not the last one's
    # The token is a secret of the attempt: the job's API and page never show it.
    shown = client.get(f"/api/v1/jobs/{job.pk}", headers={"Authorization": f"Bearer {api_token}"})
    assert shown.status_code == 200 and shown.json()["rendezvous"]["attempt"] == 2
    assert not tokens & {*json.dumps(shown.json()).split('"')}
    client.force_login(researcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "rendezvous" in page.lower() and not any(t in page for t in tokens)
