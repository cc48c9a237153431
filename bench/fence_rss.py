"""Memory per worker of the worker wrapper: the fence wrapper (agents/node/fence, static C)
against the Python wrapper it replaced (procwrap.py, from git history). Prints RSS and PSS
(proportional set size: shared pages split among the processes sharing them) per wrapper.

    .venv/bin/python bench/fence_rss.py [--full] [--workers 20]
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.node import fence  # noqa: E402

OLD_WRAPPER_COMMIT = "f71725e"  # the last commit with agents/node/runtimes/procwrap.py


def memory_kib(pid: int) -> tuple[int, int]:
    rss = int(
        next(
            line.split()[1]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
    )
    pss = int(
        next(
            line.split()[1]
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            if line.startswith("Pss:")
        )
    )
    return rss, pss


def measure(wrapper: list[str], workers: int, work: Path) -> tuple[float, float]:
    procs = []
    try:
        for i in range(workers):
            command = [*wrapper, str(work / f"exit-{i}"), "--", "sleep", "60"]
            procs.append(subprocess.Popen(command, start_new_session=True))
        time.sleep(2.0)  # let every wrapper reach its steady state
        samples = [memory_kib(p.pid) for p in procs]
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return (
        sum(rss for rss, _ in samples) / len(samples),
        sum(pss for _, pss in samples) / len(samples),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, help="default 10 (quick), 20 (--full)")
    parser.add_argument("--full", action="store_true", help="the suite's full variant")
    args = parser.parse_args()
    args.workers = args.workers or (20 if args.full else 10)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        binary = fence.install(work / "fence")
        size_kib = binary.stat().st_size // 1024
        fence.Lease(work / "fence").unlimited()
        old = work / "procwrap.py"
        source = subprocess.run(
            ["git", "show", f"{OLD_WRAPPER_COMMIT}:agents/node/runtimes/procwrap.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        old.write_text(source)
        rows = [
            (
                "fencewrap (C, static)",
                measure([str(binary), str(work / "fence" / "lease")], args.workers, work),
            ),
            ("procwrap.py (Python)", measure([sys.executable, "-I", str(old)], args.workers, work)),
        ]
    print(f"{'wrapper':<24} {'RSS KiB':>9} {'PSS KiB':>9}   ({args.workers} workers each)")
    for name, (rss, pss) in rows:
        print(f"{name:<24} {rss:>9.0f} {pss:>9.0f}")
    (c_rss, c_pss), (py_rss, py_pss) = rows[0][1], rows[1][1]
    print(f"ratio Python/C: RSS {py_rss / c_rss:.1f}x, PSS {py_pss / c_pss:.1f}x")
    print(f"fencewrap binary: {size_kib} KiB on disk")
    from bench.common import report

    report(
        "fence_rss",
        [
            {"wrapper": name, "rss_kib": round(rss), "pss_kib": round(pss)}
            for name, (rss, pss) in rows
        ],
        quick=not args.full,
        workers=args.workers,
        binary_kib=size_kib,
        target="wrapper <= 2 MB per worker",
    )


if __name__ == "__main__":
    main()
