"""Fault-tolerance job options through the API (the form validates both)."""

import pytest

from jobs.models import Job

URL = "/api/v1/jobs"


@pytest.fixture
def api(client, api_token, node, quota):
    def post(**fields):
        body = {"quota": "team-a", "image": "pytorch:2.4", "command": "python train.py", **fields}
        return client.post(
            URL,
            body,
            content_type="application/json",
            headers={"Authorization": f"Bearer {api_token}"},
        )

    return post


def test_options_are_stored_and_returned(api):
    response = api(
        fault_tolerance=True,
        run_type="Asynchronous",
        max_restarts=5,
        restart_policy="OnFailure",
        hang_detection=True,
        hang_timeout=900,
        hang_action="stop",
        checkpoint_dir="team/run-1",
        max_runtime_seconds=3600,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["fault_tolerance"] == {
        "enabled": True,
        "run_type": "Asynchronous",
        "max_restarts": 5,
        "policy": "OnFailure",
        "hang_detection": True,
        "hang_timeout": 900,
        "hang_action": "stop",
    }
    job = Job.objects.get(pk=body["id"])
    assert job.fault_tolerance and job.checkpoint_dir == "team/run-1"
    assert body["restarts"] == [] and body["checkpoints"] == []
    assert body["events"][0]["to_status"] == "Pending"


def test_defaults(api):
    body = api().json()
    assert body["fault_tolerance"] == {
        "enabled": False,
        "run_type": "Synchronous",
        "max_restarts": 3,
        "policy": "ExitCodeAndErrorMsg",
        "hang_detection": False,
        "hang_timeout": 1800,
        "hang_action": "restart",
    }


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"fault_tolerance": "yes"}, "fault_tolerance", "fault_tolerance must be a boolean"),
        ({"max_restarts": True}, "max_restarts", "max_restarts must be an integer"),
        ({"max_restarts": 101}, "max_restarts", "between 0 and 100"),
        ({"run_type": "Sometimes"}, "run_type", "Select a valid choice"),
        ({"restart_policy": "Never"}, "restart_policy", "Select a valid choice"),
        ({"hang_timeout": 1}, "hang_timeout", "between 5 and 2592000"),
        ({"hang_action": "explode"}, "hang_action", "Select a valid choice"),
        ({"checkpoint_dir": "../escape"}, "checkpoint_dir", "no '..'"),
        ({"checkpoint_dir": "/abs/../x"}, "checkpoint_dir", "not an absolute path"),
        ({"checkpoint_dir": "/etc"}, "checkpoint_dir", "not an absolute path"),
    ],
)
def test_bad_options_are_field_errors(api, fields, field, message):
    response = api(**fields)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field and message in error["message"], error
    assert not Job.objects.exists()
