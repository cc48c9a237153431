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
    "result_expected_items": (1, 10**12),
    "result_items_per_unit": (1, 10**12),
    "result_expected_output_gb": (1, 10**6),
    "result_preflight_seconds": (5, 3600),
}
# Free space a worker's output folder must have before the agent starts it (docs/results.md,
# "Before a long run"): the job's result_expected_output_gb, else this floor.
OUTPUT_FREE_FLOOR_MB = 64
JOB_NAME = 200
# A job template's name (docs/templates.md): a slug-like word, unique in its workspace.
TEMPLATE_NAME = 100
TEMPLATE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
TEMPLATES_PER_WORKSPACE = 500
TEMPLATES_LISTED = 1000  # on the Templates page (a user of many workspaces)
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

# --- distributed jobs (docs/distributed.md) -----------------------------------------------
ADDRESS = 255  # a node's reachable address (a host name or an IP), Node.address
# The ports a node lends to rendezvous (rank 0's MASTER_PORT), when its agent names none.
RENDEZVOUS_PORTS = (29500, 29999)
PORT_BOUNDS = (1024, 65535)
NPROC_PER_NODE = (0, 64)  # 0: one process per GPU (at least one)
PS_WORKERS = (0, 63)  # TensorFlow parameter servers among a job's workers
DATA_MOUNTS = 8  # read-only data folders per job
DATA_NAME = 64
DATA_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"  # also an env name (DATA_<NAME>)

CODE_REPO = 500  # a git URL or a path on the node
CODE_REPO_PATTERN = r"[!-~]*"
CODE_REF = 200
CODE_REF_PATTERN = r"(?:[A-Za-z0-9][A-Za-z0-9._/-]*)?"

# --- what the console and agents write about workers -------------------------------------
REASON = 300  # Pod.status_reason, Pod.stop_reason, Job.stop_reason, refusal reasons
ERROR_TAIL = 8000  # the log tail an agent sends with an exit (WorkerReport.error)
ERROR_STORED = 4000  # the part of it the console keeps (Pod.error_message)
CONTAINER_ID = 100
PHASE = 100  # a progress phase (ProgressReport.phase, Pod.progress_phase)
NODE_NAME = 200
# A registration whose reply was lost is repeated with the same key (RegisterRequest.
# registration_key): within this many seconds of it, by the bootstrap token that made it, it
# gets the node and the node token it made (docs/agent-protocol.md, "A registration repeated").
REGISTRATION_KEY_PATTERN = r"^[A-Za-z0-9_-]{32,128}$"
REGISTRATION_REPEAT_SECONDS = 600
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

# The owners' API (docs/quota-tree.md "Owners' API").
QUOTA_NAME = 100  # characters of a quota's or workspace's name (the columns')
QUOTA_GPUS = 2**31 - 1  # a guarantee, limit or lending limit (the columns' range)
MEMBERS_PER_REQUEST = 100  # members added by one request, each refused alone

# Denied access in the audit log (audit.denials): one entry per user and object per minute,
# and at most this many entries per user per minute (one more says the rest were not kept).
AUDITED_DENIALS_PER_MINUTE = 30

# Counted results (docs/results.md): a unit's id, the files one unit names, how many units one
# worker report carries, how many expected unit ids a contract may list (or count up to).
RESULT_UNIT = 100
RESULT_UNIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
RESULT_UNIT_NAME = 40  # the contract's word for a unit ("partition", "shard")
RESULT_UNIT_FILES = 256
RESULT_FILE_PATH = 500
RESULT_UNITS_REPORTED = 500
RESULT_EXPECTED_UNITS = 20_000  # characters of the expected ids as submitted
RESULT_MAX_UNITS = 1_000_000
RESULT_UNITS_PAGE = 100  # units per page of the job page and the result API
# The validator command (docs/results.md): its length, its time limit on the node, and how
# much of its output (last lines) is kept as its report.
RESULT_VALIDATOR = 2000
RESULT_VALIDATOR_SECONDS = 600
RESULT_VALIDATOR_LINES = 20
RESULT_VALIDATOR_OUTPUT = 2000
RESULT_INPUTS = 200  # the declared inputs' version ("dataset-v3")
# Files of a job's data folders the agent fingerprints before a start (docs/results.md, "Run
# identity"): a stat walk in the agent's loop, about a second at this many; more are not
# fingerprinted (said in the job's log) rather than holding the node's heartbeat.
INPUT_FINGERPRINT_FILES = 100_000
# The data folders' content manifest (docs/results.md, "Run identity"; a job's
# result_inputs_sha256): hashed by the agent off its loop before the start, up to these many
# files and bytes and for at most this long; past a bound the worker starts without a content
# digest (its log says why) rather than waiting on the hash.
INPUT_SHA256_FILES = 1_000_000
INPUT_SHA256_BYTES = 10**12  # 1 TB: ~17 min at the 1 GB/s bench.inputs_hash measures
INPUT_SHA256_SECONDS = 3600
# A validator Pod on Kubernetes (docs/results.md, "The validator"): the kubelet ends it at
# RESULT_VALIDATOR_SECONDS (activeDeadlineSeconds); the controller's own bound waits this
# much longer (a node whose kubelet does not say so) before it counts as timed out.
KUBE_VALIDATOR_GRACE_SECONDS = 120
# How much of a validator Pod's log the controller reads for its last lines.
KUBE_VALIDATOR_LOG_BYTES = 64 * 1024

# --- the console's own memory ---
# Shapes (list lengths) a read compiled once keeps per process (jobs.prepared): past this
# many the memory starts again.
PREPARED_SHAPES = 512
