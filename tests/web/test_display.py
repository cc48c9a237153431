"""Pure display rules: derived statuses, badges, durations, log cleaning, paging cursors."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from jobs.logview import chunk_lines, logs_complete
from jobs.paging import BadPageRequest, decode_cursor, parse_limit, parse_statuses
from policy.admission.rules import default_name
from policy.display import (
    STOPPING,
    UNKNOWN,
    badge_class,
    clean_log_line,
    display_status,
    duration,
    format_duration,
    is_live,
)
from policy.statuses import JobStatus, PodStatus

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "stop", "unknown", "expected"),
    [
        (JobStatus.RUNNING, None, False, "Running"),
        (JobStatus.RUNNING, T0, False, STOPPING),
        (JobStatus.STARTING, T0, False, STOPPING),
        (JobStatus.RUNNING, None, True, UNKNOWN),
        (JobStatus.STARTING, None, True, UNKNOWN),
        # A stop in progress says more than a worker we cannot reach.
        (JobStatus.RUNNING, T0, True, STOPPING),
        # Once final, the stored status is the truth, whatever happened before.
        (JobStatus.STOPPED, T0, False, "Stopped"),
        (JobStatus.TERMINATED, T0, True, "Terminated"),
        (JobStatus.FAILED, None, True, "Failed"),
        (JobStatus.INQUEUE, None, False, "Inqueue"),
        (JobStatus.PENDING, None, False, "Pending"),
    ],
)
def test_display_status(status, stop, unknown, expected):
    assert display_status(status, stop_requested_at=stop, has_unknown_worker=unknown) == expected


def test_every_status_has_its_own_badge_class():
    classes = {badge_class(s.value) for s in JobStatus}
    assert len(classes) == len(JobStatus)
    assert badge_class("Running") == "badge-running"
    assert badge_class(STOPPING) == "badge-stopping"
    assert badge_class(UNKNOWN) == "badge-unknown"
    assert badge_class(PodStatus.PREEMPTED) == "badge-preempted"
    assert badge_class("Something New") == "badge-something-new"


def test_is_live_only_for_active_statuses():
    assert [s for s in JobStatus if is_live(s)] == [
        JobStatus.PENDING,
        JobStatus.INQUEUE,
        JobStatus.STARTING,
        JobStatus.RUNNING,
    ]


def test_duration_of_a_running_job_follows_the_clock():
    with time_machine.travel(T0 + timedelta(minutes=3, seconds=5), tick=False):
        assert duration(T0, None, timezone.now()) == timedelta(minutes=3, seconds=5)
    with time_machine.travel(T0 + timedelta(hours=2, minutes=7), tick=False):
        assert format_duration(duration(T0, None, timezone.now())) == "2h 07m"


def test_duration_of_a_finished_job_is_fixed():
    finished = T0 + timedelta(seconds=45)
    with time_machine.travel(T0 + timedelta(days=9), tick=False):
        assert duration(T0, finished, timezone.now()) == timedelta(seconds=45)


def test_duration_before_start_and_clock_skew():
    assert duration(None, None, T0) is None
    assert format_duration(None) == "—"
    assert duration(T0, T0 - timedelta(seconds=1), T0) == timedelta(0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (65, "1m 05s"), (3600, "1h 00m"), (90061, "1d 1h")],
)
def test_format_duration(seconds, text):
    assert format_duration(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31mred\x1b[0m plain", "red plain"),
        ("\x1b[1;32;48;5;17mbold\x1b[m", "bold"),
        ("\x1b]0;window title\x07after", "after"),
        ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bPq#0;2;0;0;0\x1b\\sixel gone", "sixel gone"),
        ("\x9b31mC1 CSI", "C1 CSI"),
        ("epoch 1:  10%\repoch 1:  50%\repoch 1: 100%", "epoch 1: 100%"),
        ("windows line\r", "windows line"),
        ("bell\x07 null\x00 backspace\x08 del\x7f", "bell null backspace del"),
        ("tab\tkept", "tab\tkept"),
        ("lone escape \x1b", "lone escape "),
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),  # escaping is the template's
        ("ünïcödé ✓ 日本", "ünïcödé ✓ 日本"),
    ],
)
def test_clean_log_line(raw, shown):
    assert clean_log_line(raw) == shown


@pytest.mark.parametrize(
    ("start", "end", "text", "lines"),
    [
        (0, 2, "a\nb\nc\n", [(0, "a"), (1, "b"), (2, "c")]),
        (5, 6, "x\ny", [(5, "x"), (6, "y")]),
        (3, 3, "\n", [(3, "")]),
        (0, 0, "only\nextra\n", [(0, "only")]),  # never more lines than the range says
    ],
)
def test_chunk_lines(start, end, text, lines):
    assert chunk_lines(start, end, text) == lines


def test_logs_complete_waits_for_the_end_of_the_log_not_a_timer():
    kwargs = {"job_final": True, "caught_up": True, "ended": True}
    assert logs_complete(**kwargs)
    assert not logs_complete(**kwargs | {"ended": False})
    assert not logs_complete(**kwargs | {"caught_up": False})
    assert not logs_complete(**kwargs | {"job_final": False})


@pytest.mark.parametrize(
    ("image", "name"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", "pytorch"),
        ("busybox", "busybox"),
        ("registry:5000/team/trainer@sha256:abc", "trainer"),
        ("localhost:5000/llm", "llm"),
    ],
)
def test_default_name_from_image(image, name):
    assert default_name(image) == name


def test_paging_inputs():
    assert parse_limit(None) == 50
    assert parse_limit("200") == 200
    for bad in ("0", "201", "x"):
        with pytest.raises(BadPageRequest) as exc:
            parse_limit(bad)
        assert exc.value.field == "limit"
    assert parse_statuses("running,Inqueue") == ["Running", "Inqueue"]
    with pytest.raises(BadPageRequest):
        parse_statuses("Running,Sleeping")
    for bad in ("!!", "bm90IGEgY3Vyc29y", ""):
        with pytest.raises(BadPageRequest):
            decode_cursor(bad)
