"""The Kubernetes backend's functional core (kube.decisions, kube.objects, kube.manifest):
pure, no API server needed (docs/kubernetes.md)."""

import dataclasses

import pytest

from kube.config import KubeConfig
from kube.decisions import FOREIGN, ConsolePod, Do, Step, gpu_rows, plan_pod
from kube.manifest import WorkerFacts, pod_manifest
from kube.objects import FINALIZER, Observed, Seen, gpu_request, observe, parse_node, quantity
from protocol import preflight

CONFIG = KubeConfig(api_url="https://k", token="t", namespace="ns", checkpoint_claim="ckpt")


def console(status="Running", stopping=False, live=True, attempt=1) -> ConsolePod:
    return ConsolePod(
        pk=7, job_id=3, rank=0, attempt=attempt, status=status, stopping=stopping,
        grace_seconds=30, live=live,
    )  # fmt: skip


def seen(kind: Seen, deleting=False, exit_code=None, error="") -> Observed:
    return Observed(
        name="job-3-w0-a1", pod_id=7, attempt=1, job_id=3, rank=0, node_name="n",
        seen=kind, deleting=deleting, exit_code=exit_code, error=error,
    )  # fmt: skip


def plan(pod, api, *, ready=True, done=False, blocked=False) -> list[Step]:
    return plan_pod(pod, api, node_ready=ready, logs_done=done, rank_blocked=blocked)


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("15500m", 15.5), ("131072Ki", 131072 * 1024), ("2Gi", 2 * 2**30), ("x", 0)],
)
def test_quantities(text, value):
    assert quantity(text) == value


def test_foreign_gpus_take_the_highest_free_slots_and_never_the_consoles():
    rows = gpu_rows(8, 3, held=[6, 7], blocked="", gpu_name="")
    taken = [r["index"] for r in rows if not r["healthy"]]
    assert taken == [3, 4, 5] and {r["health_reason"] for r in rows if not r["healthy"]} == {
        FOREIGN
    }
    assert [r["index"] for r in rows if r["healthy"]] == [0, 1, 2, 6, 7]


def test_a_blocked_node_has_no_free_gpu_but_keeps_the_held_ones():
    rows = gpu_rows(4, 0, held=[1], blocked="NotReady in Kubernetes", gpu_name="")
    assert [r["healthy"] for r in rows] == [False, True, False, False]


def test_more_foreign_gpus_than_free_slots_takes_all_free_ones():
    rows = gpu_rows(4, 9, held=[0], blocked="", gpu_name="")
    assert [r["healthy"] for r in rows] == [True, False, False, False]


def _node(ready="True", **spec) -> dict:
    return {
        "metadata": {"name": "n", "labels": {}},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_node_parsing_and_what_blocks_a_node():
    node = parse_node(_node(), CONFIG)
    assert (node.gpus, node.cpus, node.memory_gb, node.ready, node.blocked) == (
        8,
        64,
        512,
        True,
        "",
    )
    assert parse_node(_node("False"), CONFIG).blocked == "NotReady in Kubernetes"
    assert "unschedulable" in parse_node(_node(unschedulable=True), CONFIG).blocked
    taint = [{"key": "maintenance", "effect": "NoSchedule"}]
    assert "maintenance" in parse_node(_node(taints=taint), CONFIG).blocked
    gpu_taint = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]  # our pods tolerate it
    assert parse_node(_node(taints=gpu_taint), CONFIG).blocked == ""


def test_gpu_request_counts_containers_and_the_largest_init_container():
    def c(n):
        return {"resources": {"limits": {"nvidia.com/gpu": str(n)}}}

    assert gpu_request({"spec": {"containers": [c(2), c(1)], "initContainers": [c(4)]}},
                       "nvidia.com/gpu") == 4  # fmt: skip
    assert gpu_request({"spec": {"containers": [c(2), c(1)]}}, "nvidia.com/gpu") == 3


def _pod(phase, state=None, reason="", deleting=False) -> dict:
    status = {"phase": phase, "reason": reason}
    if state:
        status["containerStatuses"] = [{"name": "worker", "state": state}]
    meta = {"name": "p", "labels": {"gpu-console.io/pod-id": "7"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}, "status": status}


def test_pod_status_mapping():
    assert observe(_pod("Pending")).seen == Seen.PENDING
    assert observe(_pod("Running", {"running": {}})).seen == Seen.RUNNING
    done = observe(_pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}))
    assert (done.seen, done.exit_code, done.error) == (Seen.EXITED, 137, "OOMKilled")
    assert observe(_pod("Succeeded")).exit_code == 0
    assert observe(_pod("Failed", reason="OutOfnvidia.com/gpu")).seen == Seen.REJECTED
    assert observe(_pod("Failed", reason="Evicted")).seen == Seen.EVICTED
    assert observe(_pod("Running", {"running": {}}, deleting=True)).deleting


def test_plan_creates_once_the_old_copy_is_gone_and_the_node_is_ready():
    assert plan(console("Starting"), None) == [Step(Do.CREATE)]
    assert plan(console("Starting"), None, blocked=True) == [Step(Do.WAIT)]
    assert plan(console("Starting"), None, ready=False) == [Step(Do.WAIT)]


def test_plan_reads_the_log_before_recording_the_end():
    exited = seen(Seen.EXITED, exit_code=0)
    assert plan(console(), exited) == [Step(Do.FOLLOW)]
    assert plan(console(), exited, done=True) == [Step(Do.EXIT, "", exit_code=0)]


def test_plan_starts_only_on_a_ready_node():
    running = seen(Seen.RUNNING)
    assert plan(console("Starting"), running) == [Step(Do.START), Step(Do.FOLLOW)]
    assert plan(console("Unknown"), running, ready=False) == [Step(Do.FOLLOW)]


def test_a_console_stop_deletes_with_the_grace_and_ends_as_ordered():
    stopping = console(stopping=True)
    assert plan(stopping, seen(Seen.RUNNING))[-1] == Step(Do.DELETE, grace=30)
    assert plan(stopping, seen(Seen.RUNNING, deleting=True)) == [Step(Do.FOLLOW)]
    ended = seen(Seen.EXITED, deleting=True, exit_code=143)
    assert plan(stopping, ended, done=True) == [Step(Do.EXIT, "", exit_code=143)]
    assert plan(stopping, None) == [Step(Do.EXIT, "stopped before it was created")]


def test_the_cluster_taking_a_pod_away_is_a_loss_not_a_failure():
    evicted = seen(Seen.EVICTED, error="Evicted: memory pressure")
    assert plan(console(), evicted, done=True)[0].do == Do.LOSE
    deleted = seen(Seen.EXITED, deleting=True, exit_code=143)
    assert plan(console(), deleted, done=True)[0].do == Do.LOSE
    assert plan(console(), None)[0] == Step(Do.LOSE, "the pod was deleted in Kubernetes")


def test_refusals_requeue_and_finished_pods_are_released():
    refused = seen(Seen.REJECTED, error="OutOfnvidia.com/gpu")
    assert plan(console("Starting"), refused)[0].do == Do.REQUEUE
    assert plan(console("Succeeded", live=False), seen(Seen.EXITED)) == [Step(Do.RELEASE)]
    assert plan(None, seen(Seen.RUNNING)) == [Step(Do.RELEASE)]
    assert plan(console("Lost", live=False), None) == []


def test_the_manifest():
    facts = WorkerFacts(
        pod_id=7, job_id=3, rank=1, attempt=2, world_size=2, node_name="n1", image="img",
        command="python t.py", gpus=4, cpus=8, memory_gb=64, grace_seconds=45,
        workspace_id=5, resume_from="/checkpoints/ws-5/job-3/step-9",
        env={"LR": "0.1"},
    )  # fmt: skip
    pod = pod_manifest(facts, CONFIG)
    assert pod["metadata"]["name"] == "job-3-w1-a2"
    assert pod["metadata"]["finalizers"] == [FINALIZER]
    spec = pod["spec"]
    assert (spec["nodeName"], spec["restartPolicy"], spec["terminationGracePeriodSeconds"]) == (
        "n1", "Never", 45
    )  # fmt: skip
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["RANK"], env["WORLD_SIZE"], env["ATTEMPT"]) == ("1", "2", "2")
    assert env["CHECKPOINT_DIR"] == "/checkpoints/ws-5/job-3"
    assert env["RESUME_FROM"] == "/checkpoints/ws-5/job-3/step-9"
    assert spec["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
    ]


def test_the_manifest_mounts_data_read_only_from_the_workspace_area():
    facts = WorkerFacts(
        pod_id=7, job_id=3, rank=0, attempt=1, world_size=1, node_name="n1", image="img",
        command="python t.py", gpus=0, cpus=1, memory_gb=1, grace_seconds=5,
        workspace_id=5, data={"mnist": "datasets/mnist"},
    )  # fmt: skip
    container = pod_manifest(facts, CONFIG)["spec"]["containers"][0]
    assert container["volumeMounts"][1] == {
        "name": "checkpoints",
        "mountPath": "/data/mnist",
        "subPath": "ws-5/datasets/mnist",
        "readOnly": True,
    }
    assert {e["name"]: e["value"] for e in container["env"]}["DATA_MNIST"] == "/data/mnist"


def test_the_manifest_rehearses_a_run_that_starts_from_nothing():
    """The preflight (docs/results.md, "Before a long run"): the Pod runs the shell script,
    the job's command in RUN_COMMAND; not for a resuming attempt, nor without a volume
    (no OUTPUT_DIR)."""
    fresh = WorkerFacts(
        pod_id=7, job_id=3, rank=0, attempt=1, world_size=1, node_name="n1", image="img",
        command="python t.py --epochs 3", gpus=0, cpus=1, memory_gb=1, grace_seconds=5,
        workspace_id=5, preflight_seconds=20,
    )  # fmt: skip
    container = pod_manifest(fresh, CONFIG)["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c", preflight.wrapped(20)]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[preflight.COMMAND_ENV] == "python t.py --epochs 3" and "OUTPUT_DIR" in env
    assert [e["name"] for e in container["env"]] == sorted(env)

    resuming = dataclasses.replace(fresh, attempt=2, resume_from="/checkpoints/ws-5/job-3/s9")
    no_volume = dataclasses.replace(CONFIG, checkpoint_claim="")
    for facts, config in ((resuming, CONFIG), (fresh, no_volume)):
        container = pod_manifest(facts, config)["spec"]["containers"][0]
        assert container["command"] == ["/bin/sh", "-c", "python t.py --epochs 3"]
        assert preflight.COMMAND_ENV not in {e["name"] for e in container["env"]}
