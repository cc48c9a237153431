"""The data folders' content manifest (docs/results.md, "Run identity"; a job's
`result_inputs_sha256`): what the agent's hashing thread costs before a start, against
coreutils' `sha256sum` over the same files as the baseline, and what its cache spares on a
second start (an agent restart, the next rank on the node, a fault-tolerance restart).

Real files in a temporary folder (written once, then read from the page cache: the figures
are the hashing's CPU, not a disk's speed):

- cold: no cache, every byte hashed (agents.node.hashing.hash_inputs);
- warm: the same folders again with the cache (nothing re-read);
- one changed: one file rewritten, the rest from the cache;
- sha256sum: `find … -type f -print0 | xargs -0 sha256sum`, the ratio's baseline;
- the fingerprint (paths, sizes, times; no content) the agent computes for every job.

    .venv/bin/python -m bench.inputs_hash            # quick: 200 files, 400 MB
    .venv/bin/python -m bench.inputs_hash --full     # 2,000 files, 2 GB
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402


def _write_files(folder: Path, files: int, size: int) -> None:
    block = os.urandom(1 << 20)
    for i in range(files):
        sub = folder / f"shard-{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        with open(sub / f"part-{i:05d}.bin", "wb") as f:
            left = size
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)


def _timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def measure(files: int, size: int) -> list[dict]:
    from protocol.hashing import HashCache, hash_inputs
    from protocol.inputs import inputs_facts

    rows: list[dict] = []
    total = files * size
    with tempfile.TemporaryDirectory(prefix="bench-inputs-") as root:
        data = Path(root) / "data"
        data.mkdir()
        _write_files(data, files, size)
        folders = {"train": str(data)}
        cancelled = threading.Event()

        def run(cache: HashCache):
            return hash_inputs(
                folders, Path(root) / "m.sha256", cache=cache, say=lambda _l: None,
                cancelled=cancelled,
            )  # fmt: skip

        baseline_cmd = f"find {data} -type f -print0 | xargs -0 sha256sum > /dev/null"
        subprocess.run(baseline_cmd, shell=True, check=True)  # into the page cache
        base, _ = _timed(lambda: subprocess.run(baseline_cmd, shell=True, check=True))
        cache = HashCache(Path(root) / "cache.json")
        cold, (facts, _note) = _timed(lambda: run(cache))
        assert facts.inputs_sha256 and facts.inputs_files == files, facts
        warm_cache = HashCache(Path(root) / "cache.json")  # a new agent: read from disk
        warm, (again, _note) = _timed(lambda: run(warm_cache))
        assert again.inputs_sha256 == facts.inputs_sha256
        changed = data / "shard-000" / "part-00000.bin"
        changed.write_bytes(os.urandom(size))
        one, (other, _note) = _timed(lambda: run(HashCache(Path(root) / "cache.json")))
        assert other.inputs_sha256 != facts.inputs_sha256
        fingerprint, _ = _timed(lambda: inputs_facts(folders))

    def row(what: str, seconds: float) -> dict:
        return {
            "what": what,
            "seconds": round(seconds, 4),
            "MB/s": round(total / 10**6 / seconds, 1),
            "x sha256sum": round(seconds / base, 2),
        }

    rows += [
        row("sha256sum (coreutils), the baseline", base),
        row("hash_inputs, cold (every byte)", cold),
        row("hash_inputs, warm (agent's cache)", warm),
        row("hash_inputs, one file changed", one),
        row("fingerprint (paths, sizes, times)", fingerprint),
    ]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    files, size = (2_000, 1_000_000) if args.full else (200, 2_000_000)
    rows = measure(files, size)
    common.report(
        "inputs_hash",
        rows,
        quick=not args.full,
        notes=f"{files:,} files, {files * size / 10**9:.1f} GB from the page cache (one core)",
        files=files,
        bytes=files * size,
        cold_mb_per_s=rows[1]["MB/s"],
        cold_vs_sha256sum=rows[1]["x sha256sum"],
    )


if __name__ == "__main__":
    main()
