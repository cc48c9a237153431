#!/usr/bin/env bash
# GPU smoke test: on a machine with an NVIDIA GPU (driver + NVML), start a throwaway console
# (SQLite in a temp dir, in-process loops), register the real agent against it with NVML
# (no --fake-gpus), and print the devices it reported: index, uuid, name, memory, health.
#
#   scripts/gpu-smoke.sh            # from the repository root, after `make venv`
#
# Exit status 0 when the agent reported at least one GPU, 1 otherwise. Leaves nothing
# behind (the temp dir is removed; the agent and the console are stopped).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PORT=${PORT:-18765}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(nvidia-smi not found)"

export CONSOLE_ENV=development SQLITE_PATH="$TMP/console.sqlite3" CONSOLE_LOOPS=eager
$PY manage.py migrate --noinput >/dev/null
TOKEN=$($PY manage.py shell -v 0 -c \
  "from agents.tokens import issue_bootstrap_token; print(issue_bootstrap_token(None, 'gpu-smoke')[1])" |
  tail -n 1)
$PY manage.py runserver "127.0.0.1:$PORT" --noreload >"$TMP/console.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.2; done

GPU_AGENT_BOOTSTRAP_TOKEN=$TOKEN $PY -m agents.node --server "http://127.0.0.1:$PORT" \
  --name gpu-smoke --state-dir "$TMP/agent" --runtime process --heartbeat-interval 1 \
  >"$TMP/agent.log" 2>&1 &
PIDS+=($!)
sleep 5

cat >"$TMP/report.py" <<'PYEOF'
from agents.models import GpuDevice, Node
node = Node.objects.filter(name="gpu-smoke").first()
if node is None:
    raise SystemExit("the agent did not register; see its log above")
print(f"node {node.name}: {node.gpus} x {node.gpu_type or '?'}, state {node.state}")
for d in GpuDevice.objects.filter(node=node).order_by("index"):
    print(f"  gpu{d.index} {d.uuid} {d.name} {d.memory_used_mb}/{d.memory_total_mb} MiB "
          f"util {d.utilization}% temp {d.temperature} power {d.power_watts} W "
          f"ecc {d.ecc_errors} healthy={d.healthy} {d.health_reason}")
raise SystemExit(0 if node.gpus else 1)
PYEOF
$PY manage.py shell -v 0 -c "$(cat "$TMP/report.py")" || { echo "--- agent log"; cat "$TMP/agent.log"; exit 1; }
echo "--- agent log (last lines)"
tail -n 5 "$TMP/agent.log"
