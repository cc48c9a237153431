"""The read and control commands: list, show, logs, stop, restart, quota, wait, whoami."""

import argparse
import sys
import time
from typing import Any

from cli.client import ApiFailure, Client, new_idempotency_key
from cli.output import age, duration, gpus, plural, print_json, runtime, table

FINAL = {"Completed", "Failed", "Stopped", "Preempted", "Terminated"}
# `wait`'s exit codes: the job's outcome, for pipelines (`gpu-console wait 12 && next`).
OUTCOME_CODES = {"Completed": 0, "Failed": 1, "Stopped": 3, "Preempted": 4, "Terminated": 5}
TIMED_OUT = 124


def cmd_list(client: Client, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "status": args.status,
        "state": args.state,
        "quota": args.quota,
        "workspace": args.workspace,
        "owner": "me" if args.mine else args.owner,
        "name": args.name,
        "limit": args.limit,
    }
    jobs: list[dict] = []
    cursor = None
    while True:
        page = client.get("/jobs", **params, cursor=cursor)
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if not (args.all and cursor):
            break
    if args.json:
        print_json({"jobs": jobs, "next_cursor": None if args.all else cursor})
        return 0
    table(
        [
            (
                j["id"],
                j["name"],
                j["display_status"],
                j["quota"]["name"],
                gpus(j),
                j["owner"],
                age(j["created_at"]),
                runtime(j),
                j["queue_position"] or "",
            )
            for j in jobs
        ],
        ["ID", "NAME", "STATUS", "QUOTA", "GPUS", "OWNER", "AGE", "RUNTIME", "QUEUE"],
    )
    if cursor:
        print(f"(more: --all, or --limit above {args.limit})", file=sys.stderr)
    return 0


def cmd_show(client: Client, args: argparse.Namespace) -> int:
    job = client.get(f"/jobs/{args.job}")
    if args.json:
        print_json(job)
        return 0
    ft = job["fault_tolerance"]
    facts = [
        ("Job", f"{job['name']} (#{job['id']})"),
        ("Status", job["display_status"]),
        ("Reason", job.get("display_reason") or job["status_reason"]),
        ("Queue position", job["queue_position"]),
        ("Workspace / quota", f"{job['workspace']['name']} / {job['quota']['name']}"),
        ("Owner", job["owner"]),
        ("Image", job["image"]),
        ("Command", job["command"]),
        (
            "Workers",
            f"{job['workers']} x {plural(job['gpus_per_worker'], 'GPU')}, "
            f"{plural(job['cpus_per_worker'], 'CPU')}, {job['memory_gb_per_worker']} GB",
        ),
        ("Priority / idle", f"{job['priority']} / {job['idle_resources']}"),
        (
            "Attempt",
            f"{job['attempt']} (restarts {job['restart_count']}, "
            f"preemptions {job['preemption_count']})",
        ),
        ("Fault tolerance", "on" if ft["enabled"] else "off"),
        ("Submitted", f"{job['created_at']} ({age(job['created_at'])} ago)"),
        ("Runtime", runtime(job)),
        ("Exit code", job["exit_code"]),
        ("Result", job.get("result_progress")),
    ]
    width = max(len(k) for k, _ in facts)
    for key, value in facts:
        if value not in (None, ""):
            print(f"{key.ljust(width)}  {value}")
    if job["pods"]:
        print()
        table(
            [
                (
                    p["attempt"],
                    p["rank"],
                    p["node"],
                    ",".join(map(str, p["gpu_indices"])),
                    p["status"],
                    "yes" if p["in_quota"] else "no (borrowed)",
                    _progress(p.get("progress")),
                )
                for p in job["pods"]
            ],
            ["ATTEMPT", "RANK", "NODE", "GPUS", "STATUS", "IN QUOTA", "PROGRESS"],
        )
    if job["restarts"]:
        print()
        table(
            [
                (
                    r["from_attempt"],
                    r["to_attempt"],
                    r["kind"],
                    r["node"],
                    r["exit_code"],
                    r["reason"],
                )
                for r in job["restarts"]
            ],
            ["FROM", "TO", "KIND", "NODE", "EXIT", "REASON"],
        )
    if job["events"]:
        print()
        table(
            [(e["at"], e["to_status"] or "", e["actor"], e["reason"]) for e in job["events"][-10:]],
            ["TIME", "STATUS", "BY", "REASON"],
        )
    return 0


def _progress(progress: dict | None) -> str:
    if not progress:
        return ""
    step, total = progress["step"], progress.get("total")
    text = f"step {step}/{total} ({100 * step // total}%)" if total else f"step {step}"
    metrics = progress.get("metrics") or {}
    shown = [f"{k}={v}" for k, v in list(metrics.items())[:3] if isinstance(v, int | float)]
    return " ".join([text, *shown])


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    """Print a worker's log from its first attempt (or --attempt) through every restart;
    with -f follow it live to the end."""
    attempt, after = args.attempt or 1, -1
    out = sys.stdout
    while True:
        data = client.request(
            "GET",
            f"/jobs/{args.job}/logs",
            params={
                "rank": args.rank,
                "attempt": attempt,
                "after": after,
                "limit": 5000,
                "follow": "true" if args.follow else None,
                "wait": 20 if args.follow else None,
            },
            timeout=60,
        )
        for line in data["lines"]:
            out.write(line["text"] + "\n")
        out.flush()
        after = data["next_after"]
        attempt = data["attempt"] if data["attempt"] is not None else attempt
        if data["complete"]:
            return 0
        if data["newer_attempt"] and not data["lines"]:
            if args.attempt and not args.follow:
                return 0  # only the attempt asked for
            attempt, after = data["newer_attempt"], -1
            print(f"--- attempt {attempt} ---", file=sys.stderr, flush=True)
            continue
        if not args.follow and not data["lines"] and not data["newer_attempt"]:
            return 0


def cmd_stop(client: Client, args: argparse.Namespace) -> int:
    code = 0
    for job_id in args.jobs:
        try:
            job = client.post(f"/jobs/{job_id}/stop")
        except ApiFailure as exc:
            if exc.unreachable:
                raise
            print(f"job {job_id}: {exc.message}", file=sys.stderr)
            code = 2
            continue
        if args.json:
            print_json(job)
        else:
            reason = job.get("display_reason") or job["status_reason"]
            print(f"job {job['id']}: {job['display_status']} ({reason})")
    return code


def cmd_restart(client: Client, args: argparse.Namespace) -> int:
    body: dict = {}
    if getattr(args, "inputs", None) is not None:
        body["result_inputs"] = args.inputs
    if getattr(args, "from_scratch", False):
        body["from_scratch"] = True
    job = client.post(
        f"/jobs/{args.job}/restart", body or None, idempotency_key=new_idempotency_key()
    )
    if args.json:
        print_json(job)
    else:
        how = " from scratch" if body.get("from_scratch") else ""
        print(f"job {args.job} restarted{how} as job {job['id']} ({job['status']})")
    return 0


def cmd_quota(client: Client, args: argparse.Namespace) -> int:
    if args.name:
        quota = client.get(f"/quotas/{args.name}")
        queue = client.get(f"/quotas/{args.name}/queue")
        if args.json:
            print_json({"quota": quota, "queue": queue})
            return 0
        _quota_table([quota])
        print()
        table(
            [
                (
                    e["position"] or "",
                    e["job"] or "",
                    e["name"] or "",
                    e["workspace"],
                    e["gpus"],
                    e["priority"],
                    "← you" if e["mine"] else "",
                )
                for e in queue["jobs"]
            ],
            ["POS", "JOB", "NAME", "WORKSPACE", "GPUS", "PRIO", ""],
        )
        return 0
    data = client.get("/quotas")
    if args.json:
        print_json(data)
    else:
        _quota_table(data["quotas"])
    return 0


def _quota_table(quotas: list[dict]) -> None:
    table(
        [
            (
                q["name"],
                q["gpu_type"],
                q["usage"]["size"],
                q["usage"]["used"],
                q["usage"]["lent"],
                q["usage"]["borrowed"],
                q["usage"]["free"],
                q["queue"]["waiting"],
                ",".join(map(str, q["queue"]["mine"])) or "-",
            )
            for q in quotas
        ],
        ["QUOTA", "GPU", "SIZE", "USED", "LENT", "BORROWED", "FREE", "WAITING", "MY POSITIONS"],
    )


def _progress_line(job: dict) -> str:
    current = [p for p in job.get("pods", []) if p["attempt"] == job["attempt"]]
    progress = next((p["progress"] for p in current if p.get("progress")), None)
    parts = [f"job {job['id']}", job["display_status"]]
    if job["status"] in ("Pending", "Inqueue"):
        if job["queue_position"]:
            parts.append(f"#{job['queue_position']} in queue")
        parts.append(job["status_reason"][:80])
    else:
        parts.append(runtime(job))
    if job["attempt"] > 1:
        parts.append(f"attempt {job['attempt']}")
    if progress:
        parts.append(_progress(progress))
    if job.get("result_progress"):
        parts.append(job["result_progress"])
    return " · ".join(p for p in parts if p)


def cmd_wait(client: Client, args: argparse.Namespace) -> int:
    """Wait until every job is final; the exit code mirrors the outcome (the first job that
    did not complete decides)."""
    deadline = time.monotonic() + args.timeout if args.timeout else None
    tty = sys.stderr.isatty()
    last = ""
    final: dict[int, dict] = {}
    while True:
        for job_id in args.jobs:
            if job_id not in final:
                job = client.get(f"/jobs/{job_id}")
                if job["status"] in FINAL:
                    final[job_id] = job
                line = _progress_line(job)
                if line != last and not args.quiet:
                    if tty:
                        sys.stderr.write("\r\033[K" + line)
                    else:
                        sys.stderr.write(line + "\n")
                    sys.stderr.flush()
                    last = line
        if len(final) == len(args.jobs):
            break
        if deadline is not None and time.monotonic() >= deadline:
            if tty:
                sys.stderr.write("\n")
            print(f"timed out after {duration(args.timeout)}", file=sys.stderr)
            return TIMED_OUT
        time.sleep(args.interval)
    if tty and not args.quiet:
        sys.stderr.write("\n")
    jobs = [final[job_id] for job_id in args.jobs]
    if args.json:
        print_json({"jobs": [_outcome(j) for j in jobs]})
    else:
        for job in jobs:
            print(f"job {job['id']} {job['status']}: {job['status_reason']}")
    for job in jobs:
        code = OUTCOME_CODES.get(job["status"], 1)
        if code:
            return code
    return 0


def _outcome(job: dict) -> dict:
    return {
        "id": job["id"],
        "status": job["status"],
        "status_reason": job["status_reason"],
        "exit_code": job["exit_code"],
        "attempt": job["attempt"],
        "exit_status": OUTCOME_CODES.get(job["status"], 1),
    }


def cmd_whoami(client: Client, args: argparse.Namespace) -> int:
    me = client.get("/me")
    if args.json:
        print_json(me)
    else:
        print(f"{me['username']} at {client.url}")
        print(f"workspaces: {', '.join(me['workspaces']) or '-'}")
        print(f"quotas: {', '.join(me['quotas']) or '-'}")
    return 0
