"""One scheduler answering several spec.schedulerName values (--scheduler-name given more
than once): operators that hard-code scheduler-plugins-scheduler or volcano work unchanged."""

from __future__ import annotations

from scheduler.cache.cluster import ClusterCache
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.decisions import NORMAL, Event, ObjectRef
from scheduler.shell.recording import EventRecorder
from tests.unit.builders import SCHEDULER, T0, node, pod, snapshot

CONFIG = Config(scheduler_name=SCHEDULER, aliases=("scheduler-plugins-scheduler", "volcano"))


def test_a_gang_whose_members_ask_for_an_alias_binds_whole() -> None:
    pods = [
        pod(f"ray-{i}", gang="ray", min_available=3, scheduler="scheduler-plugins-scheduler")
        for i in range(3)
    ]
    result = schedule(snapshot([node("n0")], pods), now=T0, config=CONFIG)
    assert sorted(b.pod.name for g in result.bindings for b in g.bindings) == [
        "ray-0",
        "ray-1",
        "ray-2",
    ]


def test_pods_of_a_name_not_given_are_left_alone() -> None:
    pods = [pod("other", scheduler="default-scheduler"), pod("ours", scheduler="volcano")]
    result = schedule(snapshot([node("n0")], pods), now=T0, config=CONFIG)
    assert [b.pod.name for g in result.bindings for b in g.bindings] == ["ours"]


def test_without_aliases_a_pod_for_volcano_is_not_ours() -> None:
    result = schedule(
        snapshot([node("n0")], [pod("v", scheduler="volcano")]), now=T0, config=Config()
    )
    assert result.bindings == ()


def test_the_cache_counts_pods_of_every_name_as_ours_and_says_which_name_each_asked_for() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER, aliases=CONFIG.aliases)
    cache.upsert_node(node("n0"))
    cache.upsert_pod(pod("a", scheduler="volcano"))
    cache.upsert_pod(pod("b", scheduler=SCHEDULER))
    cache.upsert_pod(pod("c", scheduler="default-scheduler"))
    assert cache.waiting == 2
    assert cache.scheduler_name_of("uid-default-a") == "volcano"
    assert cache.scheduler_name_of("uid-default-b") == SCHEDULER
    assert cache.scheduler_name_of("uid-default-c") is None


def test_an_event_about_a_pod_comes_from_the_name_it_asked_for() -> None:
    """kube-scheduler reports each profile's Events under its own schedulerName."""
    asked = {"uid-a": "volcano"}
    recorder = EventRecorder(
        None,  # type: ignore[arg-type]  # body() sends nothing
        component=SCHEDULER,
        component_of=lambda ref: asked.get(ref.uid),
    )
    for_alias = recorder.body(
        Event(ObjectRef("Pod", "ml", "a", "uid-a"), NORMAL, "Scheduled", "assigned"), now=T0
    )
    for_primary = recorder.body(
        Event(ObjectRef("Pod", "ml", "b", "uid-b"), NORMAL, "Scheduled", "assigned"), now=T0
    )
    assert for_alias["reportingComponent"] == for_alias["source"]["component"] == "volcano"
    assert for_primary["reportingComponent"] == SCHEDULER
