"""The result's validator command (docs/results.md, "The validator"), end to end: the real
console (live server, API), the real agent (process runtime) running
`examples/partitioned.py`, then the job's validator on the result folder.

Without the feature a job whose validator fails is Completed, and the result API's
`validator` is always null."""

import stat
from pathlib import Path

import pytest

from jobs.models import AttemptFacts, RunRecord
from tests.agents.agentproc import registered
from tests.results.test_results_e2e import _api, _finished, _submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Counts the ids of the partitions in the result folder (its working folder), shows the
# folder's mode as the validator saw it, and fails unless there are 4,000 distinct ids.
COUNT = 'n=$(cat p*.csv | sort -u | wc -l); echo "mode $(stat -c %a "$RESULT_DIR")"; '


def test_a_failing_validator_makes_the_job_failed_with_its_output(
    agents, live_server, api_token, quota
):
    agent = agents("validator-fails")
    registered("validator-fails")
    validator = COUNT + 'echo "checked $n ids"; echo "want 4001 distinct ids, found $n"; exit 3'
    job_id = _submit(live_server, api_token, quota, result_validator=validator)
    job = _finished(job_id)
    assert job.status == "Failed"
    assert job.status_reason == (
        "exited 0 but result rejected: validator exited 3: want 4001 distinct ids, found 4000"
    )
    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    assert (report["state"], report["reason_code"]) == ("rejected", "result_rejected")
    assert report["units"]["accepted"] == 8  # the units were fine: the validator decided
    got = report["validator"]
    assert (got["command"], got["reported"], got["exit_code"]) == (validator, True, 3)
    assert got["output"].splitlines() == [
        "mode 555",  # the result folder without write bits while the validator ran
        "checked 4000 ids",
        "want 4001 distinct ids, found 4000",
    ]
    assert agent.terminate() == 0, agent.output()


def test_a_passing_validator_completes_the_job_with_its_result_accepted(
    agents, live_server, api_token, quota
):
    agent = agents("validator-passes")
    registered("validator-passes")
    validator = COUNT + 'test "$n" -eq 4000 && echo "4000 distinct ids"'
    job_id = _submit(live_server, api_token, quota, result_validator=validator)
    job = _finished(job_id)
    assert job.status == "Completed", job.status_reason
    assert job.status_reason.endswith("result accepted (8/8 partitions, 4,000 items, validator ok)")
    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    assert report["state"] == "accepted"
    assert report["validator"]["exit_code"] == 0
    assert report["validator"]["output"] == "mode 555\n4000 distinct ids"
    assert report["run"]["config"]["result_validator"] == validator
    # The result folder has its write bits back once the validator ended.
    result_dir = Path(AttemptFacts.objects.get(job_id=job_id).result_dir)
    assert stat.S_IMODE(result_dir.stat().st_mode) & 0o200
    assert RunRecord.objects.get(job_id=job_id).validator_exit_code == 0
    assert agent.terminate() == 0, agent.output()


def test_a_validator_on_a_job_without_units_judges_alone(agents, live_server, api_token, quota):
    """A contract may be only a validator: no expected units, its exit code decides."""
    agent = agents("validator-alone")
    registered("validator-alone")
    job_id = _submit(
        live_server,
        api_token,
        quota,
        result_unit="",
        result_expected_units="",
        result_expected_items=None,
        result_validator="echo fine",
    )
    job = _finished(job_id)
    assert job.status == "Completed", job.status_reason
    assert job.status_reason.endswith("result accepted (validator ok)")
    assert agent.terminate() == 0, agent.output()
