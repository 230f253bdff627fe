"""Who may use a queue: a Queue's ``gang-scheduler.io/namespace-selector`` admits the gangs
of the namespaces it matches (kubectl's selector syntax); the others wait, told which queue
and which selector, and are never moved to another queue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.codecs.queues import queue_from_dict
from scheduler.codecs.selectors import parse_selector
from scheduler.core.filtering import selector_matches
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.queues import Queue
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map, events


def queue(name: str, selector: str | None = None, **spec: object) -> Queue:
    meta: dict = {"name": name, "uid": f"uid-{name}"}
    if selector is not None:
        meta["annotations"] = {names.QUEUE_NAMESPACE_SELECTOR: selector}
    return queue_from_dict({"metadata": meta, "spec": spec})


def gang(name: str, *, namespace: str, queue_name: str) -> list:
    return gang_pods(
        name, 1, gang=name, min_available=1, namespace=namespace, labels={names.QUEUE: queue_name}
    )


def scheduled(*queues: Queue, pods: list, namespaces: dict[str, dict[str, str]]):
    snap = snapshot([node("n0"), node("n1")], pods)
    snap = replace(snap, queues={q.name: q for q in queues}, namespace_labels=namespaces)
    return schedule(snap, now=T0)


TEAMS = {"ml-a": {"team": "a"}, "ml-b": {"team": "b"}, "sandbox": {}}


def test_a_gang_from_a_namespace_the_queue_selects_binds_and_another_waits_saying_why() -> None:
    pods = gang("mine", namespace="ml-a", queue_name="team-a")
    pods += gang("theirs", namespace="ml-b", queue_name="team-a")
    result = scheduled(queue("team-a", "team=a"), pods=pods, namespaces=TEAMS)
    assert bind_map(result) == {"mine-0": "n0"}
    (message,) = set(events(result, "NamespaceNotAllowed"))
    assert message == (
        "gang ml-b/theirs waits: queue 'team-a' admits gangs only from namespaces matching "
        "'team=a' (gang-scheduler.io/namespace-selector); namespace 'ml-b' (labels: team=b) "
        "does not match: label the namespace, or name a queue it may use"
    )
    (state,) = (s for k, s in result.memory.items() if k.name == "theirs")
    assert state.condition is not None
    assert state.condition[2] == message


def test_a_queue_without_a_selector_is_open_to_every_namespace() -> None:
    pods = gang("g", namespace="sandbox", queue_name="open")
    assert bind_map(scheduled(queue("open"), pods=pods, namespaces=TEAMS)) == {"g-0": "n0"}


def test_a_parents_selector_holds_for_its_children() -> None:
    pods = gang("g", namespace="ml-b", queue_name="child")
    result = scheduled(
        queue("research", "team in (a)"),
        queue("child", parent="research"),
        pods=pods,
        namespaces=TEAMS,
    )
    assert bind_map(result) == {}
    (message,) = set(events(result, "NamespaceNotAllowed"))
    assert "queue 'research', an ancestor of queue 'child', admits gangs only" in message


def test_a_gang_held_out_is_not_moved_to_the_default_queue() -> None:
    pods = gang("g", namespace="sandbox", queue_name="team-a")
    result = scheduled(queue("team-a", "team=a"), queue("default"), pods=pods, namespaces=TEAMS)
    assert bind_map(result) == {}
    assert events(result, "NamespaceNotAllowed")


def test_a_malformed_selector_makes_the_queue_invalid_and_says_the_syntax() -> None:
    bad = queue("team-a", "team in a")
    assert bad.errors == (
        "annotation gang-scheduler.io/namespace-selector: 'team in' needs its values in "
        "brackets, e.g. (a,b); write a label selector as kubectl takes it, requirements "
        'separated by commas: "team=a", "team!=b", "team in (a,b)", "team notin (c)", '
        '"team", "!team"',
    )
    pods = gang("g", namespace="ml-a", queue_name="team-a")
    result = scheduled(bad, pods=pods, namespaces=TEAMS)
    assert bind_map(result) == {}  # closed, not open to all, while the selector is wrong
    said = events(result, "InvalidQueue")  # to the gang, and on the Queue for its owner
    assert said
    assert all("namespace-selector: 'team in' needs its values" in m for m in said)


def test_labelling_the_namespace_lets_its_waiting_gang_go_at_the_next_pass() -> None:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("team-a", "team=a"))
    for n in (node("n0"), node("n1")):
        cache.upsert_node(n)
    cache.upsert_namespace("ml-x", {})
    for p in gang("g", namespace="ml-x", queue_name="team-a"):
        cache.upsert_pod(p)
    first = schedule(cache.snapshot(now=T0), now=T0)
    assert bind_map(first) == {}
    cache.remember(dict(first.memory))
    cache.upsert_namespace("ml-x", {"team": "a"})
    assert cache.gangs.everything  # a change that may let any waiting gang go
    later = T0 + 1
    assert bind_map(schedule(cache.snapshot(now=later), now=later)) == {"g-0": "n0"}


def test_a_namespace_seen_after_its_pods_is_looked_at_again() -> None:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("team-a", "team=a"))
    cache.gangs.everything = False
    cache.upsert_namespace("ml-new", {"team": "a"})
    assert cache.gangs.everything


@pytest.mark.parametrize(
    ("written", "labels", "admitted"),
    [
        ("team=a", {"team": "a"}, True),
        ("team==a", {"team": "b"}, False),
        ("team!=a", {}, True),  # no label is not equal to a, as in Kubernetes
        ("team in (a,b)", {"team": "b"}, True),
        ("team notin (a, b)", {"team": "c"}, True),
        ("team", {"team": ""}, True),
        ("!team", {"team": "a"}, False),
        ("team=a,tier", {"team": "a"}, False),
        ("size>3", {"size": "4"}, True),
        ("", {}, True),  # the empty selector selects everything
        ("team in ()", {"team": ""}, True),  # an empty place is the empty value
        ("team in (a,,b)", {"team": ""}, True),
    ],
)
def test_selectors_match_as_kubernetes_reads_them(
    written: str, labels: dict[str, str], admitted: bool
) -> None:
    selector, error = parse_selector(written)
    assert error == ""
    assert selector_matches(selector, labels) is admitted


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("team=a,", "ends with ','"),
        ("team in (a b)", "where ',' or ')' belongs"),
        ("team in (a", "not closed"),
        ("=a", "a key is missing"),
        ("team=a=b", "where a ',' was expected"),
        ("!team=a", "takes no operator"),
        ("bad key=a", "is no operator"),
        ("-team=a", "is not a label key"),
        ("Team.IO/x=a", "prefix that is not a DNS subdomain"),
        ("team=" + "x" * 64, "is not a label value"),
        ("size>big", "needs a whole number"),
        ("team\x00=a", "is not a label key"),
    ],
)
def test_a_malformed_selector_says_what_is_wrong(written: str, why: str) -> None:
    _, error = parse_selector(written)
    assert why in error


def test_a_selector_changed_to_match_lets_the_waiting_gang_go_at_the_next_pass() -> None:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("team-a", "team=a"))
    cache.upsert_node(node("n0"))
    cache.upsert_namespace("ml-b", {"team": "b"})
    for p in gang("g", namespace="ml-b", queue_name="team-a"):
        cache.upsert_pod(p)
    first = schedule(cache.snapshot(now=T0), now=T0)
    assert bind_map(first) == {}
    cache.remember(dict(first.memory))
    cache.upsert_queue(queue("team-a", "team in (a,b)"))
    later = T0 + 1
    assert bind_map(schedule(cache.snapshot(now=later), now=later)) == {"g-0": "n0"}
