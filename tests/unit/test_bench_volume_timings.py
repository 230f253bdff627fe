"""Where a pod of the backlog with volumes spent its time (bench/volumes.py): its claim's node
chosen to its claim bound (the provisioner and the PV controller), its claim bound to the
pod bound (the scheduler); and what counts as bound: a volume named and the PV controller's
bind-completed, what the schedulers wait for."""

from __future__ import annotations

from bench.volumes import BIND_COMPLETED, Seen, claim_is_bound, percentiles, timings, volume_node


def at(seconds: float) -> Seen:
    return Seen(at=seconds, version=0, exact=True)


def test_a_pods_time_is_split_at_its_claim_bound() -> None:
    figures = timings(
        pod_bound={"a": at(10.5), "b": at(12.0), "c": at(13.0)},
        selected={"a-data": at(9.0), "b-data": at(9.0)},
        claim_bound={"a-data": at(10.0), "b-data": at(11.0), "c-data": at(12.5)},
    )
    assert figures == {
        "claim_binding_p50_ms": 1500.0, "claim_binding_p99_ms": 2000.0,
        "bind_after_claim_p50_ms": 500.0, "bind_after_claim_p99_ms": 1000.0,
    }  # fmt: skip


def test_no_claim_seen_bound_gives_no_figure() -> None:
    assert timings(pod_bound={"a": at(1.0)}, selected={}, claim_bound={}) == {}


def test_the_p99_is_the_nearest_rank() -> None:
    assert percentiles([]) is None
    assert percentiles(range(1, 101)) == (50.5, 99)
    assert percentiles(range(1, 1001)) == (500.5, 990)
    assert percentiles([1.0, 2.0]) == (1.5, 2.0)
    assert percentiles([3.0]) == (3.0, 3.0)


def test_a_claim_is_bound_once_its_volume_is_named_and_the_binding_completed() -> None:
    named = {"metadata": {}, "spec": {"volumeName": "pv-1"}}
    assert not claim_is_bound(named)
    assert claim_is_bound({**named, "metadata": {"annotations": {BIND_COMPLETED: "yes"}}})
    assert not claim_is_bound({"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {}})


def test_a_volume_reachable_from_more_than_one_node_names_none() -> None:
    expression = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n-1", "n-2"]}
    volume = {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [expression]}]}}}}  # fmt: skip
    assert volume_node(volume) is None
    assert volume_node({"spec": {}}) is None
