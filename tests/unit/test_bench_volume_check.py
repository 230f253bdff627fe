"""The backlog with volumes' check (bench/volumes.py): every bound pod's claim Bound, to a
volume pre-bound to it and reachable from the pod's node alone, and bound at an earlier
resourceVersion than the pod's binding; an order read from a LIST is not read at all."""

from __future__ import annotations

from bench.volumes import Seen, check, claim_name
from testbed.provisioner import volume_for


def claim(pod: str, *, phase: str = "Bound", uid: str = "") -> dict:
    return {
        "metadata": {"name": claim_name(pod), "namespace": "ns", "uid": uid or f"u-{pod}"},
        "spec": {"resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "wffc"},
        "status": {"phase": phase},
    }


def bound_on(pod: str, node: str, **kw: str) -> tuple[dict, dict]:
    """A claim Bound to the volume the provisioner made for it on ``node``."""
    c = claim(pod, **kw)
    volume = volume_for(c, node)
    c["spec"]["volumeName"] = volume["metadata"]["name"]
    return c, volume


def seen(version: int, *, exact: bool = True) -> Seen:
    return Seen(at=float(version), version=version, exact=exact)


def verdict_of(pods: dict[str, str], volumes_on: dict[str, str], **kw):
    claims, volumes = {}, {}
    for pod, node in volumes_on.items():
        c, v = bound_on(pod, node)
        claims[c["metadata"]["name"]] = c
        volumes[v["metadata"]["name"]] = v
    return check(
        pods=pods,
        pod_bound=kw.get("pod_bound", {p: seen(20) for p in pods}),
        claim_bound=kw.get("claim_bound", {claim_name(p): seen(10) for p in pods}),
        claims=kw.get("claims", claims),
        volumes=kw.get("volumes", volumes),
    )


def test_pods_whose_claims_were_bound_first_on_their_nodes_pass() -> None:
    verdict = verdict_of({"a": "n-1", "b": "n-2"}, {"a": "n-1", "b": "n-2"})
    assert verdict.problems == ()
    assert verdict.figures() == {
        "claims_on_pod_node": 2, "pods_bound_before_claim": 0, "bind_order_unchecked": 0,
    }  # fmt: skip


def test_a_volume_made_on_another_node_than_its_pods_is_a_problem() -> None:
    verdict = verdict_of({"a": "n-1"}, {"a": "n-2"})
    assert verdict.claims_on_pod_node == 0
    assert verdict.problems == ("a is bound on n-1 and its volume pvc-u-a on n-2",)


def test_a_pod_bound_before_its_claim_is_counted_and_said() -> None:
    verdict = verdict_of(
        {"a": "n-1", "b": "n-1"},
        {"a": "n-1", "b": "n-1"},
        pod_bound={"a": seen(20), "b": seen(20)},
        claim_bound={claim_name("a"): seen(10), claim_name("b"): seen(30)},
    )
    assert verdict.bound_before_claim == ("b",)
    assert verdict.problems == (
        "b was bound (resourceVersion 20) before its claim b-data was (30)",
    )


def test_an_order_read_from_a_list_is_not_read_at_all() -> None:
    verdict = verdict_of(
        {"a": "n-1", "b": "n-1", "c": "n-1"},
        {"a": "n-1", "b": "n-1", "c": "n-1"},
        pod_bound={"a": seen(20, exact=False), "b": seen(20), "c": seen(20)},
        claim_bound={claim_name("a"): seen(30), claim_name("b"): seen(30, exact=False)},
    )
    assert verdict.bound_before_claim == ()
    assert verdict.order_unchecked == 3  # a's bind and b's claim from a LIST; c's claim unseen
    assert verdict.problems == ()


def test_a_claim_not_bound_or_gone_or_without_its_volume_is_a_problem() -> None:
    pending, _ = bound_on("a", "n-1")
    pending["status"]["phase"] = "Pending"
    lost, _ = bound_on("b", "n-1")
    verdict = verdict_of(
        {"a": "n-1", "b": "n-1", "c": "n-1"},
        {},
        claims={claim_name("a"): pending, claim_name("b"): lost},
        volumes={},
    )
    assert verdict.problems == (
        "a is bound on n-1 and its claim a-data is Pending, volume pvc-u-a (missing)",
        "b is bound on n-1 and its claim b-data is Bound, volume pvc-u-b (missing)",
        "c is bound on n-1 and its claim c-data is gone",
    )


def test_a_volume_pre_bound_to_another_claim_is_a_problem() -> None:
    c, volume = bound_on("a", "n-1")
    volume["spec"]["claimRef"]["uid"] = "someone-else"
    verdict = verdict_of(
        {"a": "n-1"}, {}, claims={c["metadata"]["name"]: c},
        volumes={volume["metadata"]["name"]: volume},
    )  # fmt: skip
    assert verdict.claims_on_pod_node == 0
    assert verdict.problems == (
        "a-data's volume pvc-u-a is pre-bound to another claim: a-data, uid someone-else",
    )
