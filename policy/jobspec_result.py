"""The work contract's fields of the job's shape (docs/results.md; docs/job-shape.md):
part of `policy.jobspec.FIELDS`, shown in the create page's "Result" section. A job that
names expected units is Completed only when its result is accepted."""

from policy.admission import values
from policy.jobfield import JobField, Kind
from policy.results import check_expected_units, check_inputs, check_unit_name
from protocol import limits

RESULT = "Result"


def _result(key: str) -> dict[str, str]:
    """A key of `Job.result_contract`, read by `policy.results.Contract.of`, shown in the
    API's "result"."""
    return {"section": RESULT, "stored": f"result_contract.{key}", "shown": f"result.{key}"}


# fmt: off
RESULT_FIELDS: tuple[JobField, ...] = (
    JobField(
        "result_unit", Kind.TEXT, "Unit name", default="", max_length=limits.RESULT_UNIT_NAME,
        check=check_unit_name, help="What one unit of work is called: partition, shard, file.",
        doc="The word for one unit of work (partition, shard, file).", **_result("unit"),
    ),
    JobField(
        "result_expected_units", Kind.TEXT, "Expected units", default="",
        max_length=limits.RESULT_EXPECTED_UNITS, check=check_expected_units,
        help="A count (8), ids (p1,p2) or a range (p{1..8}). Empty: result not checked.",
        doc="A count, unit ids separated by commas, or a range like p{1..8}.",
        **_result("expected_units"),
    ),
    JobField(
        "result_expected_items", Kind.INT, "Expected items", help="In total; empty: any.",
        bounds=limits.JOB_BOUNDS["result_expected_items"], doc="Items in total,",
        **_result("expected_items"),
    ),
    JobField(
        "result_items_per_unit", Kind.INT, "Items per unit", help="Each unit exactly; empty: any.",
        bounds=limits.JOB_BOUNDS["result_items_per_unit"], doc="Items each unit must hold,",
        **_result("items_per_unit"),
    ),
    JobField(
        "result_validator", Kind.TEXT, "Validator command", default="",
        max_length=limits.RESULT_VALIDATOR, check=values.command, rows=2,
        help="Runs after exit 0 with RESULT_DIR set; exit 0 accepts the result.",
        doc="A command run after exit 0 on the result folder; its exit code decides.",
        worker="result_validator", **_result("validator"),
    ),
    JobField(  # claimed like the checkpoint folder; a clone's is its own (docs/results.md)
        "result_output_dir", Kind.TEXT, "Output folder", default="", cloned=False,
        max_length=limits.CHECKPOINT_DIR, check=values.checkpoint_dir,
        pattern=limits.CHECKPOINT_DIR_GIVEN, worker="output_subdir", **_result("output_dir"),
        help="A folder of your workspace's area for the accepted result, no other job's; "
        "default: output/result in the checkpoint folder.",
        doc="The run's result folder under your workspace's area, no other job's.",
    ),
    JobField(
        "result_expected_output_gb", Kind.INT, "Expected output (GB)",
        bounds=limits.JOB_BOUNDS["result_expected_output_gb"],
        help="Free space each worker's node must have for its output; empty: "
        f"{limits.OUTPUT_FREE_FLOOR_MB} MB.",
        doc="GB of free space the output folder needs at start,",
        worker="expected_output_gb", **_result("expected_output_gb"),
    ),
    JobField(
        "result_preflight_seconds", Kind.INT, "Preflight (seconds)",
        bounds=limits.JOB_BOUNDS["result_preflight_seconds"],
        help="Before a run from scratch, the command with RUN_PREFLIGHT=1 for at most this "
        "long; it must exit 0 or accept a unit, or the run does not start. Empty: none.",
        doc="Seconds a preflight (the command with RUN_PREFLIGHT=1) may take before the run,",
        worker="preflight_seconds", **_result("preflight_seconds"),
    ),
    JobField(
        "result_inputs", Kind.TEXT, "Inputs version", default="",
        max_length=limits.RESULT_INPUTS, check=check_inputs,
        help="The version of the data it reads (dataset-v3); a resume with others is refused.",
        doc="The inputs' version; a Restart with other inputs is refused.", **_result("inputs"),
    ),
    JobField(
        "result_inputs_sha256", Kind.FLAG, "Hash the data's content", worker="hash_inputs",
        help="The sha256 of every data file before the start; a resume with others is refused.",
        **_result("inputs_sha256"),
    ),
)
# fmt: on
