"""Counted results on Kubernetes, the functional core (docs/results.md, "Kubernetes"): the
validator's plan and Pod, the image check of a resumed worker, the free-space rule on the
volume; no API server needed."""

from datetime import UTC, datetime, timedelta

from kube.client import KubeError
from kube.config import KubeConfig
from kube.decisions import (
    VALIDATOR_GONE,
    ConsolePod,
    Do,
    Step,
    image_digest,
    image_refusal,
    plan_pod,
    plan_validation,
)
from kube.manifest import WorkerFacts, validator_manifest, validator_name
from kube.objects import (
    VALIDATES,
    VALIDATOR_MARK,
    Observed,
    Seen,
    ValidatorSeen,
    is_validator,
    observe,
    observe_validator,
)
from kube.validation import Validators
from kube.volumes import output_space_problem, result_folder
from protocol import limits
from protocol.agent import ResumeIdentity
from protocol.freespace import free_space_problem

CONFIG = KubeConfig(api_url="https://k", token="t", namespace="ns", checkpoint_claim="ckpt")
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
DIGEST_A = "sha256:5d1f0c2e8a41" + "0" * 52
DIGEST_B = "sha256:77aa9e1c0b3d" + "0" * 52


def rank0(validates=True, stopping=False) -> ConsolePod:
    return ConsolePod(
        pk=7, job_id=3, rank=0, attempt=1, status="Running", stopping=stopping,
        grace_seconds=30, live=True, validates=validates,
    )  # fmt: skip


def exited(code=0, made=False, deleting=False) -> Observed:
    return Observed(
        name="job-3-w0-a1", pod_id=7, attempt=1, job_id=3, rank=0, node_name="n",
        seen=Seen.EXITED, exit_code=code, deleting=deleting, validator_made=made,
    )  # fmt: skip


def validator(ended=False, code=None, timed_out=False, error="", age=10) -> ValidatorSeen:
    return ValidatorSeen(
        name="job-3-w0-a1-validator", worker="job-3-w0-a1", ended=ended, exit_code=code,
        timed_out=timed_out, error=error, created_at=NOW - timedelta(seconds=age),
    )  # fmt: skip


def plan(pod, api, v=None, done=True) -> list[Step]:
    return plan_pod(
        pod, api, node_ready=True, logs_done=done, rank_blocked=False, validator=v, now=NOW
    )


# -- the validator's plan -------------------------------------------------------------------


def test_rank_0s_exit_0_waits_for_its_validator():
    assert plan(rank0(), exited(), done=False) == [Step(Do.FOLLOW)]  # the log first
    assert plan(rank0(), exited()) == [Step(Do.VALIDATE)]
    assert plan(rank0(), exited(made=True), validator()) == [Step(Do.WAIT)]
    assert plan(rank0(), exited(made=True), validator(ended=True, code=0)) == [
        Step(Do.JUDGE, exit_code=0, read_log=True)
    ]
    assert plan(rank0(), exited(made=True), validator(ended=True, code=3)) == [
        Step(Do.JUDGE, exit_code=3, read_log=True)
    ]


def test_a_validator_that_is_gone_late_or_broken_did_not_run():
    seconds = limits.RESULT_VALIDATOR_SECONDS
    timed_out = f"timed out after {seconds} s"
    assert plan_validation(True, None, NOW) == [Step(Do.JUDGE, VALIDATOR_GONE)]
    assert plan_validation(True, validator(ended=True, timed_out=True), NOW) == [
        Step(Do.JUDGE, timed_out, read_log=True)
    ]
    # No kubelet said so: the console's own bound, a little past the deadline.
    overdue = validator(age=seconds + limits.KUBE_VALIDATOR_GRACE_SECONDS + 1)
    assert plan_validation(True, overdue, NOW) == [Step(Do.JUDGE, timed_out, read_log=True)]
    assert plan_validation(True, validator(age=seconds), NOW) == [Step(Do.WAIT)]
    broken = validator(ended=True, error="Failed: ErrImagePull")
    assert plan_validation(True, broken, NOW) == [
        Step(Do.JUDGE, "Failed: ErrImagePull", read_log=True)
    ]


def test_only_rank_0s_exit_0_without_a_stop_is_validated():
    assert plan(rank0(validates=False), exited()) == [Step(Do.EXIT, "", exit_code=0)]
    assert plan(rank0(), exited(code=1)) == [Step(Do.EXIT, "", exit_code=1)]
    assert plan(rank0(stopping=True), exited()) == [Step(Do.EXIT, "", exit_code=0)]
    assert plan(rank0(), exited(deleting=True))[0].do == Do.LOSE


def _validator_pod(phase: str, terminated=None, reason="") -> dict:
    status: dict = {"phase": phase, "reason": reason, "message": "past its deadline"}
    if terminated is not None:
        status["containerStatuses"] = [{"name": "validator", "state": {"terminated": terminated}}]
    meta = {
        "name": "job-3-w0-a1-validator",
        "labels": {VALIDATES: "job-3-w0-a1"},
        "creationTimestamp": "2026-12-04T11:59:50Z",
    }
    return {"metadata": meta, "status": status}


def test_reading_a_validator_pod():
    running = _validator_pod("Running")
    assert is_validator(running)
    seen = observe_validator(running)
    assert (seen.worker, seen.ended, seen.created_at) == (
        "job-3-w0-a1",
        False,
        NOW - timedelta(seconds=10),
    )
    assert observe_validator(_validator_pod("Failed", {"exitCode": 3})).exit_code == 3
    late = observe_validator(_validator_pod("Failed", reason="DeadlineExceeded"))
    assert late.ended and late.timed_out and late.exit_code is None
    worker = {"metadata": {"name": "w", "uid": "u-1", "annotations": {VALIDATOR_MARK: "x"}}}
    assert not is_validator(worker)
    assert observe(worker).validator_made and observe(worker).uid == "u-1"


# -- the validator's Pod --------------------------------------------------------------------


FACTS = WorkerFacts(
    pod_id=7, job_id=3, rank=0, attempt=2, world_size=2, node_name="n1", image="img@sha256:ab",
    command="python t.py", gpus=4, cpus=8, memory_gb=64, grace_seconds=45, workspace_id=5,
    env={"LR": "0.1"}, result_validator="test -s p1.csv && echo ok",
)  # fmt: skip


def test_the_validator_pod():
    """Read-only volume, no token, the deadline, no GPUs, on the worker's node, owned by the
    worker Pod, never taken for a worker (no pod-id label)."""
    result = "/checkpoints/ws-5/job-3/output/result"
    pod = validator_manifest(FACTS, CONFIG, "uid-1", result)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == validator_name("job-3-w0-a2") == "job-3-w0-a2-validator"
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-console",
        VALIDATES: "job-3-w0-a2",
    }
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "job-3-w0-a2", "uid": "uid-1"}
    ]
    assert "finalizers" not in meta
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == limits.RESULT_VALIDATOR_SECONDS
    assert spec["automountServiceAccountToken"] is False
    assert spec["nodeName"] == "n1"
    assert spec["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
    ]
    (container,) = spec["containers"]
    assert container["image"] == "img@sha256:ab"
    assert container["command"] == ["/bin/sh", "-c", "test -s p1.csv && echo ok"]
    assert container["workingDir"] == result
    assert container["volumeMounts"] == [
        {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}
    ]
    assert "resources" not in container  # no GPUs
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["RESULT_DIR"], env["LR"], env["ATTEMPT"]) == (result, "0.1", "2")
    # Without a volume there is nothing to validate.
    no_volume = KubeConfig(api_url="https://k", token="t")
    assert validator_manifest(FACTS, no_volume, "uid-1", result) is None


class _Logs:
    def __init__(self, body: bytes | Exception) -> None:
        self.body = body

    def log_tail(self, name, container, lines, limit_bytes) -> bytes:
        assert (container, lines) == ("validator", limits.RESULT_VALIDATOR_LINES)
        if isinstance(self.body, Exception):
            raise self.body
        return self.body


def test_the_validators_report_is_its_last_lines_and_an_unreadable_log_is_empty():
    lines = b"".join(b"2026-12-04T12:00:00.5Z line %d\n" % i for i in range(30))
    report = Validators(_Logs(lines), CONFIG, print).report(
        Step(Do.JUDGE, exit_code=3, read_log=True), "v"
    )
    assert report.exit_code == 3
    assert report.output.splitlines() == [f"line {i}" for i in range(10, 30)]
    broken = Validators(_Logs(KubeError(502, "", "no kubelet")), CONFIG, print)
    assert broken.report(Step(Do.JUDGE, exit_code=0, read_log=True), "v").output == ""
    late = broken.report(Step(Do.JUDGE, "timed out after 600 s", read_log=True), "v")
    assert (late.exit_code, late.output) == (None, "timed out after 600 s")
    huge = Validators(_Logs(b"x" * 5000 + b"\n"), CONFIG, print)
    assert len(huge.report(Step(Do.JUDGE, exit_code=1, read_log=True), "v").output) == (
        limits.RESULT_VALIDATOR_OUTPUT
    )


# -- a resumed worker's image ---------------------------------------------------------------


def test_a_resumed_worker_is_refused_when_its_image_changed():
    run = ResumeIdentity(run_id="train-1", carried=2, units="partitions",
                         image_digest=f"docker.io/library/x@{DIGEST_A}")  # fmt: skip
    assert image_digest(f"docker-pullable://x@{DIGEST_A}") == DIGEST_A
    # The same digest through another runtime's prefix: the same image.
    assert image_refusal(run, f"docker-pullable://x@{DIGEST_A}") == ""
    assert image_refusal(run, f"docker.io/library/x@{DIGEST_B}") == (
        "resume refused: the image 5d1f0c2e8a41 → 77aa9e1c0b3d changed since run train-1; its "
        "2 accepted partitions were made by the old one. Restart from scratch (a new job in a "
        "folder of its own, nothing carried), or restore it."
    )
    # What either side does not know, or ids of another kind (an engine's image id against
    # a registry digest), are not compared.
    assert image_refusal(None, f"x@{DIGEST_B}") == ""
    assert image_refusal(run, "") == ""
    assert image_refusal(run.model_copy(update={"image_digest": ""}), f"x@{DIGEST_B}") == ""
    assert image_refusal(run.model_copy(update={"image_digest": DIGEST_A}), f"x@{DIGEST_B}") == ""
    engine = run.model_copy(update={"image_digest": DIGEST_A})
    assert "the image 5d1f0c2e8a41 → 77aa9e1c0b3d" in image_refusal(engine, DIGEST_B)


# -- free space on the volume ---------------------------------------------------------------


def test_the_free_space_rule_names_the_folder_as_the_worker_sees_it(tmp_path):
    def disk(free):
        return lambda _path: (100 * 10**9, 0, free)

    assert free_space_problem(tmp_path, 5, usage=disk(10**9), shown="/checkpoints/x") == (
        "not enough free space for the output: 1.0 GB free on /checkpoints/x, the job expects 5 GB"
    )


def test_the_volume_is_measured_at_the_workers_output_folder(tmp_path):
    root = tmp_path / "root"
    config = KubeConfig(
        api_url="https://k", token="t", checkpoint_hostpath=str(root), checkpoint_root=str(root)
    )
    staging = root / "ws-5" / "job-3" / "output" / "job-3" / "attempt-2"
    staging.mkdir(parents=True)
    problem = output_space_problem(config, 5, 3, "", 2, 10**6)  # a petabyte
    assert problem.startswith("not enough free space for the output: ")
    assert problem.endswith(
        " free on /checkpoints/ws-5/job-3/output/job-3/attempt-2, the job expects 1,000,000 GB"
    )
    assert output_space_problem(config, 5, 3, "", 2, None) == ""  # the floor: 64 MB
    # Nothing measured without the console's mount: the start goes on.
    assert output_space_problem(KubeConfig(api_url="https://k", token="t"), 5, 3, "", 2, 1) == ""
    assert result_folder(config, 5, 3, "") == "/checkpoints/ws-5/job-3/output/result"
