"""A borrower on Kubernetes nodes reclaimed by its lender (docs/kubernetes.md)."""

from jobs.models import Pod
from policy.statuses import IdleResources, JobStatus, PodStatus
from quotas.models import Quota, ResourceType
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, log_lines, make_job, status, write_checkpoint


def test_a_reclaimed_borrower_ends_resource_preempted_and_resumes_from_its_checkpoint(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, tenant, other_quota,
    colleague, settings,
):  # fmt: skip
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    borrowing = Quota.objects.create(
        tenant=tenant, name="team-c", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=0
    )
    workspace.quotas.add(borrowing)
    controller = controllers()
    borrower = make_job(
        researcher, workspace, borrowing, gpus=8, ft=True, idle_resources=IdleResources.ONLY
    )
    first = f"job-{borrower.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first) is not None, what="borrower placed")
    kubelet.start(ns, first)
    settle(controller, lambda: status(borrower) == JobStatus.RUNNING)
    kubelet.write(ns, first, "step 1", "step 2")
    saved = {}

    def save_on_sigterm(namespace: str, name: str) -> None:  # the SDK saving on SIGTERM
        if name == first:
            saved["path"] = write_checkpoint(
                kube_config.checkpoint_root, workspace.pk, borrower.pk, step=10, attempt=1
            )

    kubelet.on_term = save_on_sigterm
    lender = make_job(colleague, other_quota.workspaces.first(), other_quota, gpus=8, name="own")
    settle(controller, lambda: status(borrower) == JobStatus.PENDING, what="borrower preempted")

    pod = Pod.objects.get(job=borrower, attempt=1)
    assert pod.status == PodStatus.PREEMPTED
    assert log_lines(pod) == ["step 1", "step 2", "SIGTERM received"]
    borrower.refresh_from_db()
    assert borrower.attempt == 2 and borrower.preemption_count == 1
    assert borrower.resume_from == saved["path"]

    own = f"job-{lender.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, own) is not None, what="lender placed")
    kubelet.start(ns, own)
    kubelet.exit(ns, own, 0)
    settle(controller, lambda: status(lender) == JobStatus.COMPLETED, what="lender done")

    second = f"job-{borrower.pk}-w0-a2"
    settle(controller, lambda: api_pod(kubelet, ns, second) is not None, what="resumed")
    assert env_of(api_pod(kubelet, ns, second))["RESUME_FROM"] == saved["path"]
    kubelet.start(ns, second)
    kubelet.exit(ns, second, 0)
    settle(controller, lambda: status(borrower) == JobStatus.COMPLETED, what="borrower done")
