"""The preflight (docs/results.md, "Before a long run"): before a run that starts from
nothing (no checkpoint to resume), each worker
first runs its own command with RUN_PREFLIGHT=1 for at most the job's
`result_preflight_seconds`, writing into a folder of its own beside the attempt's staging
folder (`<OUTPUT_DIR>.preflight`, never promoted, removed after). It passes when the
command exits 0 or accepts at least one unit there; then the run itself starts, in the same
process (the shell `exec`s the command). Otherwise the worker exits 3 saying "[preflight]
failed: …", which fault tolerance never retries (policy.faulttolerance.classify).

The wrapper is a POSIX shell script around the command, so it runs the same on every
runtime that runs a command with `/bin/sh -c` (process, docker): it needs `sh`, `setsid`,
`sleep`, `ls` and `grep` in the image (util-linux and coreutils, or busybox). The preflight
runs in a session of its own, so past its time limit the whole of it is killed, whatever it
started; the worker's marker in its environment keeps it inside the worker's fence
(agents.node.runtimes.sessions). The command is passed in RUN_COMMAND."""

from protocol.agent import WorkerSpec

COMMAND_ENV = "RUN_COMMAND"
FAILED_EXIT = 3

_SCRIPT = """\
out="${{OUTPUT_DIR%/}}.preflight"
rm -rf "$out" && mkdir -p "$out/.accepted" || exit {failed}
echo "[preflight] the command with RUN_PREFLIGHT=1, at most {seconds} s"
RUN_PREFLIGHT=1 OUTPUT_DIR="$out" setsid /bin/sh -c "${command}" &
pid=$!
took=0
while kill -0 "$pid" 2>/dev/null && [ "$took" -lt {seconds} ]; do sleep 1; took=$((took + 1)); done
kill -KILL -"$pid" 2>/dev/null
wait "$pid"
code=$?
units=$(ls "$out/.accepted" 2>/dev/null | grep -c '\\.json$')
rm -rf "$out"
if [ "$code" -eq 0 ] || [ "$units" -gt 0 ]; then
  echo "[preflight] passed in about $took s (exit $code, $units unit(s) accepted); the run starts"
  exec /bin/sh -c "${command}"
fi
echo "[preflight] failed: exit $code after about $took s, no unit accepted; the run was not started"
exit {failed}
"""


def wanted(spec: WorkerSpec) -> bool:
    """A run starting from nothing: not one resuming a checkpoint (a fault-tolerance restart
    after the first save, a Restart). An attempt restarted before any save rehearses again
    (under the OnFailure policy, also after a failed preflight)."""
    return bool(spec.preflight_seconds) and not spec.resume_from


def wrapped(seconds: int) -> str:
    """The command the runtime runs instead of the job's (which is in RUN_COMMAND)."""
    return _SCRIPT.format(seconds=int(seconds), command=COMMAND_ENV, failed=FAILED_EXIT)
