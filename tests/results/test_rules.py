"""The pure rules of counted results (policy.results, docs/results.md): the contract as
submitted, the verdict after exit 0, the progress line, the run's identity."""

import pytest

from policy.admission.values import Problem
from policy.results import (
    Contract,
    effective_config,
    expected_units,
    judge,
    progress_text,
    run_id,
    unit_digest,
)
from policy.secrets import REDACTED

EIGHT = Contract(unit="partition", count=8, ids=tuple(f"p{i}" for i in range(1, 9)), items=4000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", (8, ())),
        ("p1,p2 p3", (3, ("p1", "p2", "p3"))),
        ("p{1..3}", (3, ("p1", "p2", "p3"))),
        ("s{08..10}.bin", (3, ("s08.bin", "s09.bin", "s10.bin"))),
        ("", (None, ())),
    ],
)
def test_expected_units_are_a_count_ids_or_a_range(text, expected):
    assert expected_units(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "between 1 and"),
        ("p1,p1", "twice"),
        ("p{3..1}", "lower number up"),
        ("../etc", "a unit id is"),
    ],
)
def test_bad_expected_units_say_why(text, message):
    with pytest.raises(Problem, match=message):
        expected_units(text)


def test_no_contract_is_completed_as_not_checked():
    assert Contract.of({"unit": "", "expected_units": "", "expected_items": None}) is None
    verdict = judge(None, {})
    assert (verdict.state, verdict.reason, verdict.code) == ("unchecked", "result not checked", "")


def test_all_units_accepted_is_accepted():
    verdict = judge(EIGHT, {f"p{i}": 500 for i in range(1, 9)})
    assert verdict.state == "accepted"
    assert verdict.reason == "result accepted (8/8 partitions, 4,000 items)"


def test_five_of_eight_is_rejected_naming_what_is_missing():
    verdict = judge(EIGHT, {f"p{i}": 500 for i in range(1, 6)})
    assert (verdict.state, verdict.code) == ("rejected", "result_rejected")
    assert verdict.reason == (
        "exited 0 but result rejected: partitions p6, p7, p8 missing; 2,500 of 4,000 items"
    )
    assert verdict.missing == ("p6", "p7", "p8")


def test_a_conflict_or_an_unexpected_unit_rejects_a_complete_result():
    accepted = {f"p{i}": 500 for i in range(1, 9)}
    assert "conflicting checksums for p3" in judge(EIGHT, accepted, ["p3"]).reason
    assert "unexpected partitions p9" in judge(EIGHT, {**accepted, "p9": 1}).reason


def test_a_count_contract_and_an_items_contract():
    counted = Contract(unit="shard", count=3)
    assert judge(counted, {"a": 1, "b": 1, "c": 1}).state == "accepted"
    assert judge(counted, {"a": 1}).reason == "exited 0 but result rejected: 1 of 3 shards accepted"
    items = Contract.of({"expected_items": 10})
    assert judge(items, {"a": 9}).reason == "exited 0 but result rejected: 9 of 10 items"


def test_an_items_per_unit_contract_names_each_unit_of_another_size():
    each = Contract.of({"unit": "partition", "expected_units": "p{1..3}", "items_per_unit": 500})
    assert each is not None and each.counted
    verdict = judge(each, {"p1": 500, "p2": 500, "p3": 500})
    assert verdict.reason == "result accepted (3/3 partitions, 1,500 items, 500 each)"
    verdict = judge(each, {"p1": 500, "p2": 499, "p3": 501})
    assert verdict.state == "rejected" and verdict.code == "result_rejected"
    assert verdict.reason == (
        "exited 0 but result rejected: partitions not of 500 items: p2 (499), p3 (501)"
    )
    alone = Contract.of({"items_per_unit": 2})  # a contract of its own, without ids or a count
    assert alone is not None and judge(alone, {"a": 2}).state == "accepted"
    assert judge(alone, {"a": 2, "b": 3}).reason.endswith("units not of 2 items: b (3)")


def test_the_progress_line():
    assert (
        progress_text(EIGHT, 5, 2500, "write")
        == "phase write · 5 of 8 partitions accepted · 2,500 of 4,000 items"
    )
    assert progress_text(None, 1, 500) == "1 unit accepted · 500 items"
    assert progress_text(None, 0, 0) == ""


def test_secret_env_values_are_never_in_the_configuration_and_the_sha_is_canonical():
    values = {"image": "x", "env": {"HF_TOKEN": "hf_abc", "DB_PASSWORD": "p", "LR": "0.1"}}
    config, digest = effective_config(values)
    assert config["env"] == {"DB_PASSWORD": REDACTED, "HF_TOKEN": REDACTED, "LR": "0.1"}
    assert "hf_abc" not in str(config)
    assert effective_config(dict(reversed(values.items())))[1] == digest
    assert effective_config({**values, "image": "y"})[1] != digest


def test_run_ids_are_readable_and_unique_by_job():
    assert run_id("Campaign A", 1842) == "campaign-a-1842"
    assert run_id("", 7) == "run-7"


def test_a_units_digest_ignores_the_order_of_its_files():
    a = {"path": "a", "size": 1, "sha256": "0" * 64}
    b = {"path": "b", "size": 2, "sha256": "1" * 64}
    assert unit_digest([a, b]) == unit_digest([b, a]) != unit_digest([a])


def test_units_complete_when_a_run_ended_without_a_verdict():
    from policy.results import compact_units, ended_unjudged

    assert compact_units(["p3", "p1", "p2", "p5", "p10", "shard-a", "p007"]) == (
        "p1..p3, p5, p10, p007, shard-a"
    )
    assert compact_units([f"p{i}" for i in range(0, 100, 2)], parts=3) == "p0, p2, p4, … (47 more)"
    contract = Contract.of({"unit": "partition", "expected_units": "p{1..8}"})
    assert ended_unjudged("Stopped", contract, ["p2", "p1", "p3", "p4", "p5"]) == (
        "not judged: the job ended Stopped with 5 partitions complete (p1..p5); "
        "a Restart carries them; not done: p6..p8"
    )
    assert ended_unjudged("Failed", contract, []) == (
        "not judged: the job ended Failed with no partitions complete"
    )
    assert ended_unjudged("Stopped", None, []) == "not judged: the job ended Stopped"
