"""`manage.py simulate`: output format, options, exit codes and error messages."""

import json
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
TRACE = Path("/work/shared/traces/philly.csv")
BASE = {
    "tenants": ["acme"],
    "nodes": [{"name": "h", "count": 1, "gpu_type": "H200", "gpus": 8}],
    "quotas": [{"name": "team-a", "tenant": "acme", "gpu_type": "H200", "gpus": 8}],
    "jobs": [{"name": "a1", "quota": "team-a", "gpus_per_worker": 8, "work": 100}],
}


def simulate(*args) -> tuple[int, list[dict], str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("simulate", *map(str, args), stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return code, lines, err.getvalue().strip()


def write(tmp_path, data, name="s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_json_lines_in_time_order_then_a_summary():
    code, lines, _ = simulate(SCENARIOS / "borrow_then_reclaim.yaml")
    assert code == 0
    *events, last = lines
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    assert events[0] == {"t": 0.0, "job": "b1", "to": "Pending"}
    summary = last["summary"]
    assert summary["preemptions"] == 1
    assert summary["jobs"]["b1"] == {
        "status": "Preempted",
        "attempts": 1,
        "restarts": 0,
        "preemptions": 1,
        "submitted_at": 0.0,
        "first_running_at": 30.0,
        "finished_at": 900.0,
        "work_done": 600.0,
        "work_lost": 270.0,
    }
    assert summary["lost_gpu_seconds"] == 270.0 * 16
    # Busy: b1 16 GPUs x 900 s, a1 8 x 630 s; available: 16 GPUs until a1 ends at 1530.
    assert summary["gpu_utilization"] == round((16 * 900 + 8 * 630) / (16 * 1530), 4)


def test_waiting_jobs_reasons_and_positions_are_json_lines():
    code, lines, _ = simulate(SCENARIOS / "waiting_reasons_update.yaml")
    assert code == 0
    g1 = [e for e in lines if e.get("job") == "g1" and "Inqueue" in (e.get("to"), e.get("status"))]
    assert g1[0] == {
        "t": 10.0,
        "job": "g1",
        "from": "Pending",
        "to": "Inqueue",
        "reason": "quota team-a: 16/16 GPUs in use, job needs 16",
        "position": 1,
    }
    assert [set(e) for e in g1[1:]] == [{"t", "job", "status", "reason", "position"}] * 2
    assert g1[-1]["reason"].startswith("can never be placed while the pool stays as it is")


def test_summary_only_and_until():
    code, lines, _ = simulate(SCENARIOS / "borrow_then_reclaim.yaml", "--summary-only")
    assert code == 0 and len(lines) == 1 and "summary" in lines[0]
    code, lines, _ = simulate(SCENARIOS / "borrow_then_reclaim.yaml", "--until", 500)
    assert all(e["t"] <= 500 for e in lines[:-1])
    assert lines[-1]["summary"]["jobs"]["b1"]["status"] == "Running"
    assert "a1" not in lines[-1]["summary"]["jobs"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["jobs"][0].update(quota="team-z"), "jobs[0].quota: unknown quota 'team-z'"),
        (
            lambda s: s["jobs"][0].update(gpus_per_worker=16),
            "jobs[0].gpus_per_worker: 16 GPUs is more than any Lingjun H200 node has (8)",
        ),
        (
            lambda s: s["jobs"][0].update(idle_resources="Sometimes"),
            "jobs[0].idle_resources: 'Sometimes' is not one of Off, Acceptable, "
            "Only Idle Resources",
        ),
        (
            lambda s: s["quotas"][0].update(preemption="Always"),
            "quotas[0].preemption: 'Always' is not one of Never, LowerPriority",
        ),
        (lambda s: s["quotas"][0].update(tenant="initech"), "quotas[0].tenant: unknown tenant"),
        (lambda s: s["jobs"][0].pop("work"), "jobs[0].work: required"),
        (lambda s: s["jobs"][0].update(wrk=1), "jobs[0].wrk: unknown field"),
        (lambda s: s.update(actions=[{"at": 1, "stop": "zz"}]), "actions[0].stop: unknown job"),
        (lambda s: s.update(settings={"stop_grace": -1}), "settings.stop_grace: must be at least"),
        (
            lambda s: s.update(settings={"reserve_after": float("nan")}),
            "settings.reserve_after: expected a finite number, got nan",
        ),
        (
            lambda s: s["jobs"][0].update(work=float("inf")),
            "jobs[0].work: expected a finite number, got inf",
        ),
        (
            lambda s: s["quotas"][0].update(weight=float("nan")),
            "quotas[0].weight: must be a number above 0, got nan",
        ),
        (
            lambda s: s["quotas"][0].update(max_gpus=float("inf")),
            "quotas[0].max_gpus: expected an integer, got inf",
        ),
    ],
)
def test_invalid_scenarios_exit_2_naming_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(BASE))
    change(data)
    code, lines, err = simulate(write(tmp_path, data))
    assert code == 2
    assert lines == []
    assert len(err.splitlines()) == 1
    assert message in err


def test_unreadable_or_broken_files_exit_2(tmp_path):
    assert simulate(tmp_path / "missing.yaml")[0] == 2
    code, _, err = simulate(write(tmp_path, "web: [unclosed"))
    assert (code, "not valid YAML" in err) == (2, True)


def test_json_scenarios_are_accepted(tmp_path):
    code, lines, _ = simulate(write(tmp_path, json.dumps(BASE), "s.json"))
    assert code == 0
    assert lines[-1]["summary"]["jobs"]["a1"]["status"] == "Completed"


@pytest.mark.skipif(not TRACE.exists(), reason="needs the shared Philly trace")
def test_philly_trace_slice_runs_with_every_invariant_holding():
    code, lines, err = simulate(
        "--trace", TRACE, "--limit", 300, "--idle-fraction", 0.2, "--summary-only"
    )
    assert code == 0, err
    summary = lines[-1]["summary"]
    assert summary["invariant_violations"] == []
    assert len(summary["jobs"]) == 300
    statuses = {j["status"] for j in summary["jobs"].values()}
    assert statuses <= {"Completed", "Preempted", "Running", "Inqueue", "Starting"}


def test_philly_scale_sizes_the_vcs_for_offered_load(tmp_path):
    full, small = tmp_path / "full.yaml", tmp_path / "small.yaml"
    code, _, err_full = simulate("--trace", TRACE, "--limit", 500, "--write-scenario", full)
    assert code == 0
    code, _, err_small = simulate(
        "--trace", TRACE, "--limit", 500, "--scale", 0.15, "--idle-fraction", 0.5,
        "--idle-mode", "Acceptable", "--checkpoint-every", 1800, "--fault-tolerance",
        "--write-scenario", small,
    )  # fmt: skip
    assert code == 0
    load_full = float(err_full.removeprefix("offered load "))
    load_small = float(err_small.removeprefix("offered load "))
    assert load_small > 5 * load_full
    a, b = yaml.safe_load(full.read_text()), yaml.safe_load(small.read_text())
    assert b["nodes"][0]["count"] < a["nodes"][0]["count"] * 0.2
    modes = [j["idle_resources"] for j in b["jobs"]]
    assert modes.count("Acceptable") >= len(modes) // 2 - 50
    assert all(j["checkpoint_every"] == 1800 and j["fault_tolerance"] for j in b["jobs"])


def test_philly_scale_must_be_positive():
    code, _, err = simulate("--trace", TRACE, "--limit", 10, "--scale", 0)
    assert code == 2 and "--scale" in err


def test_the_command_keeps_no_events_in_memory(monkeypatch):
    # A 10,000-job trace writes over a million events (waiting jobs' positions move up):
    # they are written as they happen, never all kept.
    from simulator import engine

    made = []
    real = engine.Simulation.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(engine.Simulation, "__init__", spy)
    code, lines, _ = simulate(SCENARIOS / "waiting_reasons_update.yaml")
    assert code == 0 and len(lines) > 40
    assert made[0].events == []
