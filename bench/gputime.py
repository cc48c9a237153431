"""Where a run's GPU time went (pure): the account `bench/kueue.py` prints after a run, to
say how far the product is from the policy and why.

The capacity over the run (GPUs x span) splits into:
- `work`: the GPU-seconds the jobs asked for (each finished pod's GPUs x its run time);
- `held_overhead`: pods held their GPUs without working: from placement to the worker's
  start (the agent learns of the pod, launches it) and from its end to the console taking
  the exit, plus the work of pods that were preempted and ran again;
- `free_while_waiting`: GPUs no pod held while jobs waited for GPUs (at each moment the
  smaller of the free GPUs and the waiting jobs' GPUs): the cycle's latency after a
  release, a head job's reservation, GPUs too scattered for the job that waits;
- `free_nothing_waiting`: GPUs no pod held and no job waited for: the arrivals' pace.

A job waits from its creation to its first pod; a preempted job waiting again is not
counted, so `free_while_waiting` is a lower bound (its GPUs show as free, nothing waiting).

Each part divided by the GPUs is the seconds it added to the run, as if spread evenly
over them: `held_overhead` and `free_while_waiting` are the product's share of the gap
between the run's length and the policy alone's.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class PodSpan:
    gpus: int
    placed: datetime
    released: datetime | None  # None: still held at the end of the run
    worked_seconds: float  # its run time if it finished its work, else 0


@dataclass(frozen=True)
class JobWait:
    gpus: int  # the GPUs the job waits for (all its workers')
    created: datetime
    placed: datetime | None  # its first pod; None: still waiting at the end


def account(
    pods: Iterable[PodSpan], waits: Iterable[JobWait], gpus: int, start: datetime, end: datetime
) -> dict:
    """The account of `gpus` GPUs over [start, end]; GPU-seconds and their share."""
    span = (end - start).total_seconds()
    held = work = 0.0
    # (time, change of GPUs held, change of GPUs waited for), swept in time order.
    events: list[tuple[float, int, int]] = []

    def at(moment: datetime | None) -> float:
        seconds = span if moment is None else (moment - start).total_seconds()
        return min(max(seconds, 0.0), span)

    for pod in pods:
        placed, released = at(pod.placed), at(pod.released)
        held += pod.gpus * (released - placed)
        work += pod.gpus * pod.worked_seconds
        events += [(placed, pod.gpus, 0), (released, -pod.gpus, 0)]
    for job in waits:
        events += [(at(job.created), 0, job.gpus), (at(job.placed), 0, -job.gpus)]
    events.sort()
    free_waiting = 0.0
    holding = waiting = 0
    last = 0.0
    for moment, held_change, waited_change in events:
        free_waiting += (moment - last) * min(max(gpus - holding, 0), max(waiting, 0))
        holding += held_change
        waiting += waited_change
        last = moment
    capacity = gpus * span
    parts = {
        "work": work,
        "held_overhead": held - work,
        "free_while_waiting": free_waiting,
        "free_nothing_waiting": capacity - held - free_waiting,
    }
    figures: dict = {"span_s": round(span, 1), "capacity_gpu_s": round(capacity, 1)}
    for name, value in parts.items():
        figures[f"{name}_gpu_s"] = round(value, 1)
        figures[f"{name}_share"] = round(value / capacity, 3) if capacity else None
        figures[f"{name}_run_s"] = round(value / gpus, 1) if gpus else None
    return figures


def describe(figures: dict) -> str:
    """One line of the account: each part's share and the seconds it added."""
    names = {
        "work": "work",
        "held_overhead": "held, not working",
        "free_while_waiting": "free while jobs waited",
        "free_nothing_waiting": "free, nothing waiting",
    }
    return f"GPU time over {figures['span_s']} s: " + "; ".join(
        f"{label} {100 * figures[f'{name}_share']:.1f} % ({figures[f'{name}_run_s']} s)"
        for name, label in names.items()
    )
