"""policy.derive.derive_job_transitions: the job status follows its workers (pure table)."""

import pytest

from policy.derive import JobChange, PodView, derive_job_transitions
from policy.statuses import JobStatus, PodStatus

S, P = JobStatus, PodStatus


def pods(*statuses, exit_codes=None, reasons=None):
    exit_codes = exit_codes or [None] * len(statuses)
    reasons = reasons or [""] * len(statuses)
    return [
        PodView(rank, status, code, why)
        for rank, (status, code, why) in enumerate(zip(statuses, exit_codes, reasons, strict=True))
    ]


@pytest.mark.parametrize(
    ("status", "workers", "expected"),
    [
        pytest.param(S.PENDING, pods(P.RUNNING), [], id="not-placed-ignored"),
        pytest.param(S.COMPLETED, pods(P.FAILED, exit_codes=[1]), [], id="final-job-ignored"),
        pytest.param(S.STARTING, [], [], id="no-workers"),
        pytest.param(S.STARTING, pods(P.STARTING, P.RUNNING), [], id="still-starting"),
        pytest.param(
            S.STARTING,
            pods(P.RUNNING, P.RUNNING),
            [JobChange(S.RUNNING, "all workers running")],
            id="all-running",
        ),
        pytest.param(S.RUNNING, pods(P.RUNNING, P.RUNNING), [], id="steady"),
        pytest.param(S.RUNNING, pods(P.SUCCEEDED, P.RUNNING), [], id="one-done-one-running"),
        pytest.param(
            S.RUNNING,
            pods(P.SUCCEEDED, P.SUCCEEDED),
            [JobChange(S.COMPLETED, "all workers exited 0", 0)],
            id="completed",
        ),
        pytest.param(
            S.STARTING,
            pods(P.SUCCEEDED),
            [
                JobChange(S.RUNNING, "all workers running"),
                JobChange(S.COMPLETED, "all workers exited 0", 0),
            ],
            id="finished-before-seen-running",
        ),
        pytest.param(
            S.RUNNING,
            pods(
                P.RUNNING,
                P.FAILED,
                P.FAILED,
                exit_codes=[None, 1, 2],
                reasons=["", "NCCL timeout", ""],
            ),
            [JobChange(S.FAILED, "worker 1 exited 1: NCCL timeout", 1)],
            id="lowest-failed-rank-named",
        ),
        pytest.param(
            S.STARTING,
            pods(P.FAILED),
            [JobChange(S.FAILED, "worker 0 failed", None)],
            id="failed-without-exit-code",
        ),
        pytest.param(
            S.RUNNING,
            pods(P.LOST, P.RUNNING),
            [JobChange(S.FAILED, "worker 0 lost: node lost", None)],
            id="lost-worker",
        ),
        pytest.param(
            S.RUNNING,
            pods(P.STOPPED, P.RUNNING, exit_codes=[137, None]),
            [JobChange(S.FAILED, "worker 0 exited 137", 137)],
            id="worker-stopped-without-job-stop",
        ),
        pytest.param(S.RUNNING, pods(P.UNKNOWN, P.RUNNING), [], id="unknown-waits"),
    ],
)
def test_derive_without_stop(status, workers, expected):
    assert derive_job_transitions(status, workers) == expected


@pytest.mark.parametrize(
    ("workers", "final", "reason", "expected"),
    [
        pytest.param(pods(P.STOPPED, P.RUNNING), S.STOPPED, "by alice", [], id="still-exiting"),
        pytest.param(
            pods(P.STOPPED, P.STOPPED),
            S.STOPPED,
            "stopped by alice",
            [JobChange(S.STOPPED, "stopped by alice")],
            id="all-exited",
        ),
        pytest.param(
            pods(P.STOPPED, P.FAILED, exit_codes=[143, 1]),
            S.STOPPED,
            "stopped by alice",
            [JobChange(S.STOPPED, "stopped by alice")],
            id="failure-during-stop-is-still-stopped",
        ),
        pytest.param(
            pods(P.TERMINATED),
            S.TERMINATED,
            "terminated by the system",
            [JobChange(S.TERMINATED, "terminated by the system")],
            id="terminated",
        ),
        pytest.param(
            pods(P.STOPPED), S.STOPPED, "", [JobChange(S.STOPPED, "stopped")], id="no-reason"
        ),
    ],
)
def test_derive_with_stop_requested(workers, final, reason, expected):
    got = derive_job_transitions(
        S.RUNNING, workers, stop_requested=True, stop_final_status=final, stop_reason=reason
    )
    assert got == expected
