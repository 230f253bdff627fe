"""The chaos harness's volume checks (bench/chaos_volumes.py), on claim and pod histories
made up here: each violation it claims to see is seen, and what it cannot order is counted,
not judged."""

from __future__ import annotations

from bench import chaos
from bench.chaos import make_plan, wave_objects
from bench.chaos_volumes import (
    BIND_COMPLETED,
    ClaimState,
    ClaimWatch,
    Mounting,
    binding_late,
    scratch_class,
    volume_violations,
)
from testbed.provisioner import SELECTED_NODE

NS = "chaos-v"


def claim(
    name: str, *, owner: str, rv: int, volume: str = "", node: str = "", done: bool = True
) -> dict:
    annotations = {}
    if node:
        annotations[SELECTED_NODE] = node
    if volume and done:
        annotations[BIND_COMPLETED] = "yes"
    return {
        "metadata": {
            "name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": str(rv),
            "annotations": annotations, "ownerReferences": [{"kind": "Pod", "uid": owner}],
        },
        "spec": {"volumeName": volume} if volume else {},
    }  # fmt: skip


def volume(name: str, node: str) -> dict:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                  "values": [node]}]}  # fmt: skip
    return {"metadata": {"name": name},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}  # fmt: skip


def watch() -> ClaimWatch:
    return ClaimWatch("unused", NS, 0.0)


def mounting(node: str = "n0", *, rv: int = 20, alive: bool = True) -> Mounting:
    return Mounting("w-0", "pod-uid", "w-0-scratch", node, rv, alive)


def test_a_pod_bound_after_its_claim_breaks_nothing() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5))
    claims.changed("MODIFIED", claim("w-0-scratch", owner="pod-uid", rv=10, volume="pv-1"))
    found, unordered = volume_violations(
        [mounting(rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert (found, unordered) == ([], 0)


def test_a_pod_bound_before_its_claim_is_an_i11_violation() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5))
    claims.changed("MODIFIED", claim("w-0-scratch", owner="pod-uid", rv=30, volume="pv-1"))
    found, _ = volume_violations(
        [mounting(rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert [v.invariant for v in found] == ["I11"]
    assert "before its claim" in found[0].what


def test_a_claim_first_seen_bound_in_a_list_is_counted_not_judged() -> None:
    claims = watch()
    claims.listed([claim("w-0-scratch", owner="pod-uid", rv=30, volume="pv-1")])
    found, unordered = volume_violations(
        [mounting(rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert (found, unordered) == ([], 1)


def test_a_claim_the_pv_controller_has_not_finished_is_not_bound() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5, volume="pv-1", done=False))
    found, _ = volume_violations(
        [mounting(rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert [v.invariant for v in found] == ["I11"]
    assert "unbound" in found[0].what


def test_a_bound_pod_whose_claim_was_made_for_another_pod_of_its_name_is_an_i11_violation() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="older-uid", rv=5, volume="pv-1"))
    found, _ = volume_violations(
        [mounting(rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert [v.invariant for v in found] == ["I11"]
    assert "missing" in found[0].what


def test_a_volume_made_on_another_node_than_its_pods_is_an_i13_violation() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5))
    claims.changed("MODIFIED", claim("w-0-scratch", owner="pod-uid", rv=10, volume="pv-1"))
    found, _ = volume_violations(
        [mounting("n0", rv=20)], claims.copy(), {"pv-1": volume("pv-1", "n1")}, rival_bound=()
    )
    assert [v.invariant for v in found] == ["I13"]
    assert "made on n1" in found[0].what


def test_a_claim_asking_for_a_node_while_its_pod_waits_is_an_i14_violation() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5, node="n3"))
    found, _ = volume_violations([mounting("", rv=0)], claims.copy(), {}, rival_bound=())
    assert [v.invariant for v in found] == ["I14"]
    assert "waits unbound" in found[0].what


def test_a_claim_asked_for_while_its_group_still_waits_is_no_leftover() -> None:
    """Seed 11003: the check came 0.6 s after a group asked for its volumes."""
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5, node="n3"))
    asked = claims.copy()["w-0-scratch"].selected_t
    waiting = [mounting("", rv=0)]
    found, _ = volume_violations(
        waiting, claims.copy(), {}, rival_bound=(), now=asked + 0.6, in_flight=10.0
    )
    assert found == []
    found, _ = volume_violations(
        waiting, claims.copy(), {}, rival_bound=(), now=asked + 10.5, in_flight=10.0
    )
    assert [v.invariant for v in found] == ["I14"], "left past the scheduler's release"


def test_a_leftover_is_judged_only_once_a_leader_could_have_released_it() -> None:
    """Seed 11038: the replica that asked lost its Lease as its group's wait ended, and API
    server restarts kept every replica from leading until 1.6 s before the check. A pause
    (no leader could write, until one could again) overlapping the choice's wait pushes its
    deadline past the pause; one before the choice does not."""
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5, node="n3"))
    asked = claims.copy()["w-0-scratch"].selected_t
    waiting = [mounting("", rv=0)]

    def judged(now: float, pauses: list[tuple[float, float]]) -> list[str]:
        found, _ = volume_violations(
            waiting, claims.copy(), {}, rival_bound=(), now=now, in_flight=10.0, pauses=pauses
        )
        return [v.invariant for v in found]

    assert judged(asked + 18, [(asked + 8, asked + 17)]) == [], "17 + 2 not yet past"
    assert judged(asked + 19.5, [(asked + 8, asked + 17)]) == ["I14"]
    assert judged(asked + 10.5, [(asked - 30, asked - 1)]) == ["I14"], "a pause before: none"


def test_a_claim_asking_for_a_node_for_a_pod_that_finished_breaks_nothing() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5, node="n3"))
    found, _ = volume_violations(
        [mounting("", rv=0, alive=False)], claims.copy(), {}, rival_bound=()
    )
    assert found == []


def test_a_pod_the_rival_bound_without_its_volume_is_excused() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5))
    found, _ = volume_violations([mounting("rival")], claims.copy(), {}, rival_bound=["w-0"])
    assert found == []


def test_two_claims_naming_one_volume_is_an_i12_violation_said_once() -> None:
    claims = watch()
    claims.changed("ADDED", claim("a-scratch", owner="a", rv=5, volume="pv-1"))
    claims.changed("ADDED", claim("b-scratch", owner="b", rv=6, volume="pv-1"))
    claims.changed("MODIFIED", claim("b-scratch", owner="b", rv=7, volume="pv-1"))
    assert [v.invariant for v in claims.violations] == ["I12"]
    assert "a-scratch and b-scratch" in claims.violations[0].what


def test_a_volume_named_again_after_its_claim_went_is_no_i12_violation() -> None:
    claims = watch()
    claims.changed("ADDED", claim("a-scratch", owner="a", rv=5, volume="pv-1"))
    claims.changed("DELETED", claim("a-scratch", owner="a", rv=6, volume="pv-1"))
    claims.changed("ADDED", claim("b-scratch", owner="b", rv=7, volume="pv-1"))
    assert claims.violations == []


def test_some_plans_give_gangs_scratch_volumes_of_the_runs_class_never_to_movable_ones() -> None:
    plans = [make_plan(seed) for seed in range(40)]
    with_volumes = [p for p in plans if p.volumes]
    assert 8 <= len(with_volumes) <= 32
    for plan in with_volumes:
        assert not any(g.volume and (g.movable or g.high) for g in plan.gangs)
        mounted = {g.name for g in plan.gangs if g.volume}
        for wave in range(len(plan.waves)):
            for _, obj in wave_objects(plan, wave, NS, "s"):
                if obj["kind"] != "Pod" or chaos.gang_of(obj) not in mounted:
                    continue
                (scratch,) = obj["spec"]["volumes"]
                template = scratch["ephemeral"]["volumeClaimTemplate"]["spec"]
                assert template["storageClassName"] == scratch_class(NS)
    assert not any(g.volume for p in plans if not p.volumes for g in p.gangs)


def test_a_pod_whose_volume_was_made_on_a_deleted_node_has_no_room_anywhere() -> None:
    """Its volume holds it to that node: the first fit of I4 places it there or nowhere."""
    from bench.chaos import Books, GangSpec, Observer, expectations  # noqa: PLC0415
    from scheduler.model import names  # noqa: PLC0415

    spec = GangSpec("g", "koord", 2, 2)
    seen = Observer(None, NS, {}, 0.0)  # type: ignore[arg-type]
    for i in range(2):
        seen._apply(
            {"metadata": {"name": f"g-{i}", "namespace": NS, "uid": f"u{i}",
                          "annotations": {names.KOORD_NAME: "g",
                                          names.KOORD_MIN_AVAILABLE: "2"}},
             "spec": {"schedulerName": NS, "containers": [{"name": "m", "resources": {
                 "requests": {"cpu": "1", "memory": "1Gi"}}}]},
             "status": {"phase": "Pending"}},
            1.0,
        )  # fmt: skip
    books = Books(NS, {"g": spec}, ["n0", "n1"])
    expected, _, no_room = expectations(books, seen.pods)
    assert sorted(expected) == ["g"]
    seen.pods["u0"].pinned = "n1"
    books.deleted_nodes["n1"] = 2.0
    expected, _, no_room = expectations(books, seen.pods)
    assert (expected, no_room) == ({}, ["g"])
    seen.pods["u0"].pinned = "n0"  # its node is there: it fits
    expected, _, _ = expectations(books, seen.pods)
    assert sorted(expected) == ["g"]


def test_a_pod_first_seen_bound_in_a_list_is_counted_not_judged() -> None:
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-uid", rv=5))
    claims.changed("MODIFIED", claim("w-0-scratch", owner="pod-uid", rv=30, volume="pv-1"))
    listed = Mounting("w-0", "pod-uid", "w-0-scratch", "n0", 40, True, bind_watched=False)
    found, unordered = volume_violations(
        [listed], claims.copy(), {"pv-1": volume("pv-1", "n0")}, rival_bound=()
    )
    assert (found, unordered) == ([], 1)


def test_one_volume_in_five_is_made_past_the_schedulers_wait_and_the_rest_within_a_second() -> None:
    from bench.chaos_volumes import Delaying  # noqa: PLC0415

    slow = Delaying(None, NS, set(), seed=7, bind_timeout=4.0)  # type: ignore[arg-type]
    delays = [slow._delay() for _ in range(1000)]
    late = [d for d in delays if d > 4.0]
    assert 150 <= len(late) <= 250
    assert slow.slow == len(late)
    assert all(5.0 <= d <= 7.0 for d in late)
    assert all(d < 1.0 for d in delays if d <= 4.0)


def test_a_claim_whose_volume_is_made_but_not_bound_is_the_pv_controllers_to_bind() -> None:
    """Seed 11598: after an API server restart the PV controller bound none of 50 claims
    for 25 s, their volumes made; the gangs waited on it, not on the scheduler. Such claims
    are late in binding; a claim without a volume yet, or bound, or gone, is not."""
    states = [
        ClaimState("a-scratch", "made", "pa", 0.0),
        ClaimState("b-scratch", "bound", "pb", 0.0, volume="pv-b", bound=True),
        ClaimState("c-scratch", "waiting", "pc", 0.0),
        ClaimState("d-scratch", "gone", "pd", 0.0, gone=True),
    ]
    claims = {c.name: c for c in states}  # as ClaimWatch.copy() hands them over: by name
    assert binding_late(claims, {"made", "bound", "gone"}) == {"made"}


def test_the_watchs_claims_are_found_late_by_the_uids_their_volumes_name() -> None:
    """Seed 11912: the watch hands its claims over by name and volumes name them by uid;
    read by its keys, no claim was ever late, and nine gangs waiting on a stale PV
    controller were counted as the scheduler's."""
    claims = watch()
    claims.changed("ADDED", claim("w-0-scratch", owner="pod-0", rv=5, node="n0"))
    claims.changed("ADDED", claim("w-1-scratch", owner="pod-1", rv=6, node="n0"))
    made = {"uid-w-0-scratch"}  # a volume made for w-0's claim only
    assert binding_late(claims.copy(), made) == {"uid-w-0-scratch"}
