"""The cluster's inventory: nodes and their GPUs, below jobs (the scheduler reads it). Their
admin pages (`cluster.admin`) are a shell above jobs and agents (tests/architecture/rules.py)."""
