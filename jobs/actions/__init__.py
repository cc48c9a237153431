"""Every write to jobs, pods, events, logs, checkpoints and restart records (Zulip's rule:
views, tasks, monitors and the agent API call these; nothing else writes these tables).

- `transitions`: a job's status, compare-and-set plus a JobEvent (docs/statuses.md)
- `submit`: a new job; a finished job submitted again
- `stop`: graceful stop, terminate, preemption
- `workers`: agents' worker reports applied to pods, the job status derived from them,
  workers of unreachable and lost nodes
- `restarts`: Automatic Fault Tolerance (a new attempt of the same job)
- `progress`: progress, checkpoints, hang deadlines
- `logs`: log lines, each sequence number stored once
- `scheduling`: a scheduling cycle's plan applied (admissions, pods, reasons, preemptions)

`tests/architecture` checks that ORM writes appear only in `actions` modules.
"""
