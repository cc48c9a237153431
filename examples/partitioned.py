"""A partitioned program that counts its work (docs/results.md): 8 partitions of 500 ids.

Partition p<i> holds the ids (i-1)*500+1 … i*500, one per line, in `p<i>.csv`. Each
partition is written into OUTPUT_DIR, then accepted (`agents.sdk.accept`); on a resume the
partitions already accepted (`accepted()`) are skipped, so a restart never writes an id
twice. A stop (SIGTERM) lets the current partition finish and be accepted first.

Submit it with a contract:

    gpu-console submit --quota team-a --command "python examples/partitioned.py" \\
        result_unit=partition result_expected_units="p{1..8}" result_expected_items=4000

Knobs for trying failures (environment): PARTITIONS (8), IDS (500), UNIT_DELAY (seconds per
partition, 0), STOP_AFTER=N (exit 0 after N partitions, the next one half-written),
CRASH_IN=N (on the first attempt, die by SIGKILL halfway through partition N).
"""

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from agents.sdk import accept, accepted, output_dir, phase, progress, stop_requested


def _number(name: str, default: int = 0) -> int:
    return int(os.environ.get(name) or default)


def write_partition(index: int, ids: int, *, half: bool = False) -> Path:
    """The partition's file, fsynced by accept(); `half`: only its first half (a crash)."""
    first = (index - 1) * ids + 1
    last = first + (ids // 2 if half else ids)
    path = output_dir() / f"p{index}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.writelines(f"{n}\n" for n in range(first, last))
    return path


def main() -> int:
    partitions, ids = _number("PARTITIONS", 8), _number("IDS", 500)
    delay = float(os.environ.get("UNIT_DELAY") or 0)
    stop_after, crash_in = _number("STOP_AFTER"), _number("CRASH_IN")
    first_attempt = _number("ATTEMPT", 1) <= 1
    stop_requested()  # installs the SIGTERM handler
    phase("read")
    done = accepted()
    print(f"resuming with {len(done)} partitions accepted: {sorted(done)}", flush=True)
    phase("write")
    for index in range(1, partitions + 1):
        unit = f"p{index}"
        if unit in done:
            continue
        if stop_after and len(accepted()) >= stop_after:
            write_partition(index, ids, half=True)
            print(f"exiting 0 after {stop_after} partitions; {unit} is partial", flush=True)
            return 0
        if crash_in == index and first_attempt:
            write_partition(index, ids, half=True)
            print(f"crashing halfway through {unit}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        path = write_partition(index, ids)
        accept(unit, files=[path], items=ids)
        progress(index, partitions)
        print(f"accepted {unit}", flush=True)
        if stop_requested():
            print(f"stop requested: {unit} was the last whole partition", flush=True)
            return 143
        time.sleep(delay)
    phase("verify")
    return 0


if __name__ == "__main__":
    sys.exit(main())
