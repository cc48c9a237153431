"""A training script for the fault-tolerance end-to-end tests, using the SDK as a user would.

It counts steps, checkpoints every CKPT_EVERY steps (and once more on SIGTERM), reports
progress, and on a restart verifies that it resumes exactly after the checkpoint it was
given. Every executed step is appended to STEP_LOG as "attempt rank step pid" so the test
can check that no step was redone beyond the checkpoint interval. An exclusive lock per rank
proves that no two copies of one worker ever run at once (a second copy exits 99).

MODE (first attempt only): "syntax" raises SyntaxError at start; "hang" stops making
progress at HANG_AT while printing one identical warning over and over; anything else trains.
"""

import fcntl
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ["CONSOLE_ROOT"])

from agents.sdk import checkpoint, progress, resume, save_on_sigterm

TOTAL = int(os.environ.get("TOTAL", "60"))
EVERY = int(os.environ.get("CKPT_EVERY", "10"))
PAUSE = float(os.environ.get("STEP_SECONDS", "0.1"))
MODE = os.environ.get("MODE", "")
ATTEMPT = int(os.environ.get("ATTEMPT", "1"))
RANK = os.environ.get("RANK", "0")
LOG = Path(os.environ["STEP_LOG"])

lock = open(LOG.with_name(f"rank-{RANK}.lock"), "w")  # noqa: SIM115 - held while running
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("DUPLICATE: another copy of this worker is running", flush=True)
    with open(LOG, "a") as f:
        f.write(f"DUPLICATE {ATTEMPT} {RANK} {os.getpid()}\n")
    sys.exit(99)

if MODE == "syntax" and ATTEMPT == 1:
    exec("def broken(:\n    pass")

state = {"step": 0, "total": 0}
restored = resume()
if restored is not None:
    step, saved = restored
    if saved["step"] != step or saved["total"] != step * (step + 1) // 2:
        print(f"RESUME MISMATCH: {step} {saved}", flush=True)
        sys.exit(3)
    state = saved
    print(f"resumed from step {step} ({os.environ['RESUME_FROM']})", flush=True)
else:
    print(f"fresh start, attempt {ATTEMPT}", flush=True)

save_on_sigterm(lambda: checkpoint(state["step"], dict(state)))

while state["step"] < TOTAL:
    nxt = state["step"] + 1
    if MODE == "hang" and ATTEMPT == 1 and nxt == int(os.environ.get("HANG_AT", "15")):
        while True:  # stuck: the same warning again and again is not progress
            print("WARN waiting for peer rank 1", flush=True)
            time.sleep(0.3)
    if ATTEMPT == 1 and nxt == int(os.environ.get("WAIT_AT", "0")):
        while True:  # waits here, quietly, until it is stopped (SIGTERM saves the step)
            time.sleep(0.1)
    time.sleep(PAUSE)
    state = {"step": nxt, "total": state["total"] + nxt}
    with open(LOG, "a") as f:
        f.write(f"{ATTEMPT} {RANK} {nxt} {os.getpid()} {time.time():.3f}\n")
    progress(nxt, TOTAL, phase="train", loss=1.0 / nxt)
    print(f"step {nxt}/{TOTAL}", flush=True)
    if nxt % EVERY == 0:
        checkpoint(nxt, dict(state))
print("done", flush=True)
