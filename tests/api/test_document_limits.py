"""The request schemas of POST /jobs, /jobs/array and /jobs/batch carry the real limits
(ranges, lengths, choices, patterns: `protocol.limits` via the job's shape), so the OpenAPI
document is as strict as the validation: a value the document refuses, the API refuses too
(with a field error); a value the API refuses for a reason the document can say, the
document refuses. Validated with the JSON Schema validator Schemathesis uses."""

import sys

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.main import api as ninja_api
from policy import jobspec
from policy.admission import values
from policy.admission.values import Problem
from protocol import limits
from tests.api.conftest import GOOD, post

DOCUMENT = ninja_api.get_openapi_schema(path_prefix="/api/v1/")
SCHEMAS = DOCUMENT["components"]["schemas"]
PROPERTIES = SCHEMAS["JobCreate"]["properties"]

PADDED = " \t" + "x" * (limits.JOB_NAME - 2)  # as long as allowed, whitespace included
MANY = {f"V{i}": "1" for i in range(limits.ENV_VARS)}
# (field, value, accepted by the document and by the API)
AGREED = [
    ("name", "x" * limits.JOB_NAME, True),
    ("name", "x" * (limits.JOB_NAME + 1), False),
    ("name", PADDED, True),
    ("name", PADDED + " ", False),  # the length is the value's as sent
    ("name", "a\x00b", False),
    ("image", "busybox", True),
    ("image", "\x1cbusybox\u3000", True),  # whitespace str.strip() removes: read away
    ("image", "\ufeffbusybox", False),  # JSON Schema's \s has it; strip does not
    ("image", "bus box", False),
    ("image", "busybox\u00e9", False),
    ("image", "", False),
    ("image", "x" * limits.IMAGE, True),
    ("image", "x" * (limits.IMAGE + 1), False),
    ("command", "x" * limits.COMMAND, True),
    ("command", "x" * (limits.COMMAND + 1), False),
    ("command", "echo \x00", False),
    ("command", "", False),
    ("quota", "", False),
    ("checkpoint_dir", "runs/exp1", True),
    ("checkpoint_dir", " runs/exp1/ ", True),
    ("checkpoint_dir", "", True),
    ("checkpoint_dir", "/etc", False),
    ("checkpoint_dir", "a b", False),
    ("checkpoint_dir", "/".join(["a"] * limits.CHECKPOINT_DEPTH), True),
    ("checkpoint_dir", "/".join(["a"] * (limits.CHECKPOINT_DEPTH + 1)), False),
    ("checkpoint_dir", "a" * (limits.CHECKPOINT_SEGMENT + 1), False),
    ("env", {"A_1": "x" * limits.ENV_VALUE}, True),
    ("env", {"A": "x" * (limits.ENV_VALUE + 1)}, False),
    ("env", {"1A": "x"}, False),
    ("env", {"A-B": "x"}, False),
    ("env", {"A": "a\x00"}, False),
    ("env", MANY, True),
    ("env", MANY | {"ONE_MORE": "1"}, False),
    ("env", "A=1\nB=2", True),
    ("workers", 1, True),
    ("workers", 0, False),
    ("workers", 65, False),
    ("max_runtime_seconds", None, True),
    ("idle_resources", "Acceptable", True),
    ("idle_resources", None, True),
    ("idle_resources", "", False),
    ("idle_resources", "acceptable", False),
    ("hang_action", "stop", True),
]
# What only the API can refuse: it knows the quotas, reads a blank as missing, and keeps
# names the agent sets; the document accepts these (it never refuses what the API takes).
API_ONLY = [
    ("quota", "no-such-quota"),
    ("quota", 987654),
    ("command", "   "),
    ("checkpoint_dir", "a/../b"),
    ("env", {"CUDA_VISIBLE_DEVICES": "0"}),
]


def _validator(name: str):
    return jsonschema_rs.validator_for(PROPERTIES[name])


def _api_refuses(api, name: str, value) -> bool:
    response = post(api, "/api/v1/jobs", GOOD | {name: value})
    if response.status_code == 201:
        return False
    assert response.status_code == 400, response.content[:300]
    return name in response.json()["error"]["fields"]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value", "accepted"), AGREED)
def test_the_document_and_the_api_agree(api, quota, node, name, value, accepted):
    assert _validator(name).is_valid(value) is accepted
    assert _api_refuses(api, name, value) is not accepted


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), API_ONLY)
def test_what_only_the_api_knows(api, quota, node, name, value):
    assert _validator(name).is_valid(value)
    assert _api_refuses(api, name, value)


def test_batch_and_array_take_the_same_job():
    batch = SCHEMAS["JobBatchCreate"]["properties"]["jobs"]
    assert batch["items"] == {"$ref": "#/components/schemas/JobCreate"}
    assert (batch["minItems"], batch["maxItems"]) == (1, 1000)
    array = SCHEMAS["JobArrayCreate"]["properties"]
    assert array["job"] == {"$ref": "#/components/schemas/JobCreate"}
    assert (array["count"]["minimum"], array["count"]["maximum"]) == (1, 1000)
    for path in ("/api/v1/jobs", "/api/v1/jobs/batch", "/api/v1/jobs/array"):
        body = DOCUMENT["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["$ref"].startswith("#/components/schemas/Job")


def test_the_whitespace_a_pattern_allows_is_what_strip_removes():
    pattern = jsonschema_rs.validator_for({"pattern": f"^{values.WHITESPACE}$"})
    for char in map(chr, [*range(0x3001), 0xFEFF, 0xFFFF, sys.maxunicode]):
        assert pattern.is_valid(char) is char.isspace(), hex(ord(char))
    assert max(c for c in range(sys.maxunicode + 1) if chr(c).isspace()) == 0x3000


def _refused(name: str, value) -> bool:
    try:
        jobspec.FIELD[name].clean(value)
    except Problem:
        return True
    return False


TEXTS = st.text(st.characters(codec="utf-8"), max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from([f.name for f in jobspec.FIELDS if f.kind is jobspec.Kind.TEXT]),
    core=st.one_of(TEXTS, st.from_regex(r"[a-z0-9._/-]{1,12}", fullmatch=True)),
    before=st.sampled_from(["", " ", "\n", "\x1c", "\ufeff", "/", "x" * 600]),
    after=st.sampled_from(["", " ", "\t", "/", "//", "\u3000", "\x00", "x" * 20_000]),
)
def test_a_text_the_document_refuses_is_refused(name, core, before, after):
    value = before + core + after
    if not _validator(name).is_valid(value):
        assert _refused(name, value), (name, value[:80])


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(env=st.dictionaries(st.one_of(TEXTS, st.from_regex(r"[A-Z_]{1,4}", fullmatch=True)), TEXTS))
def test_an_environment_the_document_refuses_is_refused(env):
    if not _validator("env").is_valid(env):
        assert _refused("env", env), env
