"""How long a gang is expected to run once bound: what it declares, capped by its members'
deadlines; else their deadlines, as an upper bound; else unknown, and said so."""

from __future__ import annotations

from typing import Any

from scheduler.codecs.objects import podgroup_from_dict
from scheduler.core.durations import expected_duration
from scheduler.core.explaining import explain
from scheduler.core.gangs import resolve
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.forecasts import DurationSource
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, node, snapshot

KEY = GangKey("default", "train")


def _gang(*, annotations: dict[str, str] | None = None, deadline: Any = None, podgroup=None):
    notes = {names.KOORD_NAME: "train", names.KOORD_MIN_AVAILABLE: "2", **(annotations or {})}
    spec = {"activeDeadlineSeconds": deadline} if deadline is not None else {}
    pods = gang_pods("train", 2, annotations=notes, spec=spec)
    return resolve(snapshot([node("n0")], pods, podgroups=podgroup or ()), Config()).gangs[KEY]


def test_a_declared_duration_is_what_the_gang_is_expected_to_run() -> None:
    duration = expected_duration(_gang(annotations={names.EXPECTED_DURATION: "45m"}))
    assert (duration.p50, duration.p90, duration.source) == (
        2700.0,
        2700.0,
        DurationSource.DECLARED,
    )


def test_the_podgroup_may_declare_it_for_its_pods() -> None:
    group = podgroup_from_dict({
        "metadata": {"name": "train", "namespace": "default",
                     "annotations": {names.EXPECTED_DURATION: "2h"}},
        "spec": {"minMember": 2},
    })  # fmt: skip
    pods = gang_pods("train", 2, labels={names.POD_GROUP_LABEL: "train"})
    gang = resolve(snapshot([node("n0")], pods, podgroups=[group]), Config()).gangs[KEY]
    assert expected_duration(gang).p50 == 7200.0


def test_deadlines_on_every_member_bound_it_and_cap_what_is_declared() -> None:
    bounded = expected_duration(_gang(deadline=600))
    assert (bounded.p50, bounded.bound, bounded.source) == (600.0, 600.0, DurationSource.DEADLINE)
    capped = expected_duration(_gang(annotations={names.EXPECTED_DURATION: "1h"}, deadline=600))
    assert (capped.p50, capped.source) == (600.0, DurationSource.DECLARED)


def test_without_either_it_is_unknown_and_says_what_would_tell_it() -> None:
    duration = expected_duration(_gang())
    assert not duration.known
    assert names.EXPECTED_DURATION in duration.basis


def test_a_malformed_duration_makes_the_gang_invalid_and_names_the_annotation() -> None:
    gang = _gang(annotations={names.EXPECTED_DURATION: "soon"})
    assert any(names.EXPECTED_DURATION in error for error in gang.errors)


def test_explain_says_how_long_the_gang_is_expected_to_run() -> None:
    notes = {names.KOORD_NAME: "train", names.KOORD_MIN_AVAILABLE: "2",
             names.EXPECTED_DURATION: "45m"}  # fmt: skip
    pods = gang_pods("train", 2, annotations=notes)
    said = explain(snapshot([node("n0")], pods), KEY, now=T0, config=Config())
    assert (
        "expected to run for 45m once bound (declared by gang-scheduler.io/expected-duration)"
        in said
    )
