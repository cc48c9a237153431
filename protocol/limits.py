"""One set of limits for every boundary (docs/agent-protocol.md): a job's admission rules,
the researcher API's schema, the agent protocol's schemas and the database columns all read
these constants, so a value that passes one boundary fits every other one. Django-free: the
agent imports it on GPU nodes.

Lengths are in characters (Python `len`), as PostgreSQL's varchar(n) counts them.
"""

import re

# --- a job, as submitted (policy.jobspec reads these; Job columns, protocol.WorkerSpec) ---
# Per-worker and per-job bounds, inclusive (a worker must also fit on one registered node).
JOB_BOUNDS = {
    "workers": (1, 64),
    "gpus_per_worker": (0, 8),
    "cpus_per_worker": (1, 512),
    "memory_gb_per_worker": (1, 8192),
    "priority": (1, 9),
    "max_runtime_seconds": (60, 90 * 86400),
    "max_restarts": (0, 100),
    "hang_timeout": (5, 30 * 86400),
}
JOB_NAME = 200
IMAGE = 500
# An image reference: printable ASCII without spaces (policy.admission.values.image).
IMAGE_PATTERN = r"[!-~]+"
COMMAND = 20_000
ENV_VARS = 200  # variables per job
ENV_NAME = 255  # characters of a variable name
ENV_VALUE = 32 * 1024  # characters of a variable value
# A POSIX-portable variable name; the agent refuses any other (protocol.agent.EnvName).
ENV_NAME_PATTERN = rf"^[A-Za-z_][A-Za-z0-9_]{{0,{ENV_NAME - 1}}}$"
ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)

# A checkpoint folder: plain path segments relative to the job's workspace area.
CHECKPOINT_DIR = 500
CHECKPOINT_SEGMENT = 100
CHECKPOINT_DEPTH = 8
_CHECKPOINT_SEGMENT = rf"[A-Za-z0-9_.-]{{1,{CHECKPOINT_SEGMENT}}}"
CHECKPOINT_FOLDER = rf"{_CHECKPOINT_SEGMENT}(?:/{_CHECKPOINT_SEGMENT}){{0,{CHECKPOINT_DEPTH - 1}}}"
CHECKPOINT_DIR_PATTERN = rf"^$|^{CHECKPOINT_FOLDER}$"  # as stored and sent to an agent
# As a user gives it: trailing slashes are dropped ("runs/exp1/" is runs/exp1).
CHECKPOINT_DIR_GIVEN = rf"(?:{CHECKPOINT_FOLDER}/*)?"
PATH = 1000  # a checkpoint path on a node (Checkpoint.path, Job.resume_from)

# --- what the console and agents write about workers -------------------------------------
REASON = 300  # Pod.status_reason, Pod.stop_reason, Job.stop_reason, refusal reasons
ERROR_TAIL = 8000  # the log tail an agent sends with an exit (WorkerReport.error)
ERROR_STORED = 4000  # the part of it the console keeps (Pod.error_message)
CONTAINER_ID = 100
PHASE = 100  # a progress phase (ProgressReport.phase, Pod.progress_phase)
NODE_NAME = 200
GPU_TEXT = 100  # a GPU's uuid and name
GPU_REASON = 200  # GpuDevice.health_reason
RULE = 100  # RestartRecord.rule

# --- log lines ---------------------------------------------------------------------------
# The longest log line the console stores; the agent splits longer output at 16 KiB of bytes,
# which decodes to at most 16 KiB of characters plus a few carried-over bytes.
LOG_LINE = 32 * 1024
LINES_PER_BATCH = 1000
LINES_PER_REQUEST = 10_000
STREAMS_PER_REQUEST = 256

# --- batches an agent sends ----------------------------------------------------------------
GPUS = 64
WORKERS = 1024
CHECKPOINTS_REPORTED = 8
METRICS = 32

# --- waking an agent (agent/wait/) --------------------------------------------------------
DESIRED_VERSION = 100  # characters of a desired-state token
WAIT_TIMEOUT = 60.0  # the longest an agent may ask the console to hold a wait

# --- what a page or the API shows of one job ----------------------------------------
EVENTS_SHOWN = 200  # newest events of a job (the job page, GET /api/v1/jobs/{id})

# --- the scheduler's queue (docs/scheduling.md, "Reasons and positions") ------------------
QUEUE_EXACT_POSITIONS = 20  # the head of each quota's queue: reason and position always current
QUEUE_REFRESH_S = 10  # behind it: a changed reason or position is written at most this often

# --- JSON bodies ---------------------------------------------------------------------------
# Deeper nesting than any real request needs; deeper bodies are refused before they can
# exhaust the parser's recursion (protocol.text.load_json).
JSON_DEPTH = 32

# How often the agent retries one item the console refuses before setting it aside.
REFUSALS_BEFORE_SET_ASIDE = 3

# --- usage history reports (docs/usage-history.md) ------------------------------------------
USAGE_HOURLY_DAYS = 31  # the longest period reported hour by hour
USAGE_DAYS = 400  # the longest period reported at all (buckets are kept about this long)
USAGE_TOP_USERS = 10
USAGE_JOB_ROWS = 100  # jobs per page of the per-job usage report (page, API default)
USAGE_JOB_ROWS_MAX = 1000  # the most jobs one API request may ask for
USAGE_JOB_OFFSET_MAX = 1_000_000

# A GPU busier than this (percent) at any sample is not idle: the dashboard's "held but idle"
# list and the usage history's idle-held GPU-seconds read the same threshold.
IDLE_UTILIZATION = 5
