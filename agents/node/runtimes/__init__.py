"""How workers run on a node: `containers` (the docker runtime, through the Docker Engine
API) and `processes` (local processes, for the embedded default and tests). Both build on
`base`, which owns the worker table, stopping with a grace, and the state the agent polls.
`simulated` runs no process at all (a worker is a timer; benchmarks only).
"""
