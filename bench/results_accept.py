"""Counted results (docs/results.md) at 10,000 units, on a clean PostgreSQL database, in this
process (Django's test client: the real agent endpoint and API, no HTTP server):

- acceptance: 10,000 units reported by one worker through heartbeats (500 a report, the
  protocol's limit), each stored once, then the exit 0 judged against the contract;
- the same units reported again (an agent restart): no-ops;
- the result API's first page and a middle page with 10,000 units (p95), and the job page
  (its Result section paged the same way; target p95 <= 100 ms);
- `agents.sdk.accept()` per unit (a 4 KB file: fsync, sha256, manifest written atomically)
  and the agent's `promote()` per unit (verify sha256, rename).

    .venv/bin/python -m bench.results_accept            # quick: 2,000 units
    .venv/bin/python -m bench.results_accept --full     # 10,000 units (target: <= 2 s)
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

SHA = "ab" * 32


def _placed_job(units: int):
    """A running job with a contract of `units` partitions, its worker on a registered node:
    (client, node token, the job, its pod, the node's facts)."""
    from django.test import Client

    from agents.actions import issue_bootstrap_token
    from jobs.actions.results import record_runs
    from jobs.models import Job, Pod
    from policy.statuses import JobStatus, PodStatus

    user, workspace, quota, api_token = common.researcher_with_quota()
    client = Client()
    client.force_login(user)  # the job page; the APIs below say who they are by token
    gpus = [{"index": 0, "uuid": "GPU-0000", "name": "NVIDIA H200", "memory_total_mb": 1}]
    facts = {"hostname": "h", "runtime": "process", "gpu_type": "H200", "gpus": gpus}
    _, bootstrap = issue_bootstrap_token(None, "bench")
    answer = client.post(
        "/api/v1/agent/register/",
        json.dumps({"name": "n1", "facts": facts}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {bootstrap}"},
    ).json()
    contract = {"unit": "partition", "expected_units": f"p{{1..{units}}}"}
    job = Job.objects.create(
        workspace=workspace, quota=quota, owner=user, name="bench", image="i", command="c",
        status=JobStatus.RUNNING, result_contract=contract,
    )  # fmt: skip
    record_runs([job])
    pod = Pod.objects.create(
        job=job, attempt=1, rank=0, node_id=answer["node_id"], gpu_indices=[0], gpus=1,
        charged_quota=quota, status=PodStatus.RUNNING,
    )  # fmt: skip
    return client, answer["node_token"], api_token, job, pod, facts


def _beat(client, token: str, facts: dict, workers: list[dict]) -> None:
    response = client.post(
        "/api/v1/agent/heartbeat/",
        json.dumps({"facts": facts, "workers": workers}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content[:300]


def accept_units(units: int) -> list[dict]:
    from jobs.models import Job, ResultUnit

    client, token, api_token, job, pod, facts = _placed_job(units)
    batch = 500
    reports = [
        [
            {
                "unit": f"p{i}",
                "items": 1,
                "files": [{"path": f"p{i}.csv", "size": 1, "sha256": SHA}],
            }
            for i in range(start, min(start + batch, units + 1))
        ]
        for start in range(1, units + 1, batch)
    ]
    running = {"pod_id": pod.pk, "attempt": 1, "state": "running"}
    t0 = time.perf_counter()
    for chunk in reports[:-1]:
        _beat(client, token, facts, [{**running, "units": chunk}])
    exited = {**running, "state": "exited", "exit_code": 0, "units": reports[-1]}
    _beat(client, token, facts, [exited])
    accept_s = time.perf_counter() - t0
    job.refresh_from_db()
    assert job.status == "Completed", job.status_reason
    assert ResultUnit.objects.filter(job=job).count() == units

    Job.objects.filter(pk=job.pk).update(status="Running")  # heard again, as if still running
    from jobs.models import Pod

    Pod.objects.filter(pk=pod.pk).update(status="Running")
    t0 = time.perf_counter()
    for chunk in reports:
        _beat(client, token, facts, [{**running, "units": chunk}])
    again_s = time.perf_counter() - t0

    pages = []
    middle = ResultUnit.objects.filter(job=job).order_by("pk").values_list("pk", flat=True)
    cursor = middle[units // 2]
    for after in [0, cursor] * 20:
        t0 = time.perf_counter()
        response = client.get(
            f"/api/v1/jobs/{job.pk}/result?after={after}",
            headers={"Authorization": f"Bearer {api_token}"},
        )
        pages.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200
    job_pages = []
    for after in [0, cursor] * 20:  # the job page's Result section, paged the same way
        t0 = time.perf_counter()
        response = client.get(f"/jobs/{job.pk}/?units_after={after}")
        job_pages.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200 and b'id="result"' in response.content
    return [
        {"what": f"accept {units:,} units (heartbeats of 500) + judge", "seconds": accept_s},
        {"what": f"the same {units:,} units again (no-ops)", "seconds": again_s},
        {
            "what": f"result API page, {units:,} units, p95 s",
            "seconds": common.percentile(pages, 95) / 1000,
        },
        {
            "what": f"job page with its Result section, {units:,} units, p95 s",
            "seconds": common.percentile(job_pages, 95) / 1000,
        },
    ]


def sdk_costs(units: int) -> list[dict]:
    from agents import sdk
    from protocol.outputs import output_paths, promote

    with tempfile.TemporaryDirectory() as root:
        paths = output_paths(Path(root), 1, 1)
        paths.staging.mkdir(parents=True)
        os.environ["OUTPUT_DIR"] = str(paths.staging)
        block = b"x" * 4096
        t0 = time.perf_counter()
        for i in range(units):
            target = paths.staging / f"p{i}.bin"
            target.write_bytes(block)
            sdk.accept(f"p{i}", files=[target], items=1)
        accept_ms = (time.perf_counter() - t0) / units * 1000
        t0 = time.perf_counter()
        promoted = promote(paths, 1)
        promote_ms = (time.perf_counter() - t0) / units * 1000
        assert len(promoted) == units
    return [
        {"what": "sdk accept() per unit (4 KB file, fsyncs), s", "seconds": accept_ms / 1000},
        {"what": "agent promote() per unit (sha256 + rename), s", "seconds": promote_ms / 1000},
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    units = 10_000 if args.full else 2_000
    with common.clean_database("results") as url:
        common.setup_django(url)
        rows = accept_units(units)
    rows += sdk_costs(1_000 if args.full else 300)
    for row in rows:
        row["seconds"] = round(row["seconds"], 4)
    common.report(
        "results_accept",
        rows,
        quick=not args.full,
        notes="target: 10,000 units accepted <= 2 s on the console",
        units=units,
        accept_seconds=rows[0]["seconds"],
    )


if __name__ == "__main__":
    main()
