"""The fewest victims, and how far from it a choice may be: where taking victims in order
(lowest priority, fewest pods, youngest) and giving back those not needed leaves more than
needed, the search over choices of victims finds fewer; beyond what it can weigh it says
how far from the fewest its choice may be. It never takes a higher priority to save
victims: kube-scheduler weighs the highest victim priority before their number."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from hypothesis import event, given, settings

from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.core.solvers.victims import EXACT_UNITS
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.config import Config
from scheduler.model.pods import GangKey, LabelSelector, Pod
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import evicted
from tests.unit.test_queue_sharing import in_queue, with_queues
from tests.unit.test_queues import queue
from tests.unit.test_victims_minimal import crowded


def _single(name: str, *, on: str, cpu: str, priority: int, created: float) -> Pod:
    return pod(name, cpu=cpu, scheduler="other", node_name=on, phase="Running",
               priority=priority, created=created)  # fmt: skip


def _four_small_and_one_big(*, small: int = 10, big: int = 10) -> tuple[list, list[Pod]]:
    """n0 (4 cpu) holds four young 1-cpu pods, n1 (4 cpu) one old 4-cpu pod: taken in
    order, the four young ones go first, and each is needed once the others are gone."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    pods = [_single(f"small-{i}", on="n0", cpu="1", priority=small, created=T0 - 10)
            for i in range(4)]  # fmt: skip
    pods.append(_single("big", on="n1", cpu="4", priority=big, created=T0 - 500))
    return nodes, pods


def test_one_big_pod_goes_rather_than_four_small_ones_of_the_same_priority() -> None:
    nodes, running = _four_small_and_one_big()
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4", created=T0)
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    assert evicted(result) == ["big"]
    assert {n.pod.name: n.node for n in result.nominations} == {"high-0": "n1"}
    [choice] = result.victim_choices
    assert (choice.action, choice.victims, choice.fewest_possible) == ("preempt", 1, 1)


def test_four_low_pods_go_rather_than_one_of_higher_priority() -> None:
    nodes, running = _four_small_and_one_big(small=10, big=50)
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4", created=T0)
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    assert evicted(result) == [f"small-{i}" for i in range(4)]
    [choice] = result.victim_choices
    assert choice.above_fewest == 0, "the fewest at no higher priority than needed"


def test_reclaim_takes_the_one_big_pod_too() -> None:
    nodes, running = _four_small_and_one_big()
    ours = [replace(p, scheduler_name="gang-scheduler", labels={**p.labels, **in_queue("qa")})
            for p in running]  # fmt: skip
    wants = gang_pods("claim", 1, gang="claim", min_available=1, cpu="4",
                      labels=in_queue("qb"), created=T0)  # fmt: skip
    snap = with_queues(
        snapshot(nodes, [*ours, *wants]),
        queue("qa", weight=1, reclaimable=True),
        queue("qb", weight=1, reclaimable=True),
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == ["big"]
    [choice] = result.victim_choices
    assert (choice.action, choice.victims, choice.fewest_possible) == ("reclaim", 1, 1)


def test_among_more_candidates_than_it_weighs_the_search_still_finds_the_one_big_pod() -> None:
    nodes = [node("n0", cpu="16"), node("n1", cpu="4")]
    small = [_single(f"small-{i}", on="n0", cpu="1", priority=10, created=T0 - 10)
             for i in range(16)]  # fmt: skip
    big = _single("big", on="n1", cpu="4", priority=10, created=T0 - 500)
    assert len(small) + 1 > EXACT_UNITS
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4", created=T0)
    result = schedule(snapshot(nodes, [*small, big, *wants]), now=T0)
    assert evicted(result) == ["big"]
    assert result.victim_choices[0].above_fewest == 0


def test_with_more_candidates_than_it_weighs_it_says_how_far_from_the_fewest_it_may_be() -> None:
    # Thirteen 4-cpu nodes with three 1-cpu pods each: 13 cpu free in all, none where a
    # 3-cpu pod fits. Two victims on one node make room; no bound from the free room alone
    # says one would not.
    nodes = [node(f"n{i:02}", cpu="4") for i in range(13)]
    running = [_single(f"r{i:02}-{j}", on=f"n{i:02}", cpu="1", priority=10, created=T0 - i - j)
               for i in range(13) for j in range(3)]  # fmt: skip
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="3", created=T0)
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    assert len(evicted(result)) == 2
    [choice] = result.victim_choices
    assert (choice.victims, choice.fewest_possible) == (2, 1)
    said = [e.message for e in result.events if e.reason == "Preempting"]
    assert said
    assert all("as few as 1 might have made room" in m for m in said), said
    lines = explain(snapshot(nodes, [*running, *wants]), GangKey("default", "high"), now=T0,
                    config=Config())  # fmt: skip
    assert any("as few as 1 might make room" in line for line in lines), lines


def test_a_proven_choice_says_nothing_of_the_fewest() -> None:
    nodes, running = _four_small_and_one_big()
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4", created=T0)
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    said = [e.message for e in result.events if e.reason == "Preempting"]
    assert said
    assert not any("might have made room" in m for m in said)


def _choices(bound: list[Pod], *, below: int, top: int) -> list[set[str]]:
    """Every set of victims a preemptor may take: of each running gang under ``below``
    (and at most ``top``), nothing, any of its members above its minimum (the youngest),
    or all of it."""
    per_gang: list[list[set[str]]] = []
    prefixes = sorted({p.ref.name.rsplit("-", 1)[0] for p in bound})
    for prefix in prefixes:
        members = sorted((p for p in bound if p.ref.name.rsplit("-", 1)[0] == prefix),
                         key=lambda p: (-p.created, p.ref))  # fmt: skip
        options: list[set[str]] = [set()]
        priority = members[0].priority or 0
        if priority < below and priority <= top:
            extra = members[: len(members) - members[0].gang.min_available]  # type: ignore[union-attr]
            for mask in range(1, 1 << len(extra)):
                options.append({p.ref.name for i, p in enumerate(extra) if mask >> i & 1})
            options.append({p.ref.name for p in members})
        per_gang.append(options)
    return [set().union(*combo) for combo in product(*per_gang)]


@settings(max_examples=150, deadline=None)
@given(crowded())
def test_no_fewer_victims_at_no_higher_priority_would_have_let_the_gang_bind(
    case: tuple[list, list[Pod], list[Pod]],
) -> None:
    nodes, bound, waiting = case
    result = schedule(snapshot(nodes, [*bound, *waiting]), now=T0)
    gone = {e.pod.name for e in result.evictions}
    if not gone:
        event("no preemption")
        return
    [choice] = result.victim_choices
    assert choice.victims == len(gone)
    top = max(p.priority or 0 for p in bound if p.ref.name in gone)
    below = waiting[0].priority or 0
    smaller = [c for c in _choices(bound, below=below, top=top) if c and len(c) < len(gone)]
    if len(smaller) > 256:
        event("too many choices to check")
        return
    event(f"victims {min(len(gone), 4)}, above the fewest said {choice.above_fewest}")
    for victims in smaller:
        left = [p for p in bound if p.ref.name not in victims]
        after = schedule(snapshot(nodes, [*left, *waiting]), now=T0)
        fits = set(bind_map(after)) >= {p.ref.name for p in waiting}
        assert not fits or choice.fewest_possible <= len(victims), (
            f"{sorted(victims)} would have made room: fewer than the {len(gone)} taken, and "
            f"the choice claimed no fewer than {choice.fewest_possible} could"
        )


def test_a_gang_of_whole_node_members_preempts_where_its_victims_are_scattered_thin() -> None:
    """100 nodes of 8 cpu, each full of 1-cpu pods whose ages go round the nodes: taken
    lowest priority, fewest pods and youngest first, the 64 victims tried are one on each
    of 64 nodes and free none. Node by node, 4 nodes are freed whole."""
    nodes = [node(f"n{i:03}", cpu="8") for i in range(100)]
    running = [_single(f"r{i:03}-{j}", on=f"n{i:03}", cpu="1", priority=10,
                       created=T0 - 1000 + 100 * j + i)
               for i in range(100) for j in range(8)]  # fmt: skip
    wants = gang_pods("high", 4, gang="high", min_available=4, priority=100, cpu="8", created=T0)
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    gone = evicted(result)
    assert len(gone) == 32
    assert len({name.split("-")[0] for name in gone}) == 4, "four nodes emptied, whole"
    assert sorted(n.node for n in result.nominations) == sorted(
        {name.split("-")[0].replace("r", "n") for name in gone}
    )
    [choice] = result.victim_choices
    assert choice.above_fewest == 0


def test_kai_1565_shape_a_48_gpu_gang_evicts_48_gpus_not_the_cluster() -> None:
    """kai-scheduler/KAI-Scheduler#1565's shape: a 48-GPU request on 8-GPU nodes full of
    lower-priority work evicted 376 GPUs. Here 64 full nodes: 4 hold one 8-GPU pod each
    (the oldest), 60 hold four 2-GPU pods whose ages go round the nodes; a gang of six
    8-GPU pods evicts the 4 big pods and empties 2 more nodes: 48 GPUs, 12 victims."""
    nodes = [node(f"n{i:02}", cpu="64", gpu=8) for i in range(64)]
    big = [pod(f"big{i}", gpu=8, cpu="1", scheduler="other", node_name=f"n{i:02}",
               phase="Running", priority=10, created=T0 - 5000)
           for i in range(4)]  # fmt: skip
    small = [pod(f"s{i:02}-{j}", gpu=2, cpu="1", scheduler="other", node_name=f"n{i:02}",
                 phase="Running", priority=10, created=T0 - 1000 + 100 * j + i)
             for i in range(4, 64) for j in range(4)]  # fmt: skip
    wants = gang_pods("train", 6, gang="train", min_available=6, priority=100, gpu=8, cpu="1",
                      created=T0)  # fmt: skip
    result = schedule(snapshot(nodes, [*big, *small, *wants]), now=T0)
    by_name = {p.ref.name: p for p in [*big, *small]}
    gone = evicted(result)
    assert sum(by_name[n].requests["nvidia.com/gpu"] for n in gone) == 48
    assert len(gone) == 12
    assert {n for n in gone if n.startswith("big")} == {f"big{i}" for i in range(4)}


def _bare(name: str, *, on: str, cpu: str, priority: int, created: float) -> Pod:
    return pod(name, cpu=cpu, memory="0", scheduler="other", node_name=on, phase="Running",
               priority=priority, created=created)  # fmt: skip


def test_a_node_over_its_allocatable_does_not_raise_the_bound_above_the_fewest() -> None:
    """n2 holds more than it has (its pod above the preemptor): counted below zero, its
    free room would make the lacking room 8 cpu and the two 2-cpu pods look the fewest."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="4"), node("n2", cpu="4")]
    running = [
        _bare("small-0", on="n0", cpu="2", priority=10, created=T0 - 10),
        _bare("small-1", on="n0", cpu="2", priority=10, created=T0 - 11),
        _bare("big", on="n1", cpu="4", priority=10, created=T0 - 500),
        _bare("over", on="n2", cpu="8", priority=1000, created=T0 - 500),
    ]
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4",
                      memory="0", created=T0)  # fmt: skip
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    assert evicted(result) == ["big"]
    assert result.victim_choices[0].fewest_possible == 1


def test_a_gang_that_needs_any_two_of_three_is_bounded_by_its_two_smallest() -> None:
    """min 2 of a 4-cpu and two 1-cpu members: the two small ones fit once the 2-cpu pod
    on n1 goes; bounded by its first two members (5 cpu), two 1-cpu victims looked the
    fewest."""
    nodes = [node("n0", cpu="2"), node("n1", cpu="2")]
    running = [
        _bare("x0a", on="n0", cpu="1", priority=10, created=T0 - 10),
        _bare("x0b", on="n0", cpu="1", priority=10, created=T0 - 11),
        _bare("y1", on="n1", cpu="2", priority=10, created=T0 - 500),
    ]
    wants = [
        pod(f"g-{name}", cpu=cpu, memory="0", gang="g", min_available=2, total=3, priority=100,
            created=created)
        for name, cpu, created in (("big", "4", T0 - 50), ("s1", "1", T0), ("s2", "1", T0))
    ]  # fmt: skip
    result = schedule(snapshot(nodes, [*running, *wants]), now=T0)
    assert evicted(result) == ["y1"]


def test_fewer_victims_never_break_a_budget_the_first_choice_kept() -> None:
    """Budgets A and B allow no disruption; p (4 cpu) counts against both, a1 against A
    only. Evicting a1 and x breaks A; evicting p alone, one victim fewer, would break A
    and B: kube-scheduler weighs broken budgets before the number of victims."""
    budgets = tuple(
        DisruptionBudget(namespace="default", name=name,
                         selector=LabelSelector(match_labels=((key, "1"),)),
                         disruptions_allowed=0)
        for name, key in (("A", "a"), ("B", "b"))
    )  # fmt: skip
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    p = replace(_bare("p", on="n0", cpu="4", priority=10, created=T0 - 500),
                labels={"a": "1", "b": "1"})  # fmt: skip
    a1 = replace(_bare("a1", on="n1", cpu="2", priority=10, created=T0 - 20), labels={"a": "1"})
    x = _bare("x", on="n1", cpu="2", priority=10, created=T0 - 10)
    wants = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="4",
                      memory="0", created=T0)  # fmt: skip
    snap = replace(snapshot(nodes, [p, a1, x, *wants]), budgets=budgets)
    result = schedule(snap, now=T0)
    assert evicted(result) == ["a1", "x"]
