"""The scheduler's shell: the cycle (lock, load, plan, apply), the snapshot and the waiting
rows it reads, the coalescing of triggers into cycles (docs/scheduling.md). The pure
`plan()` is `policy.scheduler`."""
