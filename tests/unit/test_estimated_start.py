"""A waiting gang's PodGroup says when it is expected to start (condition EstimatedStart),
from the latest forward play the shell put in the snapshot; once placed it says nothing."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.forecasting import forecast
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.gangs import Condition, PodGroupStatus
from scheduler.model.pods import GangKey
from scheduler.model.times import format_time
from tests.unit.builders import T0, gang_pods, node, podgroup, snapshot

CONFIG = Config(default_timeout_seconds=1e9)
TRAIN = GangKey("default", "train")


def _cluster(*, runs_for: str | None, status: PodGroupStatus | None = None):
    """r (annotations, 4 x 2 cpu) fills n0 for ``runs_for``; train (a PodGroup of 4) waits."""
    said = {names.EXPECTED_DURATION: runs_for} if runs_for else None
    running = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods("r", 4, gang="r", min_available=4, cpu="2", annotations=said)
    ]
    train = gang_pods("train", 4, pod_group="train", cpu="2")
    group = podgroup("train", min_member=4)
    if status is not None:
        group = replace(group, status=status)
    return snapshot([node("n0", cpu="8")], [*running, *train], podgroups=[group])


def _estimate(snap) -> Condition | None:
    found = forecast(snap, now=T0, config=CONFIG)
    result = schedule(replace(snap, forecast=found), now=T0, config=CONFIG)
    (update,) = [u for u in result.status_updates if u.gang == TRAIN]
    return next((c for c in update.status.conditions if c.type == "EstimatedStart"), None)


def test_a_waiting_gang_says_when_it_is_expected_to_start_to_the_minute() -> None:
    said = _estimate(_cluster(runs_for="10m"))
    assert (said.status, said.reason) == ("True", "Estimated")
    assert said.message.startswith(
        f"expected to start at {format_time(T0 + 600)} (p90 {format_time(T0 + 600)}), once "
        "default/r ended"
    )


def test_without_an_estimate_it_says_why() -> None:
    said = _estimate(_cluster(runs_for=None))
    assert (said.status, said.reason) == ("False", "BehindUnknown")
    assert "default/r" in said.message


def test_no_forecast_no_condition() -> None:
    result = schedule(_cluster(runs_for="10m"), now=T0, config=CONFIG)
    (update,) = [u for u in result.status_updates if u.gang == TRAIN]
    assert all(c.type != "EstimatedStart" for c in update.status.conditions)


def test_a_placed_gang_drops_its_estimate() -> None:
    old = Condition("EstimatedStart", "True", "Estimated", "expected ...", format_time(T0 - 60))
    snap = _cluster(runs_for="10m", status=PodGroupStatus(conditions=(old,)))
    emptied = replace(snap, pods=tuple(p for p in snap.pods if not p.ref.name.startswith("r-")))
    result = schedule(emptied, now=T0, config=CONFIG)
    (update,) = [u for u in result.status_updates if u.gang == TRAIN]
    assert update.status.phase == "Scheduled"
    assert all(c.type != "EstimatedStart" for c in update.status.conditions)


def _annotated(*, runs_for: str | None) -> object:
    """r fills n0 for ``runs_for``; ko (Koordinator annotations, no PodGroup) waits."""
    said = {names.EXPECTED_DURATION: runs_for} if runs_for else None
    running = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods("r", 4, gang="r", min_available=4, cpu="2", annotations=said)
    ]
    waiting = gang_pods("ko", 2, gang="ko", min_available=2, cpu="4", created=T0 - 30)
    return snapshot([node("n0", cpu="8")], [*running, *waiting])


def _marks(result) -> dict[str, str | None]:
    return {
        p.pod.name: p.annotations[names.EXPECTED_START]
        for p in result.pod_patches
        if names.EXPECTED_START in p.annotations
    }


def test_a_gang_without_a_podgroup_says_it_on_its_first_waiting_pod() -> None:
    snap = _annotated(runs_for="10m")
    result = schedule(replace(snap, forecast=forecast(snap, now=T0, config=CONFIG)), now=T0)
    assert _marks(result) == {"ko-0": format_time(T0 + 600)}


def test_without_an_estimate_the_mark_says_why() -> None:
    snap = _annotated(runs_for=None)
    result = schedule(replace(snap, forecast=forecast(snap, now=T0, config=CONFIG)), now=T0)
    assert _marks(result) == {"ko-0": "unknown: behind-unknown"}


def test_the_mark_is_taken_off_once_the_gang_is_placed() -> None:
    snap = _annotated(runs_for="10m")
    freed = [p for p in snap.pods if not p.ref.name.startswith("r-")]
    marked = [replace(p, expected_start="x") if p.ref.name == "ko-0" else p for p in freed]
    result = schedule(replace(snap, pods=tuple(marked)), now=T0, config=CONFIG)
    assert len(result.bindings) == 1
    assert _marks(result) == {"ko-0": None}


def test_no_forecast_no_mark_and_no_write() -> None:
    assert _marks(schedule(_annotated(runs_for="10m"), now=T0, config=CONFIG)) == {}


def test_a_pod_of_no_gang_gets_no_mark() -> None:
    """A backlog of plain pods would cost a write each: they are placed as kube-scheduler
    places them, and say nothing of a start."""
    from tests.unit.builders import pod  # noqa: PLC0415

    snap = _annotated(runs_for="10m")
    alone = pod("alone", cpu="4", created=T0 - 60)
    snap = replace(snap, pods=(*snap.pods, alone))
    result = schedule(replace(snap, forecast=forecast(snap, now=T0, config=CONFIG)), now=T0)
    assert "alone" not in _marks(result)
    assert "ko-0" in _marks(result)
