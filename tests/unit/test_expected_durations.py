"""How long a gang is expected to run once bound: what it declares, capped by its members'
deadlines; else their deadlines, as an upper bound; else unknown, and said so."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.objects import pod_from_dict
from scheduler.codecs.podgroups import podgroup_from_dict
from scheduler.core.durations import expected_duration, history
from scheduler.core.explaining import explain
from scheduler.core.gangs import resolve
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.forecasts import DurationSource
from scheduler.model.pods import GangKey
from scheduler.model.times import format_time
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


def _finished(name: str, *, ran: float, ended: float, labels: dict | None = None):
    """A gang of two whose members Succeeded, having run ``ran`` seconds until ``ended``."""
    notes = {names.KOORD_NAME: name, names.KOORD_MIN_AVAILABLE: "2"}
    status = {
        "phase": "Succeeded", "startTime": format_time(ended - ran),
        "containerStatuses": [{"name": "main", "state": {"terminated": {
            "finishedAt": format_time(ended)}}}],
    }  # fmt: skip
    return [
        pod_from_dict({
            "metadata": {"name": f"{name}-{i}", "namespace": "default", "uid": f"{name}-{i}",
                         "annotations": notes, "labels": labels or {}},
            "spec": {"schedulerName": "gang-scheduler", "nodeName": "n0",
                     "containers": [{"name": "main"}]},
            "status": status,
        })
        for i in range(2)
    ]  # fmt: skip


def _resolved(pods: list) -> dict:
    return resolve(snapshot([node("n0")], pods), Config()).gangs


def test_gangs_like_it_that_ran_tell_its_median_and_90th_percentile() -> None:
    done = [
        p
        for i, ran in enumerate((600, 900, 1200, 3000))
        for p in _finished(f"train-{i + 28374650}", ran=ran, ended=T0 - 100 * i)
    ]
    waiting = gang_pods("train-x7k2p", 2, annotations={names.KOORD_NAME: "train-x7k2p"})
    gangs = _resolved([*done, *waiting])
    duration = expected_duration(
        gangs[GangKey("default", "train-x7k2p")], runs=history(gangs.values())
    )
    assert (duration.p50, duration.p90, duration.source) == (900.0, 3000.0, DurationSource.HISTORY)
    assert duration.basis == "the last 4 runs of default/train"


def test_fewer_than_three_runs_tell_nothing_and_a_word_is_not_a_generated_tail() -> None:
    done = [p for i in range(2) for p in _finished(f"bert-{i}", ran=600, ended=T0)]
    other = [p for i in range(3) for p in _finished(f"bert-large-{i}", ran=60, ended=T0)]
    waiting = gang_pods("bert-9", 2, annotations={names.KOORD_NAME: "bert-9"})
    gangs = _resolved([*done, *other, *waiting])
    duration = expected_duration(gangs[GangKey("default", "bert-9")], runs=history(gangs.values()))
    assert not duration.known, "2 runs of bert; bert-large is another kind of gang"


def test_a_duration_class_puts_gangs_of_any_names_together() -> None:
    label = {names.DURATION_CLASS: "nightly"}
    done = [p for i, n in enumerate("abc") for p in _finished(n, ran=300, ended=T0, labels=label)]
    waiting = gang_pods("z", 2, annotations={names.KOORD_NAME: "z"}, labels=label)
    gangs = _resolved([*done, *waiting])
    duration = expected_duration(gangs[GangKey("default", "z")], runs=history(gangs.values()))
    assert (duration.p50, duration.basis) == (300.0, "the last 3 runs of default/nightly")


def test_a_run_with_a_member_that_failed_or_never_said_its_end_is_not_counted() -> None:
    failed = _finished("job-1", ran=10, ended=T0)
    failed[0] = replace(failed[0], phase="Failed")
    unsaid = _finished("job-2", ran=10, ended=T0)
    unsaid[1] = replace(unsaid[1], finished=None)
    assert history(_resolved([*failed, *unsaid]).values()) == {}


def test_a_running_pod_says_when_it_started_and_no_end() -> None:
    """The forward play counts a running gang's time left from it."""
    running = pod_from_dict({
        "metadata": {"name": "p", "namespace": "default", "uid": "p"},
        "spec": {"nodeName": "n0", "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "startTime": format_time(T0 - 60)},
    })  # fmt: skip
    assert (running.started, running.finished) == (T0 - 60, None)
