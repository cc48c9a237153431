"""The headline figures of bench/results.json as a Markdown table (for the README).

.venv/bin/python bench/summary.py [bench/results.json]
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _row(rows: list[dict], key: str, value: str) -> dict:
    return next((r for r in rows if str(r.get(key, "")).startswith(value)), {})


def lines(results: dict) -> list[str]:
    b = results["benchmarks"]
    out = ["| what | measured | target |", "|---|---|---|"]

    def add(what: str, measured: str, target: str = "") -> None:
        out.append(f"| {what} | {measured} | {target} |")

    if (t := b.get("throughput")) and not t.get("error"):
        rows = t["rows"]
        one = _row(rows, "path", "POST /api/v1/jobs (one")
        arr = _row(rows, "path", "POST /api/v1/jobs/array")
        bat = _row(rows, "path", "POST /api/v1/jobs/batch")
        hb = _row(rows, "path", "POST /api/v1/agent/heartbeat")
        triv = _row(rows, "path", "trivial")
        add("trivial view (`/healthz`)", f"{triv['requests_per_s']}/s, "
            f"{triv['web_cpu_ms_per_req']} ms CPU")  # fmt: skip
        add("`POST /api/v1/jobs`", f"{one['requests_per_s']}/s, {one['web_cpu_ms_per_req']} ms "
            f"CPU (+{one['db_cpu_ms_per_req']} ms PostgreSQL)", "≤ 5 ms CPU")  # fmt: skip
        add(f"`{arr['path'].split(' (')[0]}` ({arr['path'].split('(')[1]}",
            f"{arr['items_per_s']} jobs/s", "≥ 1,000 jobs/s")  # fmt: skip
        add(f"`{bat['path'].split(' (')[0]}` ({bat['path'].split('(')[1]}",
            f"{bat['items_per_s']} jobs/s", "≥ 1,000 jobs/s")  # fmt: skip
        add("agent heartbeat (8 GPUs, nothing changed)", f"{hb['requests_per_s']}/s, "
            f"{hb['web_cpu_ms_per_req']} ms CPU", "≥ 1,000/s")  # fmt: skip
    if (pc := b.get("percall")) and not pc.get("error"):
        for r in pc["rows"]:
            target = r["target_cpu_ms"]  # none for the busy heartbeat: measured, not bounded
            add(f"{r['path']}, in-process", f"{r['cpu_ms']} ms CPU, {r['statements']} "
                f"statements ({r['writes']} writes)", "" if target is None else
                f"≤ {target:g} ms CPU" + ("; 1 statement" if "nothing changed" in r["path"]
                                          else ""))  # fmt: skip
    if (led := b.get("ledger")) and not led.get("error"):
        for r in led["rows"][:-1]:  # the last row is the reference (the earlier way)
            add(f"agent ledger: {r['what']}, 1,000 finished kept", f"p50 {r['wall_p50_ms']} ms "
                f"(synced), {r['cpu_ms']} ms CPU; {r['vs_before']}x faster than rewriting "
                "every record")  # fmt: skip
    if (w := b.get("wake")) and not w.get("error"):
        for r in w["rows"]:
            add(f"{r['what']} (real agent, waking {'on' if w.get('waking') else 'off'})",
                f"p50 {r['p50_s']} / p95 {r['p95_s']} s",
                "p95 ≤ 1 s" if r["what"] == "submit -> Running" else "")  # fmt: skip
    if (lg := b.get("logs")) and not lg.get("error"):
        rows = lg["rows"]
        fast, page, ingest = rows[0], rows[1], rows[2]
        add("print → visible (viewer polling every 50 ms)", f"p50 {fast['p50_ms']} / p95 "
            f"{fast['p95_ms']} ms")  # fmt: skip
        add("print → visible on the job page (its own poll)", f"p50 {page['p50_ms']} / p95 "
            f"{page['p95_ms']} ms", "p95 ≤ 1 s")  # fmt: skip
        add("log ingest", f"{ingest.get('lines_per_s')} lines/s ({ingest['what']})",
            "≥ 50,000 lines/s")  # fmt: skip
    if (s := b.get("scheduler")) and not s.get("error"):
        for nodes, ms in s.get("first_cycle_ms_by_nodes", {}).items():
            jobs = _row(s["rows"], "what", f"DB cycle {nodes} nodes").get("jobs")
            add(f"first scheduler cycle, {jobs:,} Pending, {int(nodes):,} nodes", f"{ms} ms",
                "< 1 s" if str(nodes) == "2000" else "")  # fmt: skip
    if (p := b.get("pages")) and not p.get("error"):
        for r in p["rows"][1:]:
            target = "p95 ≤ 100 ms" + ("; ≤ 3x trivial" if r["page"].startswith("API") else "")
            add(f"{r['page']} ({p.get('seeded', '')})",
                f"p50 {r['p50_ms']} / p95 {r['p95_ms']} ms, {r['p50_x_trivial']}x trivial",
                target)  # fmt: skip
    if (k := b.get("kueue")) and not k.get("error"):
        goal = k.get("targets", {})  # the bench's own (bench/kueue.py), else the older ones
        add(f"Kueue baseline ({k['jobs']:,} jobs, {k['tenants']} tenant(s) x "
            f"{k['quotas_per_tenant']} quotas): total", f"{k['total_seconds']} s "
            f"({k['finished']:,} finished)",
            f"≤ {goal.get('total_seconds', 90):g} s (Kueue 351 s)")  # fmt: skip
        cut = k["finished"] < k["jobs"]  # only the jobs admitted before the limit: censored
        for r in k["rows"]:
            add(f"Kueue baseline: mean time to admission, {r['class']}",
                f"{r['mean_admission_s']} s ({r['admitted']:,} of {r['jobs']:,} admitted"
                + (" before the limit; censored)" if cut else ")"),
                f"< {r['kueue_mean_s']} s (Kueue)")  # fmt: skip
        if "kueue_usage" in k:  # results before it have only the stricter figure
            add("Kueue baseline: usage by Kueue's formula (reserved, all quotas)",
                f"{k['kueue_usage']:.1%}", "≥ 58.7% (Kueue 58.7 %)")  # fmt: skip
        add("Kueue baseline: minimum quota usage while running", f"{k['min_quota_usage']:.1%}",
            f"≥ {goal.get('min_quota_usage', 0.8):.1%} (Kueue 58.7 %)")  # fmt: skip
    if (fl := b.get("fleet")) and not fl.get("error"):
        for r in fl["rows"]:
            if "failed" in r:  # a size this machine could not drive
                add(f"fleet: {r['nodes']:,} nodes", f"not measured: {r['not_reached']}", "")
                continue
            add(f"fleet: {r['nodes']:,} nodes, {r['queued']:,} queued, heartbeat "
                f"{fl['heartbeat']:g} s", f"{r['hb_per_s']}/{r['hb_offered_per_s']} heartbeats/s, "
                f"p95 {r['hb_p95_ms']} ms; cycle {r['cycle_mean_ms']} ms (longest "
                f"{r['cycle_max_ms']}); submit → Running p95 {r['submit_running_p95_s']} s; "
                f"{r['not_ready']} NotReady", "p95 ≤ 200 ms, cycle ≤ 1 s, 0 NotReady")  # fmt: skip
    if (ks := b.get("kueue_sim")) and not ks.get("error"):
        means = ", ".join(f"{r['class']} {r['mean_admission_s']} s" for r in ks["rows"])
        add(f"Kueue baseline on the policy alone (simulator, {ks['tenants']} x "
            f"{ks['quotas_per_tenant']} quotas)", f"{ks['total_seconds']} s simulated; mean "
            f"admission {means}; min quota usage {ks['min_quota_usage']:.1%}",
            "≤ 75 s; each class < Kueue's")  # fmt: skip
    if (ph := b.get("philly")) and not ph.get("error"):
        load = ph.get("offered_load")
        for r in ph["rows"]:
            lost = r.get("lost_share")
            add(f"Philly what-if ({r['jobs']:,} jobs"
                + (f", offered load {load}" if load is not None else "") + f"), idle {r['idle']}",
                f"utilisation {r['utilisation']:.1%}, mean wait {r['mean_wait_h']} h"
                + (f", {r['preemptions']} preemptions, {lost:.2%} of GPU time lost"
                   if lost is not None else ""),
                "" if r["idle"] == "off" else "wait ≤ 0.5x off; lost < 2 %")  # fmt: skip
        if ph.get("wait_ratio_on_off") is not None:
            add("Philly what-if: mean wait, idle on / off", f"{ph['wait_ratio_on_off']}x",
                "≤ 0.5x")  # fmt: skip
    if (f := b.get("fence_rss")) and not f.get("error"):
        r = f["rows"][0]
        add("worker wrapper memory (fence, C)", f"{r['rss_kib']} KiB RSS, {r['pss_kib']} KiB PSS",
            "≤ 2 MB")  # fmt: skip
    m = results["machine"]
    failed = [n for n, r in b.items() if r.get("error")]
    out.append("")
    out.append(f"Machine: {m['cpus']} x {m['cpu_model']}, load {m['load_1m_at_start']} at the "
               f"start; {m['date']}, commit {m['git_commit']}; variant {results['variant']}, "
               f"{results['total_seconds']} s in all."
               + (f" Failed: {', '.join(failed)}." if failed else ""))  # fmt: skip
    return out


def main() -> None:
    """Print the table; with --readme, put it between the README's bench-table markers."""
    args = [a for a in sys.argv[1:] if a != "--readme"]
    path = Path(args[0]) if args else ROOT / "bench" / "results.json"
    table = "\n".join(lines(json.loads(path.read_text())))
    print(table)
    if "--readme" in sys.argv:
        readme = ROOT / "README.md"
        text = readme.read_text()
        mark = "<!-- bench-table: .venv/bin/python bench/summary.py --readme -->"
        start = text.index(mark) + len(mark)
        end = text.index("<!-- /bench-table -->")
        readme.write_text(text[:start] + "\n" + table + "\n" + text[end:])


if __name__ == "__main__":
    main()
