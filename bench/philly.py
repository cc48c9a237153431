"""Philly what-if: the Philly trace (../shared/traces/philly.csv) through the simulator (the
real plan() and lifecycle on a simulated clock) twice, idle resources off and on, and a
chart of GPU utilisation over time (bench/philly.png; bench/philly.svg with labels).

    .venv/bin/python -m bench.philly            # quick: the first 2,000 jobs
    .venv/bin/python -m bench.philly --full     # the first 10,000 jobs (issue 10's what-if)

The cluster is philly_vc.csv with every VC scaled by `--scale` (default 0.15): the VC table
is the whole cluster's, about 7.5x what the trace needs, so unscaled it idles at ~13 %; at
0.15 the offered load is about 0.8. Every job checkpoints every 30 minutes and restarts
after a preemption (Automatic Fault Tolerance).
Off: jobs as the trace gives them (Off; only a job larger than its VC may use idle
resources, or it could never run). On: every other job (`--idle-fraction 0.5`) is
Acceptable (it may borrow idle GPUs of other VCs and is reclaimed when their owners need
them). The same as `manage.py simulate --trace … --scale 0.15 --checkpoint-every 1800
--fault-tolerance [--idle-fraction 0.5 --idle-mode Acceptable]`.

No plotting library is installed (matplotlib is not in .venv and there is no network): the
PNG is drawn here with zlib and struct (lines, axes and a 10 % grid, no text); the SVG
carries the same lines with axis labels and a legend.
"""

import argparse
import os
import struct
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

# ../shared/traces next to the checkout (or above a worktree); PHILLY_TRACE overrides it.
TRACE = next(
    (p / "shared" / "traces" / "philly.csv" for p in ROOT.parents if (p / "shared").is_dir()),
    ROOT.parent / "shared" / "traces" / "philly.csv",
)
COLORS = {
    "off": (200, 60, 40),
    "on": (30, 110, 200),
    "tree-off": (230, 150, 40),
    "tree-on": (40, 160, 90),
}
BINS = 300


def scenario(limit: int, idle_fraction: float, scale: float) -> dict:
    from simulator.trace import philly_scenario

    trace = Path(os.environ.get("PHILLY_TRACE", TRACE))
    return philly_scenario(
        trace,
        trace.with_name("philly_vc.csv"),
        limit=limit,
        scale=scale,
        idle_fraction=idle_fraction,
        idle_mode="Acceptable",
        checkpoint_every=1800,
        fault_tolerance=True,
    )


def as_tree(raw: dict) -> dict:
    """The same cluster with the VCs as teams of a 3-level tree (docs/quota-tree.md): one
    org, 3 departments taking the VCs in turn (each department's gpus its VCs' sum, so the
    org and departments have no own guarantee), weights 1-3 on the VCs by size order."""
    vcs = sorted(raw["quotas"], key=lambda q: -q["gpus"])
    depts = [[vc for i, vc in enumerate(vcs) if i % 3 == d] for d in range(3)]
    root = {**vcs[0], "name": "org", "gpus": sum(q["gpus"] for q in vcs)}
    quotas = [root]
    for d, members in enumerate(depts):
        quotas.append(
            {
                "name": f"dept-{d}",
                "parent": "org",
                "gpus": sum(q["gpus"] for q in members),
                "weight": 1 + d % 2,
            }
        )
        for i, vc in enumerate(members):
            quotas.append({"name": vc["name"], "parent": f"dept-{d}", "gpus": vc["gpus"],
                           "weight": 1 + i % 3})  # fmt: skip
    return {**raw, "quotas": quotas}


def utilisation(events: list[dict], total_gpus: int, end: float) -> list[float]:
    """Busy GPUs / all GPUs, time-averaged over BINS equal bins of [0, end]."""
    from policy.statuses import FINAL_POD_STATUSES

    held: dict[tuple, int] = {}
    changes: list[tuple[float, int]] = []
    for e in events:
        if "pod_status" not in e:
            continue
        key = (e["job"], e["pod"], e["attempt"])
        if e["pod_status"] == "Starting" and key not in held:
            held[key] = e["gpus"]
            changes.append((e["t"], e["gpus"]))
        elif e["pod_status"] in FINAL_POD_STATUSES and key in held:
            changes.append((e["t"], -held.pop(key)))
    width = end / BINS if end > 0 else 1.0
    area = [0.0] * BINS
    busy, last = 0, 0.0
    for t, delta in [*sorted(changes), (end, 0)]:
        t = min(t, end)  # the chart ends at `end`: what runs on after it is cut off
        while last < t:  # spread busy x [last, t) over the bins it covers
            b = min(BINS - 1, int(last / width))
            edge = min(t, (b + 1) * width)
            area[b] += busy * (edge - last)
            last = edge if edge > last else t
        busy += delta
    return [a / (width * total_gpus) for a in area]


def run(
    limit: int, idle_fraction: float, scale: float, tree: bool = False
) -> tuple[dict, list[dict], int, float]:
    from simulator.engine import Simulation
    from simulator.scenario import parse
    from simulator.trace import offered_load

    raw = scenario(limit, idle_fraction, scale)
    if tree:
        raw = as_tree(raw)
    total = sum(n["count"] * n["gpus"] for n in raw["nodes"])
    pod_events: list[dict] = []  # the chart needs only these (waiting events are most)

    def keep(event: dict) -> None:
        if "pod_status" in event:
            pod_events.append(event)

    sim = Simulation(parse(raw), emit=keep, keep_events=False)
    started = time.perf_counter()
    summary = sim.run()
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    return summary, pod_events, total, offered_load(raw)


# -- charts ----------------------------------------------------------------------------------
def png(series: dict[str, list[float]], path: Path, w: int = 900, h: int = 360) -> None:
    pad = 30
    pixels = [[(255, 255, 255)] * w for _ in range(h)]

    def put(x: int, y: int, c) -> None:
        if 0 <= x < w and 0 <= y < h:
            pixels[y][x] = c

    for k in range(11):  # grid every 10 %
        y = h - pad - round(k / 10 * (h - 2 * pad))
        for x in range(pad, w - pad):
            put(x, y, (225, 225, 225) if k else (0, 0, 0))
    for y in range(pad, h - pad + 1):
        put(pad, y, (0, 0, 0))
    for name, values in series.items():
        color = COLORS[name]
        prev = None
        for i, v in enumerate(values):
            x = pad + round(i / max(1, len(values) - 1) * (w - 2 * pad))
            y = h - pad - round(min(1.0, v) * (h - 2 * pad))
            if prev is not None:
                x0, y0 = prev
                steps = max(abs(x - x0), abs(y - y0), 1)
                for s in range(steps + 1):
                    px, py = x0 + (x - x0) * s // steps, y0 + (y - y0) * s // steps
                    put(px, py, color)
                    put(px, py + 1, color)
            prev = (x, y)
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def svg(series: dict[str, list[float]], hours: float, path: Path, labels: dict[str, str]) -> None:
    w, h, pad = 900, 360, 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for k in range(0, 11, 2):
        y = h - pad - k / 10 * (h - 2 * pad)
        parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="4" y="{y + 4:.1f}">{k * 10}%</text>')
    parts.append(f'<text x="{w / 2 - 80}" y="{h - 8}">simulated hours (0 to {hours:.0f})</text>')
    for n, (name, values) in enumerate(series.items()):
        r, g, b = COLORS[name]
        pts = " ".join(
            f"{pad + i / max(1, len(values) - 1) * (w - 2 * pad):.1f},"
            f"{h - pad - min(1.0, v) * (h - 2 * pad):.1f}"
            for i, v in enumerate(values)
        )
        parts.append(f'<polyline fill="none" stroke="rgb({r},{g},{b})" stroke-width="1.5" '
                     f'points="{pts}"/>')  # fmt: skip
        parts.append(f'<text x="{pad + 10}" y="{pad - 20 + 14 * n}" fill="rgb({r},{g},{b})">'
                     f"{labels[name]}</text>")  # fmt: skip
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--limit", type=int, help="jobs (default 2,000; --full 10,000)")
    parser.add_argument("--scale", type=float, default=0.15, help="size every VC by this")
    parser.add_argument(
        "--idle-fraction", type=float, default=0.5, help="idle on: this share is Acceptable"
    )
    parser.add_argument("--tree", action="store_true", help="also run on a 3-level tree")
    parser.add_argument("--out", default=str(ROOT / "bench" / "philly"), help="chart path stem")
    args = parser.parse_args(argv)
    common.setup_django("")  # the simulator needs Django's settings, not a database
    limit = args.limit or (10_000 if args.full else 2_000)
    rows, series, end = [], {}, 0.0
    runs = {}
    load = 0.0
    variants = [("off", 0.0, False), ("on", args.idle_fraction, False)]
    if args.tree:
        variants += [("tree-off", 0.0, True), ("tree-on", args.idle_fraction, True)]
    for name, fraction, tree in variants:
        summary, events, total, load = run(limit, fraction, args.scale, tree)
        runs[name] = (summary, events, total)
        # The chart spans until 99 % of the jobs have finished: a few jobs of the trace run
        # for weeks and would squeeze everything else into the left edge.
        done = [j["finished_at"] for j in summary["jobs"].values() if j.get("finished_at")]
        end = max(end, common.percentile(done, 99) if done else 0.0)
    for name, (summary, events, total) in runs.items():
        series[name] = utilisation(events, total, end)
        jobs = summary["jobs"]
        waits = [j["first_running_at"] - j["submitted_at"] for j in jobs.values()
                 if j.get("first_running_at") is not None]  # fmt: skip
        finished = [j["finished_at"] for j in jobs.values() if j.get("finished_at") is not None]
        used = summary["gpu_utilization"] * total * (max(finished) if finished else 0)
        rows.append({
            "idle": name,
            "jobs": len(jobs),
            "gpus": total,
            "utilisation": round(summary["gpu_utilization"], 3),
            "mean_wait_h": round(sum(waits) / len(waits) / 3600, 2) if waits else None,
            "p95_wait_h": round(common.percentile(waits, 95) / 3600, 2) if waits else None,
            "makespan_h": round(max(finished) / 3600, 1) if finished else None,
            "preemptions": summary["preemptions"],
            "lost_gpu_h": round(summary["lost_gpu_seconds"] / 3600, 1),
            "lost_share": round(summary["lost_gpu_seconds"] / used, 4) if used else None,
            "sim_wall_s": summary["wall_seconds"],
        })  # fmt: skip
    stem = Path(args.out)
    png(series, stem.with_suffix(".png"))
    labels = {r["idle"]: f"idle {r['idle']}: utilisation {r['utilisation']:.1%}" for r in rows}
    svg(series, end / 3600, stem.with_suffix(".svg"), labels)
    print(f"chart: {stem.with_suffix('.png')} (and .svg)")
    off, on = rows[:2]
    ratio = (
        round(on["mean_wait_h"] / off["mean_wait_h"], 2)
        if on["mean_wait_h"] is not None and off["mean_wait_h"]
        else None
    )
    common.report(
        "philly",
        rows,
        quick=not args.full,
        offered_load=round(load, 3),
        wait_ratio_on_off=ratio,
        targets={"wait_ratio_on_off": 0.5, "lost_share": 0.02, "offered_load": 0.8},
        notes=f"first {limit:,} jobs of the Philly trace, every VC x{args.scale:g} "
        f"(offered load {load:.2f}), checkpoints every 30 min, fault tolerance; idle on: "
        f"{args.idle_fraction:.0%} Acceptable; mean wait on/off {ratio}"
        + f"; chart until 99 % of the jobs finished ({end / 3600:.0f} h); PNG drawn with the "
        "stdlib (no matplotlib in .venv), labels in the SVG",
        chart_png=str(stem.with_suffix(".png")),
        chart_svg=str(stem.with_suffix(".svg")),
    )


if __name__ == "__main__":
    main()
