"""`/metrics` for Prometheus, computed from the database at scrape time.

Nothing is counted in process memory: every web replica answers the same, whichever one the
scrape reaches, and a restart loses nothing. Each family is one aggregate query (about ten
per scrape, whatever the number of jobs), over indexed columns where the table is large:

- jobs by status; queue depth and oldest wait per quota (waiting = Pending or Inqueue, the
  wait measured from the job's latest move to Pending: submission or restart);
- GPUs per quota: used (held by live workers charged to it), lent (of those, idle-resource
  workers: Not in Quota), borrowed (its jobs' idle-resource workers, wherever charged),
  and its guarantee; on a quota tree also its own guarantee, its limit, and what its
  subtree uses, lends and borrows (the roll-up of `policy.accounting.roll_up`);
- background loops (scheduler cycle, monitors): runs, failures, duration (a summary: _sum
  and _count), last duration and last run, recorded by the loops in `LoopRun`; where cycles
  run in Celery tasks (up to 20 a task), also the cycles' own count and seconds (Redis:
  `jobs.scheduler.figures`);
- preemptions by reason (reclaim by a lending quota, priority, other) and fault-tolerance
  restarts by kind (failure, hang, preemption, node_lost);
- usage history's GPU-seconds per quota and kind (in quota, borrowed, lent, idle-held,
  waiting), counters over the whole history (usage.report.usage_totals);
- heartbeat age and state per node; log lines ingested (the sum of every worker's next
  expected log sequence number: lines stored once each).

Access: `Authorization: Bearer <settings.METRICS_TOKEN>`, or a logged-in superuser.
"""

import hmac
import logging
from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    SummaryMetricFamily,
)

from accounts.api_auth import error_response
from cluster.models import Node
from console.models import LoopRun
from jobs.models import Job, JobEvent, Pod, RestartKind, RestartRecord
from jobs.scheduler import figures
from policy.accounting import roll_up
from policy.scheduler.model import QuotaSnap
from policy.scheduler.tree import QuotaTree
from policy.statuses import ACTIVE_POD_STATUSES, WAITING_JOB_STATUSES, JobStatus
from policy.usage_history import FIELDS
from quotas.models import Quota
from usage.report import usage_totals

log = logging.getLogger(__name__)

PREFIX = "gpu_console"
_WAITING = sorted(s.value for s in WAITING_JOB_STATUSES)
_ACTIVE_PODS = sorted(s.value for s in ACTIVE_POD_STATUSES)


def preemption_reason(text: str) -> str:
    """The scheduler's wording (policy.scheduler.plan): "reclaimed by <quota> for <job>" when
    a lending quota takes its GPUs back, "preempted by higher-priority <job> …" inside a
    quota; anything else (an admin, a future rule) is "other"."""
    if "reclaimed by" in text:
        return "reclaim"
    if "higher-priority" in text:
        return "priority"
    return "other"


class ConsoleCollector:
    """A prometheus_client collector that reads the database when scraped."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def collect(self):
        yield from self._jobs()
        yield from self._queues()
        yield from self._quota_gpus()
        yield from self._usage_history()
        yield from self._loops()
        yield from self._preemptions_and_restarts()
        yield from self._nodes()
        yield from self._logs()

    def _jobs(self):
        family = GaugeMetricFamily(
            f"{PREFIX}_jobs", "Jobs by status (every job, finished ones too).", labels=["status"]
        )
        counts = dict(Job.objects.values_list("status").annotate(n=Count("id")).order_by())
        for status in JobStatus:
            family.add_metric([status.value], counts.get(status.value, 0))
        yield family

    def _queues(self):
        depth = GaugeMetricFamily(
            f"{PREFIX}_queue_depth",
            "Jobs waiting (Pending or Inqueue) per quota.",
            labels=["quota"],
        )
        oldest = GaugeMetricFamily(
            f"{PREFIX}_queue_oldest_wait_seconds",
            "How long the longest-waiting job of the quota has waited (0: none waits).",
            labels=["quota"],
        )
        # When the current wait began: the job's latest move to Pending (submission, or an
        # automatic restart as a new attempt); Pending → Inqueue does not restart it.
        wait_began = Subquery(
            JobEvent.objects.filter(job=OuterRef("pk"), to_status=JobStatus.PENDING.value)
            .order_by("-created_at", "-id")
            .values("created_at")[:1]
        )
        waits: dict[int, list[datetime]] = defaultdict(list)
        rows = (
            Job.objects.filter(status__in=_WAITING)
            .annotate(began=Coalesce(wait_began, "created_at"))
            .values_list("quota_id", "began")
        )
        for quota_id, began in rows:
            waits[quota_id].append(began)
        for quota_id, name in Quota.objects.values_list("id", "name").order_by("name"):
            began = waits.get(quota_id, [])
            depth.add_metric([name], len(began))
            wait = (self.now - min(began)).total_seconds() if began else 0.0
            oldest.add_metric([name], max(wait, 0.0))
        yield depth
        yield oldest

    def _quota_gpus(self):
        families = {
            kind: GaugeMetricFamily(f"{PREFIX}_quota_gpus_{kind}", text, labels=["quota"])
            for kind, text in (
                ("guaranteed", "GPUs the quota guarantees (with its children's, on a tree)."),
                ("used", "GPUs held by live workers charged to the quota (its own and lent)."),
                ("lent", "GPUs of the quota held by idle-resource workers (Not in Quota)."),
                ("borrowed", "GPUs the quota's idle-resource workers hold, wherever charged."),
                ("own_guaranteed", "Its own guarantee: what its children leave it."),
                ("limit", "Most GPUs the jobs of its subtree may hold at once (if limited)."),
                ("subtree_used", "GPUs the jobs of its subtree hold, in quota or borrowed."),
                ("subtree_lent", "GPUs of its subtree held by jobs from outside it."),
                ("subtree_borrowed", "GPUs its subtree's jobs hold outside the subtree."),
            )
        }
        live = Pod.objects.filter(status__in=_ACTIVE_PODS)
        used = dict(live.values_list("charged_quota_id").annotate(g=Sum("gpus")).order_by())
        held = dict(live.values_list("job__quota_id").annotate(g=Sum("gpus")).order_by())
        # Not in Quota workers by (their job's quota, the quota charged): lent, borrowed and
        # the tree's crossings (docs/quota-tree.md "Accounting") from one query.
        crossings = list(
            live.filter(in_quota=False)
            .values_list("job__quota_id", "charged_quota_id")
            .annotate(g=Sum("gpus"))
            .order_by()
        )
        lent: dict[int, int] = defaultdict(int)
        borrowed: dict[int, int] = defaultdict(int)
        for borrower_id, lender_id, gpus in crossings:
            lent[lender_id] += gpus or 0
            borrowed[borrower_id] += gpus or 0
        quotas = [
            QuotaSnap(
                id=qid, name=name, tenant_id=0, resource_type="", gpu_type="", gpus=gpus,
                parent_id=parent_id, max_gpus=max_gpus,
            )
            for qid, name, gpus, parent_id, max_gpus in Quota.objects.values_list(
                "id", "name", "gpus", "parent_id", "max_gpus"
            ).order_by("name")
        ]  # fmt: skip
        self.quota_names = {q.id: q.name for q in quotas}  # for usage history
        tree = QuotaTree.of(quotas)
        rolled = roll_up(tree, held, ((b, ld, g or 0) for b, ld, g in crossings))
        for q in quotas:
            families["guaranteed"].add_metric([q.name], q.gpus)
            families["used"].add_metric([q.name], used.get(q.id) or 0)
            families["lent"].add_metric([q.name], lent.get(q.id, 0))
            families["borrowed"].add_metric([q.name], borrowed.get(q.id, 0))
            families["own_guaranteed"].add_metric([q.name], tree.own_gpus(q.id))
            if q.max_gpus is not None:
                families["limit"].add_metric([q.name], q.max_gpus)
            for kind, number in zip(("used", "lent", "borrowed"), rolled[q.id], strict=True):
                families[f"subtree_{kind}"].add_metric([q.name], number)
        yield from families.values()

    def _usage_history(self):
        """GPU-seconds of usage history (docs/usage-history.md) per quota and kind: every
        final hour plus the open ones, so the counters only grow between roll-ups."""
        family = CounterMetricFamily(
            f"{PREFIX}_quota_gpu_seconds",
            "GPU-seconds of the quota's usage history by kind: in_quota, borrowed (its jobs "
            "on other quotas), lent (other quotas' jobs on it), idle_held, waiting.",
            labels=["quota", "kind"],
        )
        totals = usage_totals()
        names = getattr(self, "quota_names", None)
        if names is None:  # a caller that skipped _quota_gpus
            names = dict(Quota.objects.values_list("pk", "name"))
        for quota_id, values in sorted(totals.items(), key=lambda kv: names.get(kv[0], "")):
            for kind, value in zip(FIELDS, values, strict=True):
                name = names.get(quota_id, str(quota_id))
                family.add_metric([name, kind], value / 1_000_000)
        yield family

    def _loops(self):
        duration = SummaryMetricFamily(
            f"{PREFIX}_loop_duration_seconds",
            "Duration of background loop runs (scheduler: one run of its loop; a Celery task "
            "runs up to 20 coalesced cycles, see scheduler_cycle_seconds).",
            labels=["loop"],
        )
        last = GaugeMetricFamily(
            f"{PREFIX}_loop_last_duration_seconds",
            "Duration of the loop's last run.",
            labels=["loop"],
        )
        failures = CounterMetricFamily(
            f"{PREFIX}_loop_failures", "Loop runs that raised.", labels=["loop"]
        )
        finished = GaugeMetricFamily(
            f"{PREFIX}_loop_last_run_timestamp_seconds",
            "When the loop last finished a run (Unix time).",
            labels=["loop"],
        )
        for run in LoopRun.objects.order_by("name"):
            duration.add_metric([run.name], count_value=run.runs, sum_value=run.seconds_total)
            last.add_metric([run.name], run.last_seconds)
            failures.add_metric([run.name], run.failures)
            if run.last_finished_at is not None:
                finished.add_metric([run.name], run.last_finished_at.timestamp())
        yield from (duration, last, failures, finished)
        yield from _cycles()

    def _preemptions_and_restarts(self):
        preemptions = CounterMetricFamily(
            f"{PREFIX}_preemptions",
            "Jobs preempted, by reason: reclaim (a lending quota took its GPUs back), "
            "priority (a higher-priority job of the same quota), other.",
            labels=["reason"],
        )
        by_reason: dict[str, int] = {"reclaim": 0, "priority": 0, "other": 0}
        # A job without fault tolerance ends Preempted; one with it restarts, which leaves a
        # RestartRecord of kind "preemption" (the job itself moves on to Pending).
        ended = Job.objects.filter(status=JobStatus.PREEMPTED.value).values_list("status_reason")
        restarted = RestartRecord.objects.filter(kind=RestartKind.PREEMPTION).values_list("reason")
        for (text,) in [*ended, *restarted]:
            by_reason[preemption_reason(text)] += 1
        for reason, n in by_reason.items():
            preemptions.add_metric([reason], n)
        yield preemptions

        restarts = CounterMetricFamily(
            f"{PREFIX}_restarts",
            "Automatic fault-tolerance restarts by kind.",
            labels=["kind"],
        )
        kinds = dict(RestartRecord.objects.values_list("kind").annotate(n=Count("id")).order_by())
        for kind in RestartKind:
            restarts.add_metric([kind.value], kinds.get(kind.value, 0))
        yield restarts

    def _nodes(self):
        age = GaugeMetricFamily(
            f"{PREFIX}_node_heartbeat_age_seconds",
            "Seconds since the node's last heartbeat (console time).",
            labels=["node"],
        )
        states = GaugeMetricFamily(
            f"{PREFIX}_node_state", "1 for the node's current state.", labels=["node", "state"]
        )
        for name, state, beat in Node.objects.values_list(
            "name", "state", "last_heartbeat_at"
        ).order_by("name"):
            if beat is not None:
                age.add_metric([name], max((self.now - beat).total_seconds(), 0.0))
            states.add_metric([name, state], 1)
        yield age
        yield states

    def _logs(self):
        total = Pod.objects.aggregate(n=Coalesce(Sum("log_next_seq"), 0))["n"]
        family = CounterMetricFamily(
            f"{PREFIX}_log_lines_ingested", "Log lines stored (each line once, however often sent)."
        )
        family.add_metric([], total)
        yield family


def _token_ok(request: HttpRequest) -> bool:
    expected = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if not expected or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), expected.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _token_ok(request):
        if not request.user.is_authenticated:
            response = error_response(
                401, "unauthenticated", "send Authorization: Bearer <METRICS_TOKEN>"
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        if not request.user.is_superuser:
            return error_response(403, "forbidden", "metrics are for administrators")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ConsoleCollector(timezone.now()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _cycles():
    """Each scheduling cycle's own figures where cycles run in Celery tasks (counted in Redis
    by `jobs.scheduler.figures`); elsewhere a run of the scheduler loop is one cycle. A Redis
    that does not answer costs this family, never the scrape."""
    if settings.CONSOLE_LOOPS != "celery" or not settings.REDIS_URL:
        return
    import redis

    try:
        found = figures.read(settings.REDIS_URL)
    except redis.RedisError as exc:
        log.warning("/metrics: cannot read the scheduling cycles' figures: %s", exc)
        return
    family = SummaryMetricFamily(
        f"{PREFIX}_scheduler_cycle_seconds",
        "Duration of scheduling cycles, each counted by itself (not per Celery task).",
    )
    family.add_metric([], count_value=found.get("cycles", 0), sum_value=found.get("seconds", 0))
    yield family
