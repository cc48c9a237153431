"""The checks of scripts/gpu-smoke.sh, run against its throwaway console and real agent.

    python scripts/gpu_smoke.py --url http://127.0.0.1:PORT --node gpu-smoke --release FILE

1. waits for the agent to register and report its GPUs (no fixed sleep);
2. compares every GPU's index, UUID and memory with `nvidia-smi --query-gpu`;
3. places a 1-GPU job on the last usable GPU (a filler job takes the ones before it) through
   the researcher API, and checks the console recorded that GPU's UUID for it;
4. the job (scripts/gpu_probe.py) asks the CUDA driver API which GPUs it sees: exactly that
   UUID, or the smoke test fails;
5. the job holds GPU memory and keeps the GPU busy until a stored utilization sample of the
   worker shows it; then it is released and must end Completed.

Needs Django settings (it reads the console's database) and the researcher API.
"""

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import django

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the console's packages, wherever this is run from
HOLD_MIB = 1024


class SmokeFailed(Exception):
    pass


def wait(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SmokeFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url.rstrip("/"), token

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - the console's own http URL
            f"{self.url}/api/v1/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise SmokeFailed(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def logs(self, job_id: int) -> list[str]:
        return [line["text"] for line in self.call("GET", f"jobs/{job_id}/logs?after=-1")["lines"]]


def nvidia_smi() -> list[tuple[int, str, int]]:
    """(index, UUID, memory MiB) of every GPU, as the driver's own tool reports them."""
    query = ["--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(
            ["nvidia-smi", *query], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SmokeFailed(f"nvidia-smi --query-gpu failed: {exc}") from None
    rows = []
    for line in out.strip().splitlines():
        index, uuid, memory = (part.strip() for part in line.split(","))
        rows.append((int(index), uuid, int(float(memory))))
    return rows


def setup_user(node):
    """A tenant, workspace and quota sized to the node, a researcher and an API token."""
    from django.contrib.auth import get_user_model

    from accounts.actions import issue_api_token
    from quotas.models import Membership, Quota, Role, Tenant, Workspace

    tenant = Tenant.objects.create(name="smoke")
    workspace = Workspace.objects.create(tenant=tenant, name="smoke")
    quota = Quota.objects.create(
        tenant=tenant,
        name="smoke-gpus",
        resource_type=node.resource_type,
        gpu_type=node.gpu_type,
        gpus=node.gpus,
    )
    workspace.quotas.add(quota)
    user = get_user_model().objects.create_user(username="smoke")
    Membership.objects.create(workspace=workspace, user=user, role=Role.RESEARCHER)
    return quota, issue_api_token(user, "smoke")[1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--node", default="gpu-smoke")
    p.add_argument("--release", required=True, help="file whose creation ends the probe job")
    p.add_argument("--python", default=sys.executable, help="the Python the job runs")
    args = p.parse_args()
    django.setup()
    from cluster.models import GpuDevice, Node
    from jobs.models import Pod, WorkerGpuSample

    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    smi = nvidia_smi()
    say(f"nvidia-smi: {len(smi)} GPU(s)")
    node = wait(
        "the agent to register and report its GPUs",
        lambda: Node.objects.filter(name=args.node, gpus=len(smi)).first(),
        timeout=90,
    )
    say(f"agent registered: node {node.name}, {node.gpus} x {node.gpu_type}, {node.runtime}")

    devices = {d.index: d for d in GpuDevice.objects.filter(node=node)}
    bad = []
    for index, uuid, memory in smi:
        d = devices.get(index)
        seen = (d.uuid, d.memory_total_mb) if d else None
        mark = "ok" if seen == (uuid, memory) else "MISMATCH"
        if mark != "ok":
            bad.append(index)
        say(f"  GPU {index}: nvidia-smi {uuid} {memory} MiB | agent {seen} -> {mark}")
        if d is not None:
            say(
                f"         util {d.utilization} temp {d.temperature} power {d.power_watts} W "
                f"pci {d.pci_bus_id} mig {d.mig_enabled} healthy={d.healthy} {d.health_reason}"
            )
    if bad:
        raise SmokeFailed(f"the agent and nvidia-smi disagree on GPU(s) {bad}")

    usable = sorted(i for i, d in devices.items() if d.healthy and not d.mig_enabled)
    if not usable:
        raise SmokeFailed("no healthy whole GPU to place a job on")
    target = usable[-1]
    target_uuid = devices[target].uuid
    quota, token = setup_user(node)
    api = Api(args.url, token)
    common = {"quota": quota.name, "image": "process-runtime", "cpus_per_worker": 1}
    common["memory_gb_per_worker"] = 1
    filler = None
    filler_gpus = len(usable) - 1
    if filler_gpus:  # the GPUs before the target are taken first
        filler = api.call(
            "POST",
            "jobs",
            {
                **common,
                "name": "filler",
                "command": "sleep 600",
                "gpus_per_worker": filler_gpus,
            },
        )["id"]
        wait("the filler job to be placed", lambda: Pod.objects.filter(job_id=filler).exists(), 60)
    probe = (
        f"{args.python} {REPO / 'scripts' / 'gpu_probe.py'} --expect {target_uuid} "
        f"--hold-mib {HOLD_MIB} --until {args.release} --max-seconds 200"
    )
    job = api.call(
        "POST", "jobs", {**common, "name": "probe", "command": probe, "gpus_per_worker": 1}
    )
    placed = Pod.objects.filter(job_id=job["id"])
    pod = wait("the probe job to be placed", placed.first, 60)
    say(f"probe job {job['id']} placed on GPU {pod.gpu_indices} = {pod.gpu_uuids}")
    if (pod.gpu_indices, pod.gpu_uuids) != ([target], [target_uuid]):
        raise SmokeFailed(f"expected GPU {target} ({target_uuid}) for the probe job")

    def probe_result():
        for text in api.logs(job["id"]):
            if text.startswith("{"):
                return json.loads(text)
        status = api.call("GET", f"jobs/{job['id']}")["status"]
        if status in ("Failed", "Stopped", "Terminated"):
            raise SmokeFailed(f"probe job ended {status}: {api.logs(job['id'])[-10:]}")
        return None

    result = wait("the probe job's CUDA answer", probe_result, timeout=120)
    say(f"inside the job, CUDA sees {result.get('visible')} (env {result.get('env')})")
    if not result.get("ok"):
        raise SmokeFailed(f"the job does not see exactly {target_uuid}: {result}")
    wait("the job to hold GPU memory", lambda: "holding" in " ".join(api.logs(job["id"])), 60)

    def sample():
        for s in WorkerGpuSample.objects.filter(pod_id=pod.pk).order_by("-at"):
            if s.memory_used_mb >= HOLD_MIB and s.utilization:
                return s
        return None

    found = wait("a stored utilization sample showing the held memory", sample, timeout=150)
    say(f"stored sample: {found.utilization}% busy, {found.memory_used_mb} MiB on {found.gpus} GPU")
    Path(args.release).touch()

    def ended() -> str | None:
        status = api.call("GET", f"jobs/{job['id']}")["status"]
        return status if status in ("Completed", "Failed", "Stopped", "Terminated") else None

    final = wait("the probe job to finish", ended, timeout=60)
    if final != "Completed":
        raise SmokeFailed(f"the probe job ended {final}: {api.logs(job['id'])[-10:]}")
    if filler is not None:
        api.call("POST", f"jobs/{filler}/stop")
    elapsed = time.monotonic() - started
    say(f"PASS: the job saw GPU {target} ({target_uuid}) and nothing else ({elapsed:.0f}s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SmokeFailed as exc:
        print(f"FAIL: {exc}", flush=True)
        sys.exit(1)
