"""Table tests for the pure fault-tolerance policy: `classify()` (the default rules, in their
documented order) and `decide()` (policies, budgets, hangs, fault tolerance off, backoff)."""

import pytest

from policy.faulttolerance.classify import DEFAULT_RULES, Rule, Verdict, classify
from policy.faulttolerance.policy import (
    Action,
    Counters,
    Failure,
    FailureKind,
    FtConfig,
    HangAction,
    RestartPolicy,
    RunType,
    backoff_for,
    decide,
)

ON = FtConfig(enabled=True)  # Synchronous, ExitCodeAndErrorMsg, 3 restarts
OFF = FtConfig(enabled=False)
R, NO, ELSE = Verdict.RETRY, Verdict.NO_RETRY, Verdict.RETRY_ELSEWHERE


@pytest.mark.parametrize(
    ("exit_code", "message", "verdict", "rule"),
    [
        # Retryable infrastructure failures, matched on the error text whatever the code.
        (1, "RuntimeError: NCCL watchdog: collective operation timeout", R, "NCCL timeout"),
        (1, "NCCL communicator timed out after 600000 ms", R, "NCCL timeout"),
        (1, "Watchdog caught collective operation timeout: WorkNCCL", R, "NCCL timeout"),
        (
            1,
            "torch.distributed.DistBackendError: NCCL error in: ncclInternalError",
            R,
            "NCCL error",
        ),
        (1, "NCCL WARN Net/IB : Got completion with error", R, "NCCL error"),
        (1, "ncclSystemError: System call failed", R, "NCCL error"),
        (1, "RuntimeError: CUDA error: uncorrectable ECC error encountered", ELSE, "ECC error"),
        (134, "ECC error detected on GPU 3", ELSE, "ECC error"),
        (1, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", ELSE, "Xid error"),
        (1, "RuntimeError: CUDA error: an illegal memory access was encountered", R, "CUDA error"),
        (1, "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx", R, "CUDA error"),
        (1, "cudaErrorLaunchFailure", R, "CUDA error"),
        (1, "rendezvous failed: node lost", R, "lost node"),
        (1, "ConnectionResetError: connection reset by peer", R, "lost node"),
        # OOM-killed by exit code alone.
        (137, "", R, "OOM killed"),
        # User errors: never retried.
        (1, '  File "train.py", line 3\nSyntaxError: invalid syntax', NO, "SyntaxError"),
        (1, "ModuleNotFoundError: No module named 'transformers'", NO, "ModuleNotFoundError"),
        (1, "ImportError: cannot import name 'foo' from 'bar'", NO, "ImportError"),
        (
            2,
            "usage: train.py [-h] [--lr LR]\ntrain.py: error: argument --lr: invalid float value",
            NO,
            "invalid arguments",
        ),
        (2, "train.py: error: unrecognized arguments: --epochz 3", NO, "invalid arguments"),
        (2, "usage: train.py [-h] [--lr LR]", NO, "invalid arguments"),
        (2, "error: argument --mode: invalid choice: 'fast'", NO, "invalid arguments"),
        # Killed by a signal (128 + n), whatever the text: retry.
        (128, "", R, "signal"),
        (139, "Segmentation fault", R, "signal"),
        (143, "", R, "signal"),
        (255, "", R, "signal"),
        # Exit codes 1-127 without a retryable pattern: the program's own failure.
        (1, "ValueError: shapes do not match", NO, "user error exit code"),
        (127, "sh: python3.13: not found", NO, "user error exit code"),
        # Nothing matched (no exit code, no known text; or codes outside 1-255): retry.
        (None, "", R, "no rule matched"),
        (None, "worker vanished", R, "no rule matched"),
        (0, "", R, "no rule matched"),
        (256, "", R, "no rule matched"),
    ],
)
def test_default_rules(exit_code, message, verdict, rule):
    assert classify(exit_code, message) == (verdict, rule)


def test_the_documented_rule_order():
    assert [r.name for r in DEFAULT_RULES] == [
        "preflight failed",  # first: the program's own lines above it may name anything
        "NCCL timeout",
        "NCCL error",
        "ECC error",
        "Xid error",
        "CUDA error",
        "lost node",
        "OOM killed",
        "SyntaxError",
        "ModuleNotFoundError",
        "ImportError",
        "invalid arguments",
        "signal",
        "user error exit code",
    ]


@pytest.mark.parametrize(
    ("exit_code", "message", "expected"),
    [
        # Infrastructure rules come first: a SyntaxError in the same text loses to them.
        (1, "SyntaxError: invalid syntax\nNCCL watchdog timeout", (R, "NCCL timeout")),
        (1, "ImportError: x\nRuntimeError: CUDA error: unknown", (R, "CUDA error")),
        # ECC comes before the CUDA error that carries it: retry elsewhere, not in place.
        (1, "CUDA error: uncorrectable ECC error encountered", (ELSE, "ECC error")),
        # OOM (137) comes before the user-error patterns, a signal exit after them.
        (137, "SyntaxError: invalid syntax", (R, "OOM killed")),
        (139, "SyntaxError: invalid syntax", (NO, "SyntaxError")),
        # A retryable pattern beats the user-error exit code range.
        (1, "connection reset by peer", (R, "lost node")),
    ],
)
def test_first_matching_rule_wins(exit_code, message, expected):
    assert classify(exit_code, message) == expected


def test_rules_are_data():
    rules = (
        Rule("flaky storage", R, exit_codes=((3, 3),), pattern=r"EIO"),
        Rule("anything else", NO),
    )
    assert classify(3, "OSError: [Errno 5] EIO", rules) == (R, "flaky storage")
    assert classify(3, "OSError: [Errno 2] ENOENT", rules) == (NO, "anything else")
    assert classify(None, "EIO", rules) == (NO, "anything else")  # the code range must match


# -- decide() ---------------------------------------------------------------------------------
def exit_failure(code: int | None, message: str = "", rank: int = 0) -> Failure:
    return Failure(FailureKind.EXIT, worker_rank=rank, exit_code=code, message=message)


SYNTAX = exit_failure(1, "SyntaxError: invalid syntax")


@pytest.mark.parametrize(
    ("failure", "action", "rule", "exclude"),
    [
        (exit_failure(1, "NCCL timeout"), Action.RESTART_JOB, "NCCL timeout", False),
        (exit_failure(1, "uncorrectable ECC error"), Action.RESTART_JOB, "ECC error", True),
        (exit_failure(1, "Xid 48"), Action.RESTART_JOB, "Xid error", True),
        (exit_failure(137), Action.RESTART_JOB, "OOM killed", False),
        (exit_failure(143), Action.RESTART_JOB, "signal", False),
        (exit_failure(None), Action.RESTART_JOB, "no rule matched", False),
        (SYNTAX, Action.FAIL, "SyntaxError", False),
        (exit_failure(1, "ModuleNotFoundError: x"), Action.FAIL, "ModuleNotFoundError", False),
        (exit_failure(1, "ImportError: x"), Action.FAIL, "ImportError", False),
        (exit_failure(2, "unrecognized arguments: --x"), Action.FAIL, "invalid arguments", False),
        (exit_failure(1, "ValueError"), Action.FAIL, "user error exit code", False),
    ],
)
def test_exit_code_and_error_msg_policy(failure, action, rule, exclude):
    decision = decide(ON, Counters(), failure)
    assert (decision.action, decision.rule, decision.exclude_node) == (action, rule, exclude)
    assert decision.consumes_budget == (action == Action.RESTART_JOB)


def test_a_no_retry_failure_names_its_rule():
    decision = decide(ON, Counters(), SYNTAX)
    assert (
        decision.reason
        == "worker 0 exited 1, SyntaxError: invalid syntax (not retryable: SyntaxError)"
    )


@pytest.mark.parametrize(
    "failure", [SYNTAX, exit_failure(1, "ValueError"), exit_failure(2, "usage: x")]
)
def test_on_failure_restarts_even_what_would_not_be_retried(failure):
    config = FtConfig(enabled=True, policy=RestartPolicy.ON_FAILURE)
    decision = decide(config, Counters(), failure)
    assert decision.action == Action.RESTART_JOB and decision.consumes_budget
    # Restarted because the policy restarts every failure: labelled so, not "user error".
    assert decision.rule == "OnFailure"
    assert "user error" not in decision.reason


def test_on_failure_keeps_the_name_of_a_retryable_classification():
    config = FtConfig(enabled=True, policy=RestartPolicy.ON_FAILURE)
    decision = decide(config, Counters(), exit_failure(1, "NCCL timeout"))
    assert decision.rule == "NCCL timeout"


def test_a_restart_says_used_over_max_and_the_last_error_line():
    failure = exit_failure(1, "step 40\nRuntimeError: NCCL watchdog timeout", rank=2)
    decision = decide(ON, Counters(failure_restarts=1), failure)
    assert decision.reason == "restart 2/3: worker 2 exited 1, RuntimeError: NCCL watchdog timeout"
    assert decision.backoff_seconds == 10.0


@pytest.mark.parametrize("used", [3, 4])
def test_the_budget_runs_out(used):
    failure = exit_failure(1, "NCCL timeout")
    decision = decide(ON, Counters(failure_restarts=used), failure)
    assert decision.action == Action.FAIL and not decision.consumes_budget
    assert decision.reason == (
        f"worker 0 exited 1, NCCL timeout; restart budget used up ({used}/3)"
    )
    assert decision.rule == "NCCL timeout"


def test_the_last_restart_within_the_budget():
    decision = decide(ON, Counters(failure_restarts=2), exit_failure(137))
    assert decision.action == Action.RESTART_JOB and decision.reason.startswith("restart 3/3:")


def test_a_zero_budget_never_restarts_a_failure():
    config = FtConfig(enabled=True, max_restarts=0)
    assert decide(config, Counters(), exit_failure(137)).action == Action.FAIL


@pytest.mark.parametrize(
    ("kind", "counters", "reason"),
    [
        (FailureKind.PREEMPTED, Counters(failure_restarts=3, preemptions=7), "preemption 8"),
        (FailureKind.NODE_LOST, Counters(failure_restarts=5, node_losses=3), "node loss 4"),
        (FailureKind.PREEMPTED, Counters(failure_restarts=0, preemptions=100), "preemption 101"),
    ],
)
def test_preemptions_and_lost_nodes_never_consume_the_budget(kind, counters, reason):
    decision = decide(ON, counters, Failure(kind, worker_rank=0))
    assert decision.action == Action.RESTART_JOB
    assert not decision.consumes_budget
    # Neither backs off, however often: the scheduler's own rules stop reclaim loops.
    assert decision.backoff_seconds == 0
    assert decision.reason.startswith(f"restart after {reason}: ")


@pytest.mark.parametrize("earlier", [0, 1, 2, 3, 9])
def test_restarts_after_preemptions_never_back_off(earlier):
    """A preempted job waits for nothing but capacity (docs/fault-tolerance.md): a back-off
    idled GPUs it could use (the Kueue baseline's last 9 s ran at 15 %). A crash loop still
    backs off (test_decide_backs_off_by_the_restarts_already_used)."""
    failure = Failure(FailureKind.PREEMPTED, message="reclaimed by team-b")
    assert decide(ON, Counters(preemptions=earlier), failure).backoff_seconds == 0


HANG = Failure(FailureKind.HANG, message="no new step for 1800s")


@pytest.mark.parametrize(
    ("config", "counters", "action", "consumes"),
    [
        (FtConfig(enabled=True, hang_action=HangAction.STOP), Counters(), Action.STOP, False),
        (FtConfig(enabled=False, hang_action=HangAction.STOP), Counters(), Action.STOP, False),
        (FtConfig(enabled=True), Counters(), Action.RESTART_JOB, True),
        (FtConfig(enabled=True), Counters(failure_restarts=3), Action.FAIL, False),
        (FtConfig(enabled=False), Counters(), Action.FAIL, False),
        (
            FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS),
            Counters(),
            Action.RESTART_WORKER,
            True,
        ),
    ],
)
def test_hangs(config, counters, action, consumes):
    decision = decide(config, counters, HANG)
    assert (decision.action, decision.consumes_budget, decision.rule) == (action, consumes, "hang")
    assert not decision.exclude_node


def test_a_hang_stop_says_so():
    decision = decide(FtConfig(enabled=True, hang_action=HangAction.STOP), Counters(), HANG)
    assert decision.reason == "stopped: the job made no progress (hang detected)"


@pytest.mark.parametrize(
    ("failure", "action"),
    [
        (Failure(FailureKind.PREEMPTED, message="reclaimed by team-b"), Action.END),
        (Failure(FailureKind.NODE_LOST, worker_rank=1), Action.FAIL),
        (exit_failure(1, "NCCL timeout"), Action.FAIL),
        (exit_failure(137), Action.FAIL),
        (exit_failure(1, "uncorrectable ECC error"), Action.FAIL),
    ],
)
def test_fault_tolerance_off(failure, action):
    decision = decide(OFF, Counters(), failure)
    assert decision.action == action
    assert not decision.consumes_budget and not decision.exclude_node


def test_fault_tolerance_off_keeps_the_words():
    preempted = decide(OFF, Counters(), Failure(FailureKind.PREEMPTED, message="reclaimed"))
    assert preempted.reason == "preempted: reclaimed"
    lost = decide(OFF, Counters(), Failure(FailureKind.NODE_LOST, worker_rank=1))
    assert lost.reason == "worker 1 lost: node lost"


@pytest.mark.parametrize(
    ("restarts", "seconds"),
    [(-1, 0), (0, 0), (1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 300), (7, 300), (50, 300)],
)
def test_backoff_sequence(restarts, seconds):
    assert backoff_for(restarts) == seconds


def test_decide_backs_off_by_the_restarts_already_used():
    config = FtConfig(enabled=True, max_restarts=10)
    waits = [
        decide(config, Counters(failure_restarts=n), exit_failure(137)).backoff_seconds
        for n in range(8)
    ]
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300]


@pytest.mark.parametrize(
    ("failure", "exclude"),
    [(exit_failure(1, "NCCL timeout"), False), (exit_failure(1, "Xid 79"), True)],
)
def test_asynchronous_restarts_only_the_worker(failure, exclude):
    config = FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS)
    decision = decide(config, Counters(), failure)
    assert decision.action == Action.RESTART_WORKER and decision.consumes_budget
    # The shell (restart.handle_failure) turns an excluding one into a whole-job restart.
    assert decision.exclude_node == exclude


def test_asynchronous_still_fails_what_is_not_retryable():
    config = FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS)
    assert decide(config, Counters(), SYNTAX).action == Action.FAIL
