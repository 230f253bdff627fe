"""The chaos harness's checker (bench/chaos.py), on pod histories made up here: it must see
every violation it claims to check, and excuse exactly what the chaos itself caused."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest

from bench import chaos
from bench.chaos import (
    Books,
    GangSpec,
    Observer,
    expectations,
    make_plan,
    partial_incarnations,
    victim_sets_short,
    victims_below_minimum,
    wave_objects,
)
from scheduler.model import names

NS = "chaos-t"
NODE = "n0"


def pod(
    name: str, *, gang: str | None = None, node: str = "", phase: str = "Pending",
    cpu: str = "1", job: bool = False, deleting: bool = False, replica: str = "",
    evicted: bool = False, priority: int = 0, moved: bool = False,
) -> dict:  # fmt: skip
    annotations = {names.KOORD_NAME: gang, names.KOORD_MIN_AVAILABLE: "1"} if gang else {}
    meta: dict = {"name": name, "namespace": NS, "uid": f"uid-{name}", "annotations": annotations}
    if replica:
        meta["labels"] = {chaos.REPLICA_LABEL: replica}
    if job:
        meta["ownerReferences"] = [{"kind": "Job", "name": "j"}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {
        "schedulerName": NS,
        "containers": [{"name": "m", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
    }
    if node:
        spec["nodeName"] = node
    if priority:
        spec["priority"] = priority
    status: dict = {"phase": phase}
    if evicted or moved:
        reason = "EvictionByEvictionAPI" if moved else "PreemptionByScheduler"
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
    return {"metadata": meta, "spec": spec, "status": status}


def observer() -> Observer:
    return Observer(None, NS, {NODE: (4000, 32 * 1024, 110), "n1": (4000, 32 * 1024, 110)}, 0.0)  # type: ignore[arg-type]


def books(*specs: GangSpec, nodes: tuple[str, ...] = (NODE, "n1")) -> Books:
    return Books(NS, {s.name: s for s in specs}, list(nodes))


def test_a_plan_is_its_seed_and_fits_by_construction() -> None:
    kinds: Counter[str] = Counter()
    for seed in range(40):
        plan = make_plan(seed)
        assert plan == make_plan(seed)
        surviving = plan.nodes - plan.max_node_deletes
        # Preemptors and consolidation's whole-node gang aside: they fit only once room is
        # made for them.
        cpu = sum(g.size * g.cpu_m for g in plan.gangs if not g.high and g.name != "wn0")
        assert cpu <= surviving * chaos.NODE_CPU_M * chaos.FIT_SHARE
        assert all(1 <= g.size <= 32 and 1 <= g.min <= g.size for g in plan.gangs)
        for gang in plan.gangs:
            for peer in gang.group:
                assert plan.gangs[[g.name for g in plan.gangs].index(peer)].group == gang.group
        times = [f.at for f in plan.faults]
        assert times == sorted(times)
        assert all(b - a >= 2.0 - 1e-9 for a, b in itertools.pairwise(times))
        assert sum(f.kind == "node-delete" for f in plan.faults) <= plan.max_node_deletes
        kinds.update(f.kind for f in plan.faults)
        kinds.update(g.kind for g in plan.gangs)
        kinds.update(g.mode for g in plan.gangs)
        kinds[plan.mode] += 1
    wanted = set(chaos.FAULTS_SINGLE) | set(chaos.FAULTS_HA)
    wanted |= {"podgroup", "koord", "job", "single", "Strict", "NonStrict", "ha"}
    assert wanted <= set(kinds)


def test_a_node_over_its_allocatable_is_seen_and_finished_or_gone_pods_free_room() -> None:
    seen = observer()
    seen._apply(pod("a", node=NODE, cpu="3", job=True), 1.0)
    seen._apply(pod("a", node=NODE, cpu="3", job=True, phase="Succeeded"), 2.0)
    seen._apply(pod("b", node=NODE, cpu="3"), 3.0)  # a finished: room for b
    assert seen.violations == []
    seen._apply(pod("b", node=NODE, cpu="3", deleting=True), 4.0)
    seen._apply(pod("c", node=NODE, cpu="2"), 5.0)  # b still holds while being deleted
    assert [v.invariant for v in seen.violations] == ["I2"]
    assert seen.violations[0].details["pods"] == ["b", "c"]
    seen._update(seen.pods["uid-b"], 6.0, gone=True)
    seen._apply(pod("d", node=NODE, cpu="1"), 7.0)
    assert [v.invariant for v in seen.violations] == ["I2"]


def test_a_pod_whose_node_changes_is_bound_twice() -> None:
    seen = observer()
    seen._apply(pod("a", node=NODE), 1.0)
    seen._apply(pod("a", node="n1"), 2.0)
    assert [v.invariant for v in seen.violations] == ["I3"]


def test_a_pod_missing_from_a_list_again_went_away_unseen_and_frees_its_room() -> None:
    """After a watch gap (410, the API server away), the observer is handed the whole list:
    a pod not in it was deleted while nobody watched, and its room is free again."""
    seen = observer()
    seen._listed([pod("a", node=NODE, cpu="3")])
    seen._changed("ADDED", pod("b", cpu="3"))
    seen._listed([pod("b", node=NODE, cpu="3")])  # a went; b bound, both unseen
    assert seen.pods["uid-a"].gone
    assert seen.pods["uid-b"].node == NODE
    assert seen.violations == []
    assert seen.relists == 2


def history(*steps: tuple[float, dict]) -> Observer:
    seen = observer()
    for t, obj in steps:
        seen._apply(obj, t)
    return seen


def judge(seen: Observer, ledger: Books) -> list[str]:
    return [v.invariant for v in partial_incarnations(ledger, seen.pods, seen.events)]


def test_a_gang_bound_in_part_is_a_violation_unless_the_chaos_caused_it() -> None:
    gang = GangSpec("g", "koord", 3, 3)
    seen = history(
        (0.0, pod("g-0", gang="g")),
        (0.0, pod("g-1", gang="g")),
        (0.0, pod("g-2", gang="g")),
        (1.0, pod("g-0", gang="g", node=NODE)),
        (1.1, pod("g-1", gang="g", node=NODE)),
    )
    assert judge(seen, books(gang)) == ["I1"]
    rival = books(gang)
    rival.rival_bound["g-1"] = 1.05  # the rival bound one: the scheduler placed the rest
    assert judge(seen, rival) == []
    deleted = books(gang)
    deleted.chaos_deleted["uid-g-2"] = (0.5, False)  # a pending member deleted before
    assert judge(seen, deleted) == []
    late = books(gang)
    late.chaos_deleted["uid-g-2"] = (30.0, False)  # long after the binds: no excuse
    assert judge(seen, late) == ["I1"]
    seen._apply(pod("g-2", gang="g", node="n1"), 5.0)  # completed later: whole after all
    assert judge(seen, books(gang)) == []


def test_incarnations_follow_live_bound_members() -> None:
    job = GangSpec("j", "job", 2, 2)
    # A Job gang whose first pod completes before the second's bind lands: one incarnation.
    quick = history(
        (1.0, pod("j-a", gang="j", node=NODE, job=True)),
        (1.2, pod("j-a", gang="j", node=NODE, job=True, phase="Succeeded")),
        (1.5, pod("j-b", gang="j", node=NODE, job=True)),
    )
    assert judge(quick, books(job)) == []
    # Both Succeeded; a pod bound alone later counts them toward the minimum: satisfied.
    quick._apply(pod("j-b", gang="j", node=NODE, job=True, phase="Succeeded"), 2.0)
    quick._apply(pod("j-c", gang="j", node=NODE, job=True), 9.0)
    assert judge(quick, books(job)) == []
    # Both Failed instead: they count nothing, and a pod bound alone later is partial.
    failed = history(
        (1.0, pod("j-a", gang="j", node=NODE, job=True)),
        (1.0, pod("j-b", gang="j", node=NODE, job=True)),
        (2.0, pod("j-a", gang="j", node=NODE, job=True, phase="Failed")),
        (2.0, pod("j-b", gang="j", node=NODE, job=True, phase="Failed")),
        (9.0, pod("j-c", gang="j", node=NODE, job=True)),
    )
    assert judge(failed, books(job)) == ["I1"]
    # While one member still runs, a recreated member placed alone is the same incarnation.
    running = history(
        (1.0, pod("j-a", gang="j", node=NODE)),
        (1.0, pod("j-b", gang="j", node=NODE)),
        (3.0, pod("j-b", gang="j", node=NODE, phase="Failed")),
        (8.0, pod("j-c", gang="j", node=NODE)),
    )
    assert judge(running, books(job)) == []


def test_a_gang_cut_short_is_whole_with_the_rest_bound_counting_its_succeeded_members() -> None:
    """Seed 5035: 1 of a gang of 3 bound before the leader was killed; it ran to completion
    before a new leader, which bound the other 2 counting it: the two incarnations are one
    whole gang. Bound alone, or after a member that Failed, the rest is partial."""
    gang = GangSpec("j", "job", 3, 3)
    first = [
        (1.0, pod("j-a", gang="j", node=NODE, job=True)),
        (2.0, pod("j-a", gang="j", node=NODE, job=True, phase="Succeeded")),
    ]
    rest = [
        (6.0, pod("j-b", gang="j", node=NODE, job=True)),
        (6.0, pod("j-c", gang="j", node=NODE, job=True)),
    ]
    assert judge(history(*first, *rest), books(gang)) == []
    assert judge(history(*first, rest[0]), books(gang)) == ["I1", "I1"]
    failed = (2.0, pod("j-a", gang="j", node=NODE, job=True, phase="Failed"))
    assert judge(history(first[0], failed, *rest), books(gang)) == ["I1", "I1"]
    # Not completed: the first incarnation alone, its member Succeeded, is partial.
    assert judge(history(*first), books(gang)) == ["I1"]
    # Its member deleted before the rest was bound: its Job still counts it.
    went = history(*first)
    went._update(went.pods["uid-j-a"], 3.0, gone=True)
    for t, obj in rest:
        went._apply(obj, t)
    assert judge(went, books(gang)) == []
    # A member no Job made, deleted: no scheduler could count it.
    bare = history(
        (1.0, pod("j-a", gang="j", node=NODE)),
        (2.0, pod("j-a", gang="j", node=NODE, phase="Succeeded")),
    )
    bare._update(bare.pods["uid-j-a"], 3.0, gone=True)
    for t, obj in rest:
        bare._apply(obj, t)
    assert judge(bare, books(gang)) == ["I1", "I1"]


def test_a_gang_cut_short_is_whole_with_the_rest_placed_while_the_chaos_deleted_some() -> None:
    """Seed 11026: a leader killed after binding 2 of a Job gang of 4 (here); both ran to
    completion before the next leader placed the other 2, one of which the chaos deleted
    as it was bound (its Job made another later). The next incarnation is excused for the
    member deleted around its binds, and the first one is completed by it."""
    gang = GangSpec("j", "job", 4, 4)
    cut = history(
        (0.5, pod("j-d", gang="j", job=True)),
        (1.0, pod("j-a", gang="j", node=NODE, job=True)),
        (1.0, pod("j-b", gang="j", node=NODE, job=True)),
        (2.0, pod("j-a", gang="j", node=NODE, job=True, phase="Succeeded")),
        (2.0, pod("j-b", gang="j", node=NODE, job=True, phase="Succeeded")),
        (9.0, pod("j-c", gang="j", node=NODE, job=True)),
    )
    deleted = books(gang)
    deleted.chaos_deleted["uid-j-d"] = (8.5, False)  # pending, deleted around the binds
    assert judge(cut, deleted) == []
    assert judge(cut, books(gang)) == ["I1", "I1"], "nothing deleted: both partial"
    long_before = books(gang)
    long_before.chaos_deleted["uid-j-d"] = (1.5, False)  # around the first binds only
    assert judge(cut, long_before) == ["I1"], "the next one excused, the first not completed"


def test_members_that_succeeded_count_toward_what_must_be_bound_at_the_end() -> None:
    gang = GangSpec("g", "job", 3, 3)
    done = pod("g-0", gang="g", node=NODE, phase="Succeeded")
    rest = [pod(f"g-{i}", gang="g") for i in (1, 2)]
    expected, incomplete, _ = expectations(books(gang), pods_of(done, *rest))
    assert [p.name for p in expected["g"]] == ["g-1", "g-2"]
    assert incomplete == []
    failed = pod("g-0", gang="g", node=NODE, phase="Failed")
    expected, incomplete, _ = expectations(books(gang), pods_of(failed, *rest))
    assert expected == {}
    assert incomplete == ["g"]


def test_a_jobs_member_that_succeeded_and_went_still_counts_and_any_other_counts_no_more() -> None:
    """Seed 6067: a Job's pod Succeeded, then went with its node (the pod garbage
    collector); the Job made one pod for the completion left. The Job counts the one that
    went (status.succeeded, which the scheduler reads), so the new pod completes the gang of
    2 and is expected bound. A pod no Job made is seen by no scheduler once it went: the
    gang can never be whole again, so it is excused, not expected bound."""
    gang = GangSpec("j", "job", 2, 2)
    for job in (True, False):
        seen = history(
            (1.0, pod("j-a", gang="j", node=NODE, job=job)),
            (2.0, pod("j-a", gang="j", node=NODE, job=job, phase="Succeeded")),
            (3.0, pod("j-b", gang="j", job=job)),
        )
        expected, _, _ = expectations(books(gang), seen.pods)
        assert [p.name for p in expected["j"]] == ["j-b"]  # while it is there, it counts
        seen._update(seen.pods["uid-j-a"], 4.0, gone=True)  # DELETED
        expected, incomplete, _ = expectations(books(gang), seen.pods)
        if job:
            assert [p.name for p in expected["j"]] == ["j-b"]
            assert incomplete == []
        else:
            assert expected == {}
            assert incomplete == ["j"]


def pods_of(*objs: dict) -> dict:
    seen = observer()
    for obj in objs:
        seen._apply(obj, 1.0)
    return seen.pods


def test_a_slow_recovery_says_which_gangs_wait_and_since_when_their_pods_exist() -> None:
    gang = GangSpec("g", "koord", 6, 6)
    pending = pods_of(*(pod(f"g-{i}", gang="g") for i in range(6)))
    expected, _, _ = expectations(books(gang), pending)
    said = chaos.still_waiting(expected, since=24.0, now=36.5)
    assert said == (
        "12.5s after the last fault, not yet bound: "
        "g (6 pending: g-0, g-1, g-2, g-3 and 2 more; newest created t=1.00)"
    )


def test_what_must_be_bound_at_the_end() -> None:
    gang = GangSpec("g", "koord", 3, 3)
    pending = [pod(f"g-{i}", gang="g") for i in range(3)]
    expected, incomplete, no_room = expectations(books(gang), pods_of(*pending))
    assert sorted(expected) == ["g"]
    assert incomplete == no_room == []
    # Two members left (the chaos deleted one): the gang cannot be complete, it is excused.
    expected, incomplete, _ = expectations(books(gang), pods_of(*pending[:2]))
    assert expected == {}
    assert incomplete == ["g"]
    # One member bound (by anyone): the two it lacks must be placed, together.
    bound = [pod("g-0", gang="g", node="n1"), *pending[1:]]
    expected, _, _ = expectations(books(gang), pods_of(*bound))
    assert [p.name for p in expected["g"]] == ["g-1", "g-2"]
    # ... but with one of them gone, the scheduler binds none alone: excused.
    expected, incomplete, _ = expectations(books(gang), pods_of(*bound[:2]))
    assert (expected, incomplete) == ({}, ["g"])
    # Its minimum bound: satisfied, so the pending ones must be placed one by one.
    satisfied = [pod(f"g-{i}", gang="g", node="n1") for i in range(3)]
    extra = GangSpec("g", "koord", 4, 3)
    expected, _, _ = expectations(books(extra), pods_of(*satisfied, pod("g-3", gang="g")))
    assert [p.name for p in expected["g"]] == ["g-3"]
    # No room left on the surviving nodes: said, not a violation.
    full = books(gang, nodes=(NODE,))
    full.deleted_nodes[NODE] = 1.0
    expected, _, no_room = expectations(full, pods_of(*pending))
    assert expected == {}
    assert no_room == ["g"]


def test_a_gang_group_waits_for_its_incomplete_peer() -> None:
    a = GangSpec("a", "koord", 2, 2, group=("a", "b"))
    b = GangSpec("b", "koord", 2, 2, group=("a", "b"))
    objs = [pod("a-0", gang="a"), pod("a-1", gang="a"), pod("b-0", gang="b")]
    expected, incomplete, _ = expectations(books(a, b), pods_of(*objs))
    assert expected == {}
    assert sorted(incomplete) == ["a", "b"]


@pytest.mark.parametrize(("text", "milli"), [("250m", 250), ("1", 1000), ("1.5", 1500)])
def test_cpu_quantities(text: str, milli: int) -> None:
    assert chaos._cpu_m(text) == milli


def queued(obj: dict, queue: str) -> dict:
    obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), names.QUEUE: queue}
    return obj


def test_a_queue_over_its_capability_is_seen_and_the_rivals_binds_do_not_count() -> None:
    seen = Observer(
        None,  # type: ignore[arg-type]
        NS,
        {NODE: (8000, 32 * 1024, 110), "rival": (8000, 32 * 1024, 110)},
        0.0,
        capabilities={"q": 2000},
        rival_node="rival",
    )
    seen._apply(queued(pod("a", node=NODE, cpu="1", job=True), "q"), 1.0)
    seen._apply(queued(pod("r", node="rival", cpu="4"), "q"), 2.0)  # the rival's: not counted
    seen._apply(queued(pod("a", node=NODE, cpu="1", job=True, phase="Succeeded"), "q"), 3.0)
    seen._apply(queued(pod("b", node=NODE, cpu="2"), "q"), 4.0)  # a finished: room for b
    assert seen.violations == []
    seen._apply(queued(pod("c", node=NODE, cpu="1"), "q"), 5.0)
    assert [v.invariant for v in seen.violations] == ["I6"]
    assert seen.violations[0].details["pods"] == ["b", "c"]


def test_a_gang_its_queues_capability_holds_back_is_not_expected_bound() -> None:
    gang = GangSpec("g", "koord", 2, 2, queue="cap")
    other = GangSpec("h", "koord", 1, 1, queue="cap")
    ledger = books(gang, other)
    ledger.capabilities["q"] = 2500
    running = queued(pod("h-0", gang="h", node=NODE, cpu="1"), "q")
    pending = [queued(pod(f"g-{i}", gang="g"), "q") for i in range(2)]
    expected, _, no_room = expectations(ledger, pods_of(running, *pending))
    assert expected == {}
    assert no_room == ["g"]  # 1 held + 2 asked > 2.5: held back by design
    ledger.capabilities["q"] = 3000
    expected, _, _ = expectations(ledger, pods_of(running, *pending))
    assert sorted(expected) == ["g"]
    # A member of the queue the rival bound holds its room too, as the scheduler counts it.
    ledger.rival_node = "rival"
    rivals = queued(pod("r-0", node="rival", cpu="1"), "q")
    expected, _, no_room = expectations(ledger, pods_of(running, rivals, *pending))
    assert expected == {}
    assert no_room == ["g"]


def test_a_gang_below_its_minimum_asks_its_queue_for_all_it_lacks_at_once() -> None:
    """Seed 11307: the rival bound one member of a gang of 12 (minimum 11); the scheduler
    needs the other ten at once, more than the queue's capability allows."""
    gang = GangSpec("g", "koord", 4, 4, queue="cap")
    ledger = books(gang)
    ledger.capabilities["q"] = 2500
    ledger.rival_node = "rival"
    rivals = queued(pod("g-0", gang="g", node="rival", cpu="1"), "q")
    pending = [queued(pod(f"g-{i}", gang="g"), "q") for i in range(1, 4)]
    expected, _, no_room = expectations(ledger, pods_of(rivals, *pending))
    assert expected == {}
    assert no_room == ["g"]  # 1 held by the rival's + 3 asked > 2.5
    ledger.capabilities["q"] = 4000
    expected, _, _ = expectations(ledger, pods_of(rivals, *pending))
    assert sorted(expected) == ["g"]


def test_half_the_plans_have_queues_and_a_seeds_workload_is_the_same_with_them() -> None:
    with_queues = [make_plan(seed) for seed in range(20) if make_plan(seed).queues]
    assert 4 <= len(with_queues) <= 16
    plan = with_queues[0]
    assert {q for q, _ in plan.queues} == {"cap", "wide"}
    asked = sum(g.size * g.cpu_m for g in plan.gangs if g.queue == "cap")
    assert dict(plan.queues)["cap"] == max(asked // 2, 1000)
    for gang in plan.gangs:
        for peer in gang.group:
            assert next(g for g in plan.gangs if g.name == peer).queue == gang.queue


def test_a_gang_group_its_queues_capability_holds_back_together_is_not_expected_bound() -> None:
    """Seed 30090: two gangs of one GangGroup each fit under the capability, not together."""
    a = GangSpec("a", "koord", 2, 2, group=("a", "b"), queue="cap")
    b = GangSpec("b", "koord", 2, 2, group=("a", "b"), queue="cap")
    ledger = books(a, b)
    ledger.capabilities["q"] = 3000
    pending = [queued(pod(f"{g}-{i}", gang=g), "q") for g in ("a", "b") for i in range(2)]
    for obj in pending:
        obj["metadata"]["annotations"][names.KOORD_GROUPS] = '["chaos-t/a", "chaos-t/b"]'
    expected, _, no_room = expectations(ledger, pods_of(*pending))
    assert expected == {}
    assert sorted(no_room) == ["a", "b"]


# -- subgroups (#23) ---------------------------------------------------------------------------


def test_a_replica_bound_in_part_is_a_violation_unless_the_chaos_caused_it() -> None:
    """A gang of 2 replicas of 2, needing 1: replica 0 whole, replica 1 with one of two
    bound is I9; the rival binding that member, or the chaos deleting its peer around the
    binds, excuses it; its peer bound later makes it whole."""
    gang = GangSpec("g", "koord", 4, 2, subgroup=2)
    steps = [(0.0, pod(f"g-{i}", gang="g", replica=str(i // 2))) for i in range(4)]
    seen = history(
        *steps,
        (1.0, pod("g-0", gang="g", replica="0", node=NODE)),
        (1.0, pod("g-1", gang="g", replica="0", node=NODE)),
        (1.1, pod("g-2", gang="g", replica="1", node="n1")),
    )
    (violation,) = partial_incarnations(books(gang), seen.pods, seen.events)
    assert violation.invariant == "I9"
    assert "replica(s) 1 partly bound (1: 1 of 2" in violation.what
    rival = books(gang)
    rival.rival_bound["g-2"] = 1.1
    assert judge(seen, rival) == []
    deleted = books(gang)
    deleted.chaos_deleted["uid-g-3"] = (1.5, False)
    assert judge(seen, deleted) == []
    seen._apply(pod("g-3", gang="g", replica="1", node="n1"), 5.0)
    assert judge(seen, books(gang)) == []


def test_a_replica_the_chaos_left_short_is_not_expected_bound() -> None:
    gang = GangSpec("g", "koord", 4, 2, subgroup=2)
    whole = [pod(f"g-{i}", gang="g", replica=str(i // 2)) for i in range(4)]
    expected, incomplete, _ = expectations(books(gang), pods_of(*whole))
    assert sorted(p.name for p in expected["g"]) == ["g-0", "g-1", "g-2", "g-3"]
    assert incomplete == []
    # g-3 deleted: replica 1 can never be whole; replica 0 still makes the minimum.
    expected, incomplete, _ = expectations(books(gang), pods_of(*whole[:3]))
    assert sorted(p.name for p in expected["g"]) == ["g-0", "g-1"]
    assert incomplete == ["g"]
    # g-1 and g-3 deleted: no replica is whole, the gang cannot reach its minimum.
    expected, incomplete, _ = expectations(books(gang), pods_of(whole[0], whole[2]))
    assert expected == {}
    assert incomplete == ["g"]


def test_half_the_plans_have_subgroups_and_their_pods_say_their_replica() -> None:
    plans = [make_plan(seed) for seed in range(40)]
    with_subgroups = [p for p in plans if any(g.subgroup for g in p.gangs)]
    assert 8 <= len(with_subgroups) <= 32
    for plan in with_subgroups:
        for gang in (g for g in plan.gangs if g.subgroup):
            assert gang.size % gang.subgroup == 0
            assert gang.min % gang.subgroup == 0
            assert gang.mode == "Strict"
            assert not gang.group
    plan = with_subgroups[0]
    gang = next(g for g in plan.gangs if g.subgroup)
    objects = [o for w in range(len(plan.waves)) for _, o in chaos.wave_objects(plan, w, NS, "s")]
    pods = [
        o
        for o in objects
        if o["kind"] == "Pod" and o["metadata"]["name"].startswith(gang.name + "-")
    ]
    replicas = Counter(o["metadata"]["labels"][chaos.REPLICA_LABEL] for o in pods)
    assert set(replicas.values()) == {gang.subgroup}
    policy = json.loads(chaos.subgroup_policy(gang))
    assert policy[0]["minSubGroups"] == gang.min // gang.subgroup


def test_a_running_gang_of_replicas_held_back_by_its_queue_is_not_expected_bound() -> None:
    """Seed 53014: a gang of replicas of 2 runs one replica; its next replica (2 CPUs) does
    not fit under the capability (3 CPUs, 2 held), though one of its members would: the
    scheduler takes replicas whole, so the checker must not expect it."""
    gang = GangSpec("g", "koord", 4, 2, subgroup=2, queue="cap")
    ledger = books(gang)
    ledger.capabilities["q"] = 3000
    members = [
        queued(pod(f"g-{i}", gang="g", replica=str(i // 2), node=NODE if i < 2 else ""), "q")
        for i in range(4)
    ]
    expected, _, no_room = expectations(ledger, pods_of(*members))
    assert expected == {}
    assert no_room == ["g"]
    ledger.capabilities["q"] = 4000
    expected, _, _ = expectations(ledger, pods_of(*members))
    assert sorted(p.name for p in expected["g"]) == ["g-2", "g-3"]


def test_a_gang_of_replicas_below_its_minimum_asks_its_queue_for_a_whole_replica() -> None:
    """Seed 11520: a gang of replicas of 2 (minimum 2) ran replica 0 until one of its members
    went with its node; below its minimum, it needs replica 1 whole (2 CPUs), not the one
    member it lacks (1 CPU), and the capability (2.5 CPUs, 1 held) has room for only one."""
    gang = GangSpec("g", "koord", 4, 2, subgroup=2, queue="cap")
    ledger = books(gang)
    ledger.capabilities["q"] = 2500
    members = [
        queued(pod("g-0", gang="g", replica="0", node=NODE), "q"),
        *(queued(pod(f"g-{i}", gang="g", replica="1"), "q") for i in (2, 3)),
    ]
    expected, _, no_room = expectations(ledger, pods_of(*members))
    assert expected == {}
    assert no_room == ["g"]
    ledger.capabilities["q"] = 4000
    expected, _, _ = expectations(ledger, pods_of(*members))
    assert sorted(p.name for p in expected["g"]) == ["g-2", "g-3"]


def claiming(obj: dict, *, made: bool) -> dict:
    """``obj`` claiming a GPU from a template; ``made``: the controller has made its claim."""
    spec = {
        **obj["spec"],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-1"}],
    }
    status = dict(obj["status"])
    if made:
        status["resourceClaimStatuses"] = [
            {"name": "gpu", "resourceClaimName": f"{obj['metadata']['name']}-gpu"}
        ]
    return {**obj, "spec": spec, "status": status}


def test_the_schedulers_wait_counts_from_when_a_gangs_claims_were_made() -> None:
    g, h = GangSpec("g", "koord", 2, 2), GangSpec("h", "koord", 2, 2)
    ledger = books(g, h)
    seen = observer()
    for name in ("g-0", "g-1"):
        seen._apply(claiming(pod(name, gang="g"), made=False), 1.0)
    for name in ("h-0", "h-1"):
        seen._apply(pod(name, gang="h"), 1.0)
    waited = chaos.SchedulerWait(since=5.0)

    def look(now: float) -> None:
        expected, _, _ = expectations(ledger, seen.pods)
        waited.look(expected, seen.pods, ledger, now=now)

    look(6.0)  # both gangs should be bound; g's claims are not made yet
    assert chaos.still_waiting(expectations(ledger, seen.pods)[0], since=5.0, now=6.0).endswith(
        "g (2 pending: g-0, g-1; newest created t=1.00; 2 without their claims yet); "
        "h (2 pending: h-0, h-1; newest created t=1.00)"
    )
    for name in ("h-0", "h-1"):
        seen._apply(pod(name, gang="h", node=NODE), 15.0)
    for name in ("g-0", "g-1"):
        seen._apply(claiming(pod(name, gang="g"), made=True), 20.0)
    look(21.0)
    for name in ("g-0", "g-1"):
        seen._apply(claiming(pod(name, gang="g", node="n1"), made=True), 22.0)
    look(23.0)
    # h waited on the scheduler from the fault's end to its bind; g from its claims' making.
    assert waited.finish(now=24.0) == 10.0
    assert waited.waits == {"h": 10.0, "g": 2.0}


def test_a_gang_still_waiting_at_the_end_counts_until_then() -> None:
    gang = GangSpec("g", "koord", 2, 2)
    ledger = books(gang)
    pending = pods_of(pod("g-0", gang="g"), pod("g-1", gang="g"))
    waited = chaos.SchedulerWait(since=5.0)
    waited.look(expectations(ledger, pending)[0], pending, ledger, now=5.5)
    assert waited.finish(now=30.0) == 25.0


def test_a_claim_the_controller_found_not_needed_counts_as_made() -> None:
    spec = claiming(pod("g-0", gang="g"), made=False)["spec"]
    assert not chaos._claims_made(spec, {})
    assert chaos._claims_made(spec, {"resourceClaimStatuses": [{"name": "gpu"}]})
    assert chaos._claims_made(
        spec, {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "g-0-gpu"}]}
    )


def test_a_gang_waiting_for_its_claims_or_a_peers_is_not_the_schedulers_to_bind() -> None:
    a = GangSpec("a", "koord", 2, 2, group=("a", "b"))
    b = GangSpec("b", "koord", 2, 2, group=("a", "b"))
    c = GangSpec("c", "koord", 2, 2)
    ledger = books(a, b, c)
    objs = [
        pod("a-0", gang="a"), pod("a-1", gang="a"),
        claiming(pod("b-0", gang="b"), made=False), claiming(pod("b-1", gang="b"), made=True),
        pod("c-0", gang="c"), pod("c-1", gang="c"),
    ]  # fmt: skip
    expected, _, _ = expectations(ledger, pods_of(*objs))
    assert sorted(expected) == ["a", "b", "c"]
    # b-0's claim is not made: b waits for the controller, and a for b (one GangGroup).
    assert sorted(chaos.made_ready(expected, ledger)) == ["c"]


def test_half_the_plans_have_preemptors_asking_more_than_the_rest_leaves() -> None:
    plans = [make_plan(seed) for seed in range(30)]
    with_preemptors = [p for p in plans if p.preemption]
    assert 7 <= len(with_preemptors) <= 23
    for plan in with_preemptors:
        surviving = (plan.nodes - plan.max_node_deletes) * chaos.NODE_CPU_M
        high = [g for g in plan.gangs if g.high]
        asked = sum(g.size * g.cpu_m for g in high)
        rest = sum(g.size * g.cpu_m for g in plan.gangs if not g.high)
        assert asked < surviving, "they fit once the rest has made room"
        # More than the cluster with the rest bound (but for rounding to whole pods).
        assert asked + rest > surviving - 8 * chaos.NODE_CPU_M // 2
        assert all(g.wave == len(plan.waves) - 1 and g.queue == "" for g in high)
        without = [g for g in plan.gangs if not g.high]
        assert without == [g for g in make_plan(plan.seed).gangs if not g.high]
    plan = with_preemptors[0]
    objects = [obj for wave in range(len(plan.waves))
               for _, obj in wave_objects(plan, wave, NS, NS) if obj["kind"] == "Pod"]  # fmt: skip
    classes = {o["metadata"]["name"].split("-")[0]: o["spec"].get("priorityClassName")
               for o in objects}  # fmt: skip
    assert classes["hi0"] == f"{NS}-high"
    assert {c for name, c in classes.items() if not name.startswith("hi")} == {None}


def test_a_victim_gang_left_below_its_minimum_is_a_violation_unless_the_chaos_caused_it() -> None:
    gang = GangSpec("g", "koord", 4, 2)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(4)]
    # Preemption took the two members above the minimum: 2 left, as promised.
    extras = history(*bound, (10.0, pod("g-3", gang="g", node=NODE, evicted=True)),
                     (10.1, pod("g-2", gang="g", node=NODE, evicted=True)))  # fmt: skip
    assert victims_below_minimum(books(gang), extras.pods) == []
    # Three taken: 1 of the minimum 2 left running.
    below = history(*bound, *((10.0, pod(f"g-{i}", gang="g", node=NODE, evicted=True))
                              for i in (1, 2, 3)))  # fmt: skip
    assert [v.invariant for v in victims_below_minimum(books(gang), below.pods)] == ["I10"]
    # The whole gang, one pass: nothing left.
    whole = history(*bound, *((10.0, pod(f"g-{i}", gang="g", node=NODE, evicted=True))
                              for i in range(4)))  # fmt: skip
    assert victims_below_minimum(books(gang), whole.pods) == []
    # A member the chaos deleted excuses it.
    excused = books(gang)
    excused.chaos_deleted["uid-g-0"] = (9.0, True)
    assert victims_below_minimum(excused, below.pods) == []


def test_a_victim_gang_is_counted_once_the_api_server_is_back_from_a_restart() -> None:
    """Seed 7741: the whole gang of 4 was marked, but the API server went as the marks
    landed: the observer saw one at once and the rest only at its relist, after the settle
    window. Counted once the API server is back, nothing is left."""
    gang = GangSpec("g", "koord", 4, 4)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(4)]
    late = history(*bound, (10.0, pod("g-0", gang="g", node=NODE, evicted=True)),
                   *((14.0, pod(f"g-{i}", gang="g", node=NODE, evicted=True))
                     for i in (1, 2, 3)))  # fmt: skip
    assert [v.invariant for v in victims_below_minimum(books(gang), late.pods)] == ["I10"]
    assert victims_below_minimum(books(gang), late.pods, outages=[(10.1, 13.5)]) == []
    # An outage well after the window excuses nothing.
    assert victims_below_minimum(books(gang), late.pods, outages=[(20.0, 21.0)]) != []


def test_a_victim_of_the_high_priority_is_read_from_the_pods_priority() -> None:
    high = {"gang": "hi0", "node": NODE, "priority": 1000}
    seen = history((1.0, pod("hi0-0", **high)), (2.0, pod("hi0-0", **high, evicted=True)))
    state = seen.pods["uid-hi0-0"]
    assert (state.priority, state.evicted_t) == (1000, 2.0)


def test_a_gang_group_with_room_for_each_gang_but_not_for_all_is_excused_whole() -> None:
    """Seed 7082: a GangGroup of gangs of 12, 2 and 12 pods and room for 23: the first gang
    alone fits, but the group binds whole or not at all, so none of it is expected."""
    a = GangSpec("a", "koord", 2, 2, group=("a", "b"))
    b = GangSpec("b", "koord", 2, 2, group=("a", "b"))
    node_cpu = chaos.NODE_CPU_M // 1000
    filler = pod("filler", node=NODE, cpu=str(node_cpu - 3))  # 3 cpu left on NODE
    objs = [pod(f"{g}-{i}", gang=g, cpu="1") for g in ("a", "b") for i in range(2)]
    expected, _, no_room = expectations(books(a, b, nodes=(NODE,)), pods_of(filler, *objs))
    assert expected == {}
    assert sorted(no_room) == ["a", "b"]
    # With room for all four, both are expected.
    roomy = pod("filler", node=NODE, cpu=str(node_cpu - 4))
    expected, _, no_room = expectations(books(a, b, nodes=(NODE,)), pods_of(roomy, *objs))
    assert sorted(expected) == ["a", "b"]
    assert no_room == []


def test_room_a_nonstrict_gang_ahead_in_the_queue_holds_is_not_expected_taken() -> None:
    """Seed 7767: a single pod's only room was where an older NonStrict gang, short of room
    for all its members, held one of them. The scheduler keeps such holds until the gang
    fits or times out, and lets them go only for a gang ahead of it in the queue."""
    holder = GangSpec("h", "koord", 2, 2, mode="NonStrict")
    node_cpu = chaos.NODE_CPU_M // 1000
    filler = pod("filler", node=NODE, cpu=str(node_cpu - 3))  # 3 cpu left on NODE
    held = [pod(f"h-{i}", gang="h", cpu="2") for i in range(2)]  # room for one of them

    def judged(single: dict, *, single_at: float) -> tuple[list[str], list[str]]:
        seen = history((0.0, filler), (1.0, held[0]), (1.0, held[1]), (single_at, single))
        expected, _, no_room = expectations(books(holder, nodes=(NODE,)), seen.pods)
        return sorted(expected), sorted(no_room)

    younger = judged(pod("s8", cpu="2"), single_at=2.0)
    assert younger == ([], ["h", "pod/s8"])
    older = judged(pod("s8", cpu="2"), single_at=0.5)  # ahead of the holder: its room
    assert older == (["pod/s8"], ["h"])
    urgent = judged(pod("s8", cpu="2", priority=1000), single_at=2.0)  # ahead by priority
    assert urgent == (["pod/s8"], ["h"])
    small = judged(pod("s8", cpu="1"), single_at=2.0)  # fits beside the hold
    assert small == (["pod/s8"], ["h"])


def test_a_gang_cut_short_by_a_leader_fault_and_ended_by_its_node_going_is_excused() -> None:
    """Seed 7779: the leader was killed after 2 of a gang's 3 binds, and the members' node
    was deleted (its pods with it) before a scheduler could complete the gang."""
    gang = GangSpec("g", "koord", 3, 3)
    seen = history(
        (0.0, pod("g-0", gang="g")),
        (0.0, pod("g-1", gang="g")),
        (0.0, pod("g-2", gang="g")),
        (1.0, pod("g-0", gang="g", node=NODE)),
        (1.1, pod("g-1", gang="g", node=NODE)),
        (4.1, pod("g-0", gang="g", node=NODE, deleting=True)),
        (4.1, pod("g-1", gang="g", node=NODE, deleting=True)),
    )

    def judged(*, fault: tuple[float, float] | None, node_gone: float | None) -> list[str]:
        ledger = books(gang)
        if node_gone is not None:
            ledger.deleted_nodes[NODE] = node_gone
        faults = [fault] if fault else []
        found = partial_incarnations(
            ledger, seen.pods, seen.events, leader_faults=faults, lease_seconds=3
        )
        return [v.invariant for v in found]

    assert judged(fault=(1.05, 1.2), node_gone=4.0) == []  # no scheduler could act by then
    assert judged(fault=None, node_gone=4.0) == ["I1"]  # no leader fault: the binder's
    assert judged(fault=(1.05, 1.2), node_gone=None) == ["I1"]  # ended otherwise
    assert judged(fault=(1.05, 1.2), node_gone=9.0) == ["I1"]  # a standby had had time
    assert judged(fault=(20.0, 21.0), node_gone=4.0) == ["I1"]  # the fault came after


def test_half_the_plans_consolidate_with_movable_gangs_made_by_statefulsets() -> None:
    plans = [make_plan(seed) for seed in range(40)]
    consolidating = [p for p in plans if p.consolidation]
    assert 8 <= len(consolidating) <= 30
    for plan in consolidating:
        movable = [g for g in plan.gangs if g.movable]
        assert movable, "a run consolidates only with something to move"
        for gang in movable:
            assert gang.kind in ("koord", "podgroup")
            assert gang.min < gang.size, "a member above its minimum, for a move to take"
            assert not any((gang.group, gang.subgroup, gang.gpus, gang.high, gang.total))
        (whole,) = [g for g in plan.gangs if g.name == "wn0"]
        assert whole.cpu_m > chaos.NODE_CPU_M // 2, "most of a node: room only moves make"
    assert {g.cpu_m for p in consolidating for g in p.gangs if g.name == "wn0"} > {
        chaos.NODE_CPU_M}, "less than a whole node in some runs"  # fmt: skip
    plan = consolidating[0]
    gang = next(g for g in plan.gangs if g.movable)
    made = [obj for _, obj in wave_objects(plan, gang.wave, NS, NS)]
    sets = {o["metadata"]["name"]: o for o in made if o["kind"] == "StatefulSet"}
    template = sets[gang.name]["spec"]["template"]
    assert sets[gang.name]["spec"]["replicas"] == gang.size
    assert template["metadata"]["annotations"][names.MOVABLE] == "true"
    assert not any(o["metadata"]["name"].startswith(f"{gang.name}-") for o in made
                   if o["kind"] == "Pod"), "its pods are the StatefulSet's"  # fmt: skip


def test_a_gang_a_move_leaves_below_its_minimum_is_a_violation() -> None:
    gang = GangSpec("g", "koord", 3, 2, movable=True)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(3)]
    one = history(*bound, (10.0, pod("g-2", gang="g", node=NODE, moved=True)))
    assert victims_below_minimum(books(gang), one.pods) == [], "the member above the minimum"
    assert one.pods["uid-g-2"].moved
    two = history(*bound, *((10.0, pod(f"g-{i}", gang="g", node=NODE, moved=True))
                            for i in (1, 2)))  # fmt: skip
    assert [v.invariant for v in victims_below_minimum(books(gang), two.pods)] == ["I10"]


def test_a_victim_gang_a_new_leader_finishes_is_counted_once_it_could_have() -> None:
    """Seed 8035: the leader that chose a whole gang lost its Lease with part of it marked;
    the next leader marks the rest once the first marks are RESEND_SECONDS (30) old
    (finish-evictions). Counted after that, nothing is left; a takeover long before
    excuses nothing."""
    gang = GangSpec("g", "koord", 4, 4)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(4)]
    finished = history(*bound, (10.0, pod("g-0", gang="g", node=NODE, evicted=True)),
                       *((40.5, pod(f"g-{i}", gang="g", node=NODE, evicted=True))
                         for i in (1, 2, 3)))  # fmt: skip
    assert [v.invariant for v in victims_below_minimum(books(gang), finished.pods)] == ["I10"]
    taken_over = victims_below_minimum(
        books(gang), finished.pods, takeovers=[(10.5, 11.0)], takeover_seconds=5.0
    )
    assert taken_over == []
    long_before = victims_below_minimum(
        books(gang), finished.pods, takeovers=[(1.0, 2.0)], takeover_seconds=5.0
    )
    assert [v.invariant for v in long_before] == ["I10"]


def test_a_victim_set_a_kill_cut_short_is_excused_though_its_last_mark_is_seen_after_it() -> None:
    """Seed 9056: the leader was killed while marking a whole gang; the observer saw the
    set's last mark 12 ms after the kill's end. The next leader evicted the rest at t=28.5:
    the kill overlaps the set (from its first mark), so the count waits for it."""
    gang = GangSpec("g", "koord", 4, 4)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(4)]
    cut = history(*bound, (19.05, pod("g-0", gang="g", node=NODE, evicted=True)),
                  (19.29, pod("g-1", gang="g", node=NODE, evicted=True)),
                  *((28.5, pod(f"g-{i}", gang="g", node=NODE, evicted=True))
                    for i in (2, 3)))  # fmt: skip
    assert (
        victims_below_minimum(
            books(gang), cut.pods, takeovers=[(19.039, 19.278)], takeover_seconds=5.0
        )
        == []
    )
    # Seeds 9076, 9114: even the set's first mark was seen after the kill's end (0.15 s).
    assert (
        victims_below_minimum(books(gang), cut.pods, takeovers=[(18.7, 18.9)], takeover_seconds=5.0)
        == []
    )
    never = history(*bound, (19.05, pod("g-0", gang="g", node=NODE, evicted=True)),
                    (19.29, pod("g-1", gang="g", node=NODE, evicted=True)))  # fmt: skip
    assert [v.invariant for v in victims_below_minimum(
        books(gang), never.pods, takeovers=[(19.039, 19.278)], takeover_seconds=5.0
    )] == ["I10"], "a set nobody finishes is still found"  # fmt: skip


def test_a_replica_cut_by_a_leader_fault_and_left_short_by_the_chaos_is_excused() -> None:
    """Seed 8608: the scheduler was killed between a gang's binds, replica 1 with one of
    its two members bound; the chaos deleted that member 3 s later, before a restarted
    scheduler's first pass: the replica can never be whole again."""
    gang = GangSpec("g", "koord", 4, 2, subgroup=2)
    steps = [(0.0, pod(f"g-{i}", gang="g", replica=str(i // 2))) for i in range(4)]
    seen = history(
        *steps,
        (1.0, pod("g-0", gang="g", replica="0", node=NODE)),
        (1.0, pod("g-1", gang="g", replica="0", node=NODE)),
        (1.1, pod("g-2", gang="g", replica="1", node="n1")),
        (4.1, pod("g-2", gang="g", replica="1", node="n1", deleting=True)),
    )

    def judged(*, fault: tuple[float, float] | None, deleted_at: float) -> list[str]:
        ledger = books(gang)
        ledger.chaos_deleted["uid-g-2"] = (deleted_at, True)
        faults = [fault] if fault else []
        found = partial_incarnations(
            ledger, seen.pods, seen.events, leader_faults=faults, lease_seconds=3
        )
        return [v.invariant for v in found]

    assert judged(fault=(1.05, 1.2), deleted_at=4.0) == []
    assert judged(fault=None, deleted_at=4.0) == ["I9"], "no leader fault: the binder's"
    assert judged(fault=(1.05, 1.2), deleted_at=9.0) == ["I9"], "a scheduler had had time"


def test_a_gang_cut_by_a_leader_fault_and_left_below_its_minimum_by_the_chaos_is_excused() -> None:
    """Seed 12172: the scheduler was killed between the binds of a gang of 24 (23 bound);
    the chaos deleted a bound member 2 s later, before the restarted scheduler's first pass:
    with 23 members alive the gang can never have its 24, and no scheduler may bind the last
    pending one alone. With a spare member pending, it could: then it is still I1."""

    def judged(*, size: int, fault: tuple[float, float] | None, deleted_at: float) -> list[str]:
        gang = GangSpec("g", "koord", size, 4)
        steps = [(0.0, pod(f"g-{i}", gang="g")) for i in range(size)]
        seen = history(
            *steps,
            *((1.0 + i / 10, pod(f"g-{i}", gang="g", node=NODE)) for i in range(3)),
            (deleted_at + 0.1, pod("g-2", gang="g", node=NODE, deleting=True)),
        )
        ledger = books(gang)
        ledger.chaos_deleted["uid-g-2"] = (deleted_at, True)
        faults = [fault] if fault else []
        found = partial_incarnations(
            ledger, seen.pods, seen.events, leader_faults=faults, lease_seconds=3
        )
        return [v.invariant for v in found]

    assert judged(size=4, fault=(1.25, 1.4), deleted_at=4.0) == []
    assert judged(size=4, fault=None, deleted_at=4.0) == ["I1"], "no leader fault: the binder's"
    assert judged(size=4, fault=(1.25, 1.4), deleted_at=9.0) == ["I1"], "a scheduler had time"
    assert judged(size=5, fault=(1.25, 1.4), deleted_at=4.0) == ["I1"], "4 alive: completable"


def test_a_run_waits_for_a_victim_set_left_short_until_its_marks_could_be_finished() -> None:
    """A whole gang's set cut short by a leader fault: the run keeps watching until the next
    leader could have finished it (RESEND_SECONDS after its marks), not a set that took
    only members above the minimum."""
    gang = GangSpec("g", "koord", 4, 4)
    bound = [(float(i), pod(f"g-{i}", gang="g", node=NODE)) for i in range(4)]
    cut = history(*bound, (10.0, pod("g-0", gang="g", node=NODE, evicted=True)))
    assert victim_sets_short(books(gang), cut.pods, now=12.0) == ["g"]
    assert victim_sets_short(books(gang), cut.pods, now=10.0 + chaos.RESEND_SECONDS + 5) == []
    extras = GangSpec("g", "koord", 4, 3)
    assert victim_sets_short(books(extras), cut.pods, now=12.5) == [], "3 left of minimum 3"
    assert victim_sets_short(books(extras), cut.pods, now=11.0) == ["g"], "a set being sent"
