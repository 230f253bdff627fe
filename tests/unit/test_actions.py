"""The action framework: actions come from a registry, run in the configured order, and
each GangGroup's turn in any action is isolated: one that raises is undone alone, said as a
SchedulerError, recorded for the shell, and the pass goes on."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from scheduler.core.actions import REGISTRY, UnknownActions, actions_named
from scheduler.core.actions.allocate import Allocate
from scheduler.core.framework import run_actions
from scheduler.core.scheduling import schedule
from scheduler.core.session import Session, pending
from scheduler.model.config import DEFAULT_ACTIONS, Config
from scheduler.model.decisions import Eviction, Verdict
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import evicted, starving_cluster, two_full_nodes
from tests.unit.test_stale_gangs import passes, stale_gang


def test_every_registered_action_is_known_by_its_own_name_and_the_default_order_is_known() -> None:
    assert all(action.name == name for name, action in REGISTRY.items())
    assert [a.name for a in actions_named(DEFAULT_ACTIONS)] == [
        "finish-evictions", "allocate", "hold-head", "evict-stale", "preempt", "reclaim"
    ]  # fmt: skip
    # Every action runs unless configured out, but consolidation, which moves running pods
    # (as KAI's is) only where it is asked for.
    assert set(REGISTRY) - set(DEFAULT_ACTIONS) == {"consolidate", "reserve"}


def test_an_unknown_action_is_refused_with_the_names_of_the_known_ones() -> None:
    with pytest.raises(
        UnknownActions,
        match=r"unknown action.*'backfil'.*allocate, hold-head, evict-stale, preempt",
    ):
        actions_named(["allocate", "backfil"])


def test_a_pass_without_preempt_evicts_nothing_for_a_gang_that_does_not_fit() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    shot = snapshot(nodes, [*low, *high])
    assert evicted(schedule(shot, now=T0)) == ["low-b-0", "low-b-1"]
    alone = schedule(shot, now=T0, config=Config(actions=("allocate",)))
    assert evicted(alone) == []
    assert bind_map(alone) == {}


def test_actions_run_in_the_order_given_and_read_what_the_earlier_ones_did() -> None:
    nodes = [node("n0", cpu="4")]
    pods = [*gang_pods("fits", 2, gang="fits", min_available=2, cpu="2"),
            *gang_pods("big", 2, gang="big", min_available=2, cpu="4")]  # fmt: skip
    seen: list[tuple[str, Verdict]] = []

    @dataclass
    class Watching:
        name: str = "watching"

        def run(self, session: Session) -> None:
            seen.extend((str(key), a.verdict) for a in session.attempts for key in a.gangs)

    session = Session(snapshot(nodes, pods), now=T0, config=Config())
    run_actions(session, [Watching(), Allocate(), Watching()])
    # The first watcher ran before allocate and saw nothing; the second saw each group's turn.
    assert seen == [("default/big", Verdict.UNSCHEDULABLE), ("default/fits", Verdict.SCHEDULED)]
    assert all(a.action == "allocate" for a in session.attempts)


@dataclass
class Evicting:
    """An action that evicts every bound pod of the cluster, one GangGroup's turn per pending
    gang, and raises in the turn of ``breaks``."""

    breaks: str
    name: str = "evicting"
    turns: list[str] = field(default_factory=list)

    def run(self, session: Session) -> None:
        for unit in session.order.units():
            gangs = [session.gangs[key] for key in unit if key in session.gangs]
            if not any(pending(g) for g in gangs):
                continue
            with session.turn(unit, gangs) as statement:
                self.turns.append(unit[0].name)
                for info in session.infos.values():
                    for victim in info.pods:
                        statement.evict(victim, victim.node_name)
                        session.evictions.append(Eviction(victim.ref, victim.node_name, "test"))
                if unit[0].name == self.breaks:
                    raise RuntimeError("a bug in the evicting action")


def test_an_action_that_raises_in_a_turn_undoes_that_turn_alone_and_the_pass_goes_on() -> None:
    nodes, low = two_full_nodes()
    first = gang_pods("a-first", 1, gang="a-first", min_available=1, cpu="32")
    second = gang_pods("b-second", 1, gang="b-second", min_available=1, cpu="32")
    session = Session(snapshot(nodes, [*low, *first, *second]), now=T0, config=Config())
    action = Evicting(breaks="a-first")
    run_actions(session, [action, Allocate()])
    result = session.result()
    assert action.turns == ["a-first", "b-second"], "the turn after the broken one ran"
    # The broken turn's evictions are gone; the next turn's are kept, once each.
    assert sorted(e.pod.name for e in result.evictions) == [p.ref.name for p in low]
    (error,) = result.errors
    assert (error.action, [str(k) for k in error.gangs]) == ("evicting", ["default/a-first"])
    assert error.error == "RuntimeError: a bug in the evicting action"
    assert "raise RuntimeError" in error.detail
    said = [e for e in result.events if e.regarding.name == "a-first-0"]
    assert said
    assert "internal error while scheduling (evicting) default/a-first" in said[0].message
    condition = next(c for c in result.pod_conditions if c.pod.name == "a-first-0")
    assert condition.reason == "SchedulerError"
    assert result.memory[GangKey("default", "a-first")].retry_at > T0, "it backs off"
    # The room the kept turn freed on the pass's ledger is there for allocate after it; the
    # gang whose turn broke waits out its backoff.
    assert bind_map(result) == {"b-second-0": "n0"}


def test_a_pass_whose_preempt_turn_raises_keeps_what_allocate_bound() -> None:
    nodes = [node("n0", cpu="4")]
    fits = gang_pods("fits", 1, gang="fits", min_available=1, cpu="2")
    high = [replace(p, requests=None) for p in
            gang_pods("high", 1, gang="high", min_available=1, cpu="8", priority=100)]  # fmt: skip
    result = schedule(snapshot(nodes, [*fits, *high]), now=T0)
    assert bind_map(result) == {"fits-0": "n0"}
    assert [e.action for e in result.errors] == ["allocate"]


def without(*names: str, config: Config | None = None) -> Config:
    """``config`` (the default one) with the actions ``names`` left out."""
    config = config or Config()
    return replace(config, actions=tuple(a for a in config.actions if a not in names))


def test_without_hold_head_a_starving_gang_holds_nothing_and_a_small_gang_takes_the_room() -> None:
    _, _, snap = starving_cluster(waited=400)
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    shot = replace(snap, pods=(*snap.pods, *late))
    held = schedule(shot, now=T0)
    assert [e for e in held.events if e.reason == "StarvationHold"]
    assert bind_map(held) == {}
    free = schedule(shot, now=T0, config=without("hold-head"))
    assert not [e for e in free.events if e.reason == "StarvationHold"]
    assert sorted(bind_map(free)) == ["late-0", "late-1"]


def test_without_evict_stale_a_gang_below_its_minimum_past_its_grace_runs_on() -> None:
    stale = stale_gang(third="")
    config = Config(stale_gang_seconds=60.0)
    evicting = passes(stale, config=config, times=[T0, T0 + 60])
    assert [e.pod.name for e in evicting[-1].evictions] == ["g-0", "g-1"]
    kept = passes(stale, config=without("evict-stale", config=config), times=[T0, T0 + 60])
    assert [r.evictions for r in kept] == [(), ()]
