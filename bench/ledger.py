"""The agent's ledger writes (agents.node.state), on this machine's disk: what a launch and
an exit cost the agent's serial loop with KEEP_FINISHED (1,000) finished pods remembered
and 60 workers live (bench/kueue.py's 60-GPU agents). Each is a synced write, as the agent
does it: the launch's write-ahead must be on disk before the worker starts.

    .venv/bin/python -m bench.ledger            # quick: 300 launches and 300 exits
    .venv/bin/python -m bench.ledger --full     # 2,000 of each

The reference row rewrites every record in one file, as the agent did before the finished
pods moved to their own append-only file (`finished.jsonl`).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

LIVE = 60


def _record(attempt: int = 1, *, finished: bool = False):
    from agents.node.state import LaunchRecord

    final = {"exit_code": 0, "error": "", "container_id": ""} if finished else None
    return LaunchRecord(
        attempt=attempt,
        finished=finished,
        final=final,
        progress_file="/var/lib/gpu-agent/work/pod-0/progress.jsonl",
        checkpoint_dir="/var/lib/gpu-agent/work/pod-0/checkpoints",
        output_dir="/var/lib/gpu-agent/work/pod-0/output",
    )


def _timed(rounds: int, save) -> dict:
    walls, cpus = [], []
    for i in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        save(i)
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {
        "saves": rounds,
        "cpu_ms": round(statistics.mean(cpus) * 1000, 2),
        "wall_p50_ms": round(statistics.median(walls) * 1000, 2),
        "wall_p95_ms": round(common.percentile(walls, 95) * 1000, 2),
    }


def measure(rounds: int, folder: Path) -> list[dict]:
    from agents.node import state
    from agents.node.state import StateStore

    store = StateStore(folder)
    launched = {pod_id: _record(finished=True) for pod_id in range(state.KEEP_FINISHED)}
    launched |= {pod_id: _record() for pod_id in range(10_000, 10_000 + LIVE)}
    store.save_launched(launched)
    next_id = iter(range(100_000, 10**9))

    def launch(_: int) -> None:  # one new worker, written ahead of its start
        launched[next(next_id)] = _record()
        store.save_launched(launched)

    def exit_(_: int) -> None:  # the oldest live worker's exit was taken by the console
        live = next(pod_id for pod_id, r in launched.items() if not r.finished)
        launched[live].finished = True
        launched[live].final = {"exit_code": 0, "error": "", "container_id": ""}
        store.save_launched(launched)

    everything = folder / "everything.json"

    def rewrite_all(_: int) -> None:  # the earlier way: every record, one file
        state._write_private(
            everything, {"launched": {str(k): state._plain(r) for k, r in launched.items()}}
        )

    rows = []
    for what, save in (
        ("a launch (write-ahead)", launch),
        ("an exit reported", exit_),
        ("reference: every record rewritten (before)", rewrite_all),
    ):
        rows.append({"what": what, **_timed(rounds, save)})
    before = rows[-1]["wall_p50_ms"]
    for row in rows[:-1]:
        row["vs_before"] = round(before / row["wall_p50_ms"], 1) if row["wall_p50_ms"] else None
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="2,000 saves of each kind")
    args = parser.parse_args(argv)
    rounds = 2000 if args.full else 300
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as folder:
        rows = measure(rounds, Path(folder))
    common.report(
        "ledger",
        rows,
        quick=not args.full,
        notes=f"{LIVE} live workers and 1,000 finished pods remembered; each save synced",
    )


if __name__ == "__main__":
    main()
