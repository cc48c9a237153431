#!/usr/bin/env bash
# GPU smoke test: proves on a real GPU machine, in under five minutes, that a job sees exactly
# the GPU the console gave it.
#
#   scripts/gpu-smoke.sh             # on a machine with an NVIDIA GPU (driver, NVML, libcuda)
#   scripts/gpu-smoke.sh --dry-run   # anywhere: the stand-in NVML, CUDA driver and nvidia-smi
#                                    # of tests/gpus instead of the real ones (CI runs this)
#
# It starts a throwaway console (SQLite in a temp dir, in-process scheduler), registers the
# real agent with NVML (process runtime), then scripts/gpu_smoke.py: waits for the agent to
# register, compares every GPU's index, UUID and memory with `nvidia-smi --query-gpu`, places a
# 1-GPU job on the last GPU through the researcher API, and checks from inside the job with the
# CUDA driver API (scripts/gpu_probe.py: cuInit, cuDeviceGetCount, cuDeviceGetUuid) that it
# sees exactly that GPU's UUID; the job holds memory until a stored utilization sample shows it.
#
# The dry run's machine has four GPUs whose CUDA default order (fastest first) differs from
# NVML's, so a job given GPU 3 by index, without CUDA_DEVICE_ORDER=PCI_BUS_ID, would see another
# GPU. Exit 0 on success; 1 with the reason (and the agent's log) otherwise. Leaves nothing
# behind. Run from anywhere after `make venv`.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PY:-$REPO/.venv/bin/python}
DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
START=$SECONDS

# A console of its own: never the caller's PostgreSQL or Redis.
unset DATABASE_URL REDIS_URL CONSOLE_LOOPS
export CONSOLE_ENV=development CONSOLE_VAR_DIR="$TMP/var" SQLITE_PATH="$TMP/console.sqlite3"
export DJANGO_SETTINGS_MODULE=console.settings SCHEDULER_INTERVAL=1 AGENT_HEARTBEAT_INTERVAL=1

if [ "$DRY_RUN" = 1 ]; then
  echo "== dry run: stand-in NVML, CUDA driver and nvidia-smi (tests/gpus), no GPU used"
  mkdir -p "$TMP/bin" "$TMP/usage"
  export FAKE_NVML_WORLD="$TMP/world.json"
  PYTHONPATH="$REPO" "$PY" - "$FAKE_NVML_WORLD" "$TMP/usage" <<'PYEOF'
import sys
from tests.gpus.fakenvml import world_of
# Four H100s; GPU 3 is a faster part, so CUDA's default order puts it first.
world = world_of(4, name="NVIDIA H100 80GB HBM3", memory_total_mb=81559, seed="smoke")
world.gpus[3].speed = 99
world.usage_dir = sys.argv[2]
world.save(sys.argv[1])
PYEOF
  cat >"$TMP/bin/nvidia-smi" <<PYEOF
#!$PY
"""Stand-in nvidia-smi: --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits."""
import sys
sys.path.insert(0, "$REPO")
from tests.gpus.fakenvml import World
assert "--query-gpu=index,uuid,memory.total" in sys.argv, sys.argv
for i, g in enumerate(World.load("$TMP/world.json").enumerated()):
    print(f"{i}, {g.uuid}, {g.memory_total_mb}")
PYEOF
  chmod +x "$TMP/bin/nvidia-smi"
  export PATH="$TMP/bin:$PATH"
  # The agent imports the stand-in as pynvml; the job's probe uses the stand-in driver.
  export PYTHONPATH="$REPO/tests/gpus/standin:$REPO"
  export GPU_PROBE_DRIVER=tests.gpus.fakecuda:driver
else
  command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: no GPU here (try --dry-run)"; exit 1; }
  nvidia-smi -L
fi

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"
"$PY" manage.py migrate --noinput >"$TMP/migrate.log"
TOKEN=$("$PY" manage.py shell -v 0 -c \
  "from agents.actions import issue_bootstrap_token; print(issue_bootstrap_token(None, 'gpu-smoke')[1])" |
  tail -n 1)
"$PY" manage.py run_console --no-agent --port "$PORT" >"$TMP/console.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -s -o /dev/null "$URL/" && break; sleep 0.1; done
curl -s -o /dev/null "$URL/" || { echo "FAIL: the console did not start"; cat "$TMP/console.log"; exit 1; }

GPU_AGENT_BOOTSTRAP_TOKEN=$TOKEN "$PY" -m agents.node --server "$URL" --name gpu-smoke \
  --state-dir "$TMP/agent" --runtime process --heartbeat-interval 1 --cpus 8 --memory-gb 32 \
  >"$TMP/agent.log" 2>&1 &
PIDS+=($!)

status=0
"$PY" scripts/gpu_smoke.py --url "$URL" --node gpu-smoke --release "$TMP/release" --python "$PY" ||
  status=$?
if [ "$status" != 0 ]; then
  echo "--- agent log (last 40 lines)"; tail -n 40 "$TMP/agent.log"
  echo "--- console log (last 20 lines)"; tail -n 20 "$TMP/console.log"
fi
echo "gpu-smoke: $([ "$status" = 0 ] && echo passed || echo FAILED) in $((SECONDS - START))s"
exit "$status"
