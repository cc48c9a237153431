"""The cluster's inventory: nodes and their GPUs, below jobs (the scheduler reads it)."""
