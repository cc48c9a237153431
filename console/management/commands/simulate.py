"""python manage.py simulate SCENARIO.yaml [--until S] [--summary-only]
python manage.py simulate --trace philly.csv [--vc philly_vc.csv] [--limit N] [--scale F]
    [--idle-fraction F] [--idle-mode Acceptable] [--checkpoint-every S] [--fault-tolerance]

Runs a scenario (docs/simulator.md) on the real plan()/lifecycle/fault-tolerance code with a
simulated clock and prints JSON Lines: one event per line, then {"summary": …}. Exit 0 when
the run completed (1 if an invariant was violated), 2 with a one-line error on stderr for
an invalid scenario.
"""

import json
import sys
import time
from pathlib import Path

import yaml
from django.core.management.base import BaseCommand

from simulator.engine import Simulation
from simulator.scenario import ScenarioError, parse
from simulator.trace import offered_load, philly_scenario


class Command(BaseCommand):
    help = "Simulate a scenario (or a Philly trace) on the real scheduler code."

    def add_arguments(self, parser):
        parser.add_argument("scenario", nargs="?", help="scenario YAML/JSON file")
        parser.add_argument("--until", type=float, help="stop at this simulated second")
        parser.add_argument("--summary-only", action="store_true")
        parser.add_argument("--trace", help="Philly trace CSV instead of a scenario")
        parser.add_argument("--vc", help="VC size table (default: philly_vc.csv beside it)")
        parser.add_argument("--limit", type=int, help="trace: first N jobs by submit time")
        parser.add_argument("--skip", type=int, default=0, help="trace: skip the first N jobs")
        parser.add_argument(
            "--idle-fraction",
            type=float,
            default=0.0,
            help="trace: share of jobs submitted with Only Idle Resources (every k-th job)",
        )
        parser.add_argument(
            "--scale", type=float, default=1.0, help="trace: size every VC by this factor"
        )
        parser.add_argument(
            "--idle-mode",
            default="Only Idle Resources",
            choices=["Only Idle Resources", "Acceptable"],
            help="trace: the idle mode of the --idle-fraction jobs",
        )
        parser.add_argument(
            "--checkpoint-every", type=float, default=0, help="trace: seconds between checkpoints"
        )
        parser.add_argument(
            "--fault-tolerance", action="store_true", help="trace: jobs restart after preemption"
        )
        parser.add_argument(
            "--write-scenario", help="trace: write the scenario as YAML here and exit"
        )

    def handle(self, *args, **opts):
        try:
            scenario = self._load(opts)
        except ScenarioError as exc:
            self.stderr.write(f"invalid scenario: {exc}")
            sys.exit(2)
        if opts.get("write_scenario"):
            return
        out = self.stdout
        summary_only = opts["summary_only"]

        def emit(event: dict) -> None:
            out.write(json.dumps(event, separators=(", ", ": ")))

        started = time.perf_counter()
        sim = Simulation(
            scenario,
            until=opts.get("until"),
            emit=None if summary_only else emit,
            keep_events=False,  # written as they happen (or not at all): none kept in memory
        )
        summary = sim.run()
        summary["wall_seconds"] = round(time.perf_counter() - started, 3)
        out.write(json.dumps({"summary": summary}, separators=(", ", ": ")))
        if summary["invariant_violations"]:
            self.stderr.write(f"invariant violated: {summary['invariant_violations'][0]}")
            sys.exit(1)

    def _load(self, opts):
        if opts.get("trace"):
            trace = Path(opts["trace"])
            vc = Path(opts["vc"]) if opts.get("vc") else trace.with_name("philly_vc.csv")
            raw = philly_scenario(
                trace,
                vc,
                limit=opts.get("limit"),
                skip=opts["skip"],
                idle_fraction=opts["idle_fraction"],
                scale=opts["scale"],
                idle_mode=opts["idle_mode"],
                checkpoint_every=opts["checkpoint_every"],
                fault_tolerance=opts["fault_tolerance"],
            )
            self.stderr.write(f"offered load {offered_load(raw):.3f}")
            if opts.get("write_scenario"):
                Path(opts["write_scenario"]).write_text(yaml.safe_dump(raw, sort_keys=False))
            return parse(raw)
        if not opts.get("scenario"):
            raise ScenarioError("scenario: give a scenario file or --trace")
        path = Path(opts["scenario"])
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ScenarioError(f"scenario: cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            where = f" (line {line + 1})" if line is not None else ""
            raise ScenarioError(f"scenario: not valid YAML{where}") from None
        return parse(raw)
