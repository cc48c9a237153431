"""Accounting on a quota tree (docs/quota-tree.md "Accounting"): each level's own guarantee
and what its subtree uses, lends and borrows, and every page and API number of a quota equal
to `manage.py quota_usage --json` (dashboard, Quotas page, /api/v1/quotas, /metrics)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from policy.accounting import tree_order
from quotas.models import Quota, ResourceType
from tests.conftest import make_node, make_user
from tests.web.conftest import Tree, borrow, place, submit

TREE_KEYS = ("size", "own", "used", "in_quota", "lent", "borrowed", "free")
ROLL_UP = ("subtree_used", "subtree_lent", "subtree_borrowed")


@pytest.fixture
def tree(tenant, workspace, researcher):
    """org 32 (own 8) ▸ dept 16 (own 8, limit 24, lends 4) ▸ leaf 8; org ▸ sib 8.
    leaf runs 4 in quota and lends 2 to sib's idle job; dept's idle job borrows 4 of org's;
    org runs 2 in quota."""

    def quota(name, gpus, parent=None, **extra):
        q = Quota.objects.create(
            tenant=tenant,
            name=name,
            resource_type=ResourceType.LINGJUN,
            gpu_type="H200",
            gpus=gpus,
            parent=parent,
            **extra,
        )
        workspace.quotas.add(q)
        return q

    org = quota("org", 32)
    dept = quota("dept", 16, org, max_gpus=24, lending_limit=4)
    leaf = quota("leaf", 8, dept)
    sib = quota("sib", 8, org)
    nodes = [make_node(f"node-{n}") for n in range(2)]
    place(submit(researcher, workspace, leaf, gpus_per_worker=4), nodes[0])
    idle = "Only Idle Resources"
    borrow(submit(researcher, workspace, sib, gpus_per_worker=2, idle_resources=idle),
           nodes[0], leaf, [4, 5])  # fmt: skip
    borrow(submit(researcher, workspace, dept, gpus_per_worker=4, idle_resources="Acceptable"),
           nodes[1], org, [0, 1, 2, 3])  # fmt: skip
    place(submit(researcher, workspace, org, gpus_per_worker=2), nodes[1])
    return {"org": org, "dept": dept, "leaf": leaf, "sib": sib}


EXPECTED = {  # name: (size, own, used, in quota, lent, borrowed, free), (uses, lends, borrows)
    "org": ((32, 8, 6, 2, 4, 0, 2), (12, 0, 0)),
    "dept": ((16, 8, 0, 0, 0, 4, 8), (8, 2, 4)),
    "leaf": ((8, 8, 6, 4, 2, 0, 2), (4, 2, 0)),
    "sib": ((8, 8, 0, 0, 0, 2, 8), (2, 0, 2)),
}


def quota_usage() -> dict[str, dict]:
    out = StringIO()
    call_command("quota_usage", "--json", stdout=out)
    return {q["name"]: q for q in json.loads(out.getvalue())["quotas"]}


def test_each_level_shows_its_own_guarantee_and_its_subtree(tree):
    usage = quota_usage()
    for name, (numbers, rolled) in EXPECTED.items():
        assert tuple(usage[name][k] for k in TREE_KEYS) == numbers, name
        assert tuple(usage[name][k] for k in ROLL_UP) == rolled, name
    assert [(q["name"], q["depth"]) for q in usage.values()] == [
        ("org", 0), ("dept", 1), ("leaf", 2), ("sib", 1)
    ]  # fmt: skip
    text = StringIO()
    call_command("quota_usage", stdout=text)
    assert "\n    leaf " in text.getvalue()  # indented under dept


def test_only_roots_count_as_promises_of_the_cluster(tree):
    out = StringIO()
    call_command("quota_usage", "--json", stdout=out)
    (pool,) = json.loads(out.getvalue())["pools"]
    assert pool["guaranteed"] == 32  # org's 32, not 32 + 16 + 8 + 8


def test_every_page_and_api_agrees_with_quota_usage(tree, member_client, api, researcher):
    usage = quota_usage()
    keys = (*TREE_KEYS, *ROLL_UP)
    expected = {name: {k: str(q[k]) for k in keys} for name, q in usage.items()}

    dashboard = Tree(member_client.get(reverse("home")).text)
    for name in usage:
        (card,) = dashboard.find(data_quota=name)
        shown = dashboard.values(card)
        assert {k: shown[k] for k in keys} == expected[name], name

    page = Tree(member_client.get(reverse("quotas")).text)
    for name in usage:
        (row,) = page.find(data_quota=name)
        (tree_row,) = page.find(data_tree_quota=name)
        shown = page.values(row) | page.values(tree_row)
        assert {k: shown[k] for k in keys} == expected[name], name
    # parent first, children indented
    order = [e.attrs["data-tree-quota"] for e in page.elements if "data-tree-quota" in e.attrs]
    assert order == ["org", "dept", "leaf", "sib"]

    api_quotas = {q["name"]: q for q in api.get("/api/v1/quotas").json()["quotas"]}
    for name, q in api_quotas.items():
        assert {k: str(q["usage"][k]) for k in keys} == expected[name], name
        assert q["own_gpus"] == usage[name]["own"]
    assert api_quotas["leaf"]["parent"] == "dept" and api_quotas["org"]["parent"] is None
    assert (api_quotas["dept"]["max_gpus"], api_quotas["dept"]["lending_limit"]) == (24, 4)

    root = make_user("root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(root)
    metrics = client.get("/metrics").content.decode()
    families = {"size": "guaranteed", "own": "own_guaranteed", "used": "used"}
    families |= {k: k for k in ROLL_UP}
    for name in usage:
        for key, family in families.items():
            line = f'gpu_console_quota_gpus_{family}{{quota="{name}"}} {expected[name][key]}.0'
            assert line in metrics, line
    assert 'gpu_console_quota_gpus_limit{quota="dept"} 24.0' in metrics


def test_tree_order_places_parents_first():
    from policy.accounting import QuotaUsage

    def usage(qid, name, parent=None):
        return QuotaUsage(qid, name, 1, "Lingjun", "H200", 0, 0, 0, 0, 0, 0, 0, 0, None,
                          parent_id=parent)  # fmt: skip

    rows = [usage(1, "z-root"), usage(2, "b", 1), usage(3, "a", 1), usage(4, "a-root"),
            usage(5, "c", 3)]  # fmt: skip
    assert [u.name for u in tree_order(rows)] == ["a-root", "z-root", "a", "c", "b"]
    assert [u.name for u in tree_order(rows[1:])] == ["a", "c", "a-root", "b"]  # no parent 1


def test_researchers_see_only_their_quotas_of_the_tree_read_only(tree, other_workspace):
    """A researcher bound to leaf only sees leaf's row (its own guarantee, limit, weight),
    not the rest of the organisation; the page edits nothing."""
    other_workspace.quotas.add(tree["leaf"])
    client = Client()
    client.force_login(make_user("bob", other_workspace))
    page = Tree(client.get(reverse("quotas")).text)
    assert [e.attrs["data-tree-quota"] for e in page.elements if "data-tree-quota" in e.attrs] == [
        "leaf"
    ]
    assert not page.find(data_quota="org")
    assert not [e for e in page.elements if e.tag in ("input", "select") and "name" in e.attrs
                and e.attrs["name"] in ("gpus", "max_gpus", "lending_limit", "weight")]  # fmt: skip
