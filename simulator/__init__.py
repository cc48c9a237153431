"""`manage.py simulate`: scenarios (docs/simulator.md) run on the real scheduler, lifecycle and
fault-tolerance code with a simulated clock. Pure Python; no database needed."""
