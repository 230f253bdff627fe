"""What the cache remembers of the watches' deliveries stays bounded: stamps only while a
LIST of their kind is in flight, and only those that LIST can use. The 2-hour soak's RSS grew
174 -> 290 MiB while the stamps of every pod ever deleted were kept."""

from __future__ import annotations

from scheduler.cache.cluster import ClusterCache
from scheduler.cache.deliveries import Deliveries
from tests.unit.builders import SCHEDULER, pod


def _churn(cache: ClusterCache, count: int, *, prefix: str = "p") -> None:
    for i in range(count):
        member = pod(f"{prefix}{i}", gang=f"{prefix}{i}")
        cache.upsert_pod(member)
        cache.remove_pod(member.ref.uid)


def test_a_cache_churning_pods_with_no_list_in_flight_keeps_no_stamps() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    _churn(cache, 5_000)
    assert cache.deliveries.stamps() == 0
    assert cache.delivered == 10_000, "each delivery still counts"


def test_a_list_in_flight_keeps_the_stamps_of_what_came_after_it_began_then_none() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    _churn(cache, 10, prefix="before")
    since = cache.listing("pods")
    _churn(cache, 10, prefix="during")
    assert cache.deliveries.stamps() == 10, "one per pod delivered since the LIST began"
    assert not cache.stale("pods", pod("during3", gang="during3").ref.uid, since=since)
    cache.listed("pods", since=since)
    assert cache.deliveries.stamps() == 0


def test_a_list_ending_keeps_what_a_later_list_still_in_flight_needs() -> None:
    deliveries = Deliveries()
    first = deliveries.listing("nodes")
    deliveries.seen("nodes", "a")
    second = deliveries.listing("nodes")
    deliveries.seen("nodes", "b")
    deliveries.listed("nodes", since=first)
    # "a" came before the second LIST began: that LIST knows it as well as the cache.
    assert deliveries.stale("nodes", "a", since=second)
    assert not deliveries.stale("nodes", "b", since=second)
    assert deliveries.stamps() == 1
    deliveries.listed("nodes", since=second)
    assert deliveries.stamps() == 0


def test_a_list_of_one_kind_stamps_no_other_kind() -> None:
    deliveries = Deliveries()
    since = deliveries.listing("nodes")
    deliveries.seen("pods", "x")
    deliveries.gone("pods", "y")
    assert deliveries.stamps() == 0
    deliveries.gone("nodes", "n")
    assert not deliveries.stale("nodes", "n", since=since)
