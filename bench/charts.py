"""Charts of the committed results (SVG, drawn with the standard library: no plotting library
here): bench/kueue.svg, each class's mean time to admission in Kueue's baseline (Kueue's
published run, the policy alone, the product quick and full), and bench/fleet.svg, the
fleet's heartbeat p95 and scheduler cycle against the number of nodes.

    .venv/bin/python -m bench.charts      # after bench/run.py; reads bench/results*.json
"""

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
COLORS = ["#888888", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"]


def results(name: str) -> dict:
    """A committed results file (machine, benchmarks, …); {} where there is none."""
    path = BENCH / name
    return json.loads(path.read_text()) if path.exists() else {}


def load(name: str) -> dict:
    return results(name).get("benchmarks", {})


def when(name: str) -> str:
    """Which commit, on what day, a results file is from (a chart mixes files)."""
    path = BENCH / name
    if not path.exists():
        return ""
    machine = json.loads(path.read_text())["machine"]
    return f"{machine['git_commit']}, {machine['date'][:10]}"


def header(w: int, h: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{title}</text>',
    ]


def kueue_series() -> dict[str, dict[str, float]]:
    """Series label -> class -> mean seconds to admission, from whatever results exist."""
    quick, full = load("results.json"), load("results-kueue-full.json")
    series: dict[str, dict[str, float]] = {}
    rows = (full.get("kueue") or quick.get("kueue") or {}).get("rows", [])
    if rows:
        series["Kueue (published, 15,000 jobs)"] = {r["class"]: r["kueue_mean_s"] for r in rows}
    quick_at, full_at = when("results.json"), when("results-kueue-full.json")
    for label, result in (
        (f"policy alone (simulator, 15,000 jobs; {full_at})", full.get("kueue_sim")),
        (f"product, quick (1,500 jobs, 1 agent; {quick_at})", quick.get("kueue")),
        (f"product, full (15,000 jobs, 10 agents; {full_at})", full.get("kueue")),
    ):
        if result and result.get("rows"):
            series[label] = {r["class"]: r["mean_admission_s"] for r in result["rows"]}
    return series


def kueue_svg(series: dict[str, dict[str, float]], path: Path) -> None:
    """Grouped horizontal bars on a log scale (0.01 s to 1,000 s): one group per class."""
    classes = ["small", "medium", "large"]
    w, left, right, bar = 900, 90, 60, 14
    group = bar * len(series) + 16
    top = 50 + 16 * len(series)
    h = top + group * len(classes) + 40
    lo, hi = -2, 3  # decades

    def x(seconds: float) -> float:
        v = min(max(math.log10(max(seconds, 10**lo)), lo), hi)
        return left + (v - lo) / (hi - lo) * (w - left - right)

    parts = header(w, h, "Kueue's baseline: mean time to admission (seconds, log scale)")
    for n, label in enumerate(series):
        y = 40 + 16 * n
        parts.append(f'<rect x="10" y="{y - 10}" width="10" height="10" fill="{COLORS[n]}"/>')
        parts.append(f'<text x="26" y="{y}">{label}</text>')
    for d in range(lo, hi + 1):
        gx = x(10**d)
        parts.append(
            f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{h - 34}" stroke="#ddd"/>'
        )
        parts.append(f'<text x="{gx - 10:.1f}" y="{h - 20}">{10**d:g}</text>')
    for c, klass in enumerate(classes):
        y0 = top + c * group
        parts.append(f'<text x="10" y="{y0 + group / 2:.1f}">{klass}</text>')
        for n, values in enumerate(series.values()):
            if klass not in values:
                continue
            y, v = y0 + n * bar, values[klass]
            parts.append(
                f'<rect x="{left}" y="{y}" width="{x(v) - left:.1f}" height="{bar - 2}" '
                f'fill="{COLORS[n]}"/>'
            )
            parts.append(f'<text x="{x(v) + 4:.1f}" y="{y + bar - 4}">{v:g} s</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def fleet_rows() -> list[dict]:
    """The fleet's rows, smallest fleet first: the quick run's and the full run's, each
    with the CPUs of the machine it ran on (the full sizes need a machine of 16)."""
    rows = []
    for name in ("results.json", "results-fleet-full.json"):
        cpus = results(name).get("machine", {}).get("cpus")
        rows += [row | {"cpus": cpus} for row in (load(name).get("fleet") or {}).get("rows", [])]
    return sorted({r["nodes"]: r for r in rows}.values(), key=lambda r: r["nodes"])


def fleet_svg(rows: list[dict], path: Path) -> None:
    """Two panels of bars per fleet size: heartbeat p95 (target 200 ms) and the cycle's mean
    and longest (target 1 s); a size the machine could not drive (its heartbeats fell short
    of the offered rate, or the run did not get its nodes Ready) is marked."""
    w, h, pad, panel = 900, 340, 50, 400
    parts = header(w, h, "Fleet over the real protocol: heartbeat p95 and scheduler cycle (ms)")
    panels = (
        ("heartbeat p95 (target 200 ms)", [("hb_p95_ms", COLORS[1])], 200),
        (
            "cycle mean / longest (target 1,000 ms)",
            [("cycle_mean_ms", COLORS[2]), ("cycle_max_ms", COLORS[3])],
            1000,
        ),
    )
    for p, (title, keys, target) in enumerate(panels):
        x0 = pad + p * (panel + 30)
        top, bottom = 60, h - 60
        peak = max([target * 1.2] + [r.get(k) or 0 for r in rows for k, _ in keys])

        def y(v: float, top=top, bottom=bottom, peak=peak) -> float:
            return bottom - v / peak * (bottom - top)

        parts.append(f'<text x="{x0}" y="45">{title}</text>')
        ty = y(target)
        parts.append(
            f'<line x1="{x0}" y1="{ty:.1f}" x2="{x0 + panel - 20}" y2="{ty:.1f}" '
            'stroke="#d62728" stroke-dasharray="4 3"/>'
        )
        slot = (panel - 20) / max(1, len(rows))
        for i, row in enumerate(rows):
            sx = x0 + i * slot
            if "failed" in row:  # the size this machine could not drive: say so, no bars
                parts.append(
                    f'<text x="{sx + 10:.1f}" y="{bottom + 16}">{row["nodes"]:,} nodes</text>'
                )
                parts.append(f'<text x="{sx + 10:.1f}" y="{bottom - 20}">not measured here</text>')
                continue
            if any(row.get(key) is None for key, _ in keys):  # an older run: per Celery task
                parts.append(
                    f'<text x="{sx + 10:.1f}" y="{bottom - 20}">not measured per cycle</text>'
                )
            for k, (key, color) in enumerate(keys):
                if row.get(key) is None:
                    continue
                v = row.get(key) or 0
                bw = (slot - 20) / len(keys)
                bx = sx + 10 + k * bw
                parts.append(
                    f'<rect x="{bx:.1f}" y="{y(v):.1f}" width="{bw - 2:.1f}" '
                    f'height="{bottom - y(v):.1f}" fill="{color}"/>'
                )
                parts.append(f'<text x="{bx:.1f}" y="{y(v) - 4:.1f}">{v:g}</text>')
            bound = row.get("hb_per_s", 0) < 0.95 * row.get("hb_offered_per_s", 0)
            label = f"{row['nodes']:,} nodes, {row['cpus']} CPUs" + (
                " (machine-bound)" if bound else ""
            )
            parts.append(f'<text x="{sx + 10:.1f}" y="{bottom + 16}">{label}</text>')
            parts.append(
                f'<text x="{sx + 10:.1f}" y="{bottom + 32}">'
                f"{row.get('hb_per_s', 0):g} of {row.get('hb_offered_per_s', 0):g} hb/s</text>"
            )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> int:
    series = kueue_series()
    if series:
        kueue_svg(series, BENCH / "kueue.svg")
        print(f"chart: {BENCH / 'kueue.svg'} ({len(series)} series)")
    rows = fleet_rows()
    if rows:
        fleet_svg(rows, BENCH / "fleet.svg")
        print(f"chart: {BENCH / 'fleet.svg'} ({len(rows)} fleet sizes)")
    if not series and not rows:
        print("no results to chart: run bench/run.py first", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
