"""Reading pods, nodes and PodGroups; every malformed annotation gets a message that says
which annotation, what it held and what is allowed."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.codecs.gangs import read_claim, stated_options
from scheduler.codecs.objects import budget_from_dict, pod_from_dict, pod_requests
from scheduler.codecs.podgroups import podgroup_from_dict
from scheduler.codecs.quantities import parse_quantity
from scheduler.model import names
from scheduler.model.pods import GangKey, GangOptions, GangSource, LabelSelector, Mode
from scheduler.model.times import parse_duration


def container(**requests: str) -> dict:
    return {"name": "c", "resources": {"requests": requests}}


def test_requests_sum_containers_peak_init_containers_and_add_overhead() -> None:
    spec = {
        "containers": [container(cpu="500m", memory="1Gi"), container(cpu="1", memory="1Gi")],
        "initContainers": [container(cpu="2", memory="512Mi")],
        "overhead": {"cpu": "100m"},
    }
    assert dict(pod_requests(spec)) == {"cpu": 2100, "memory": 2 << 30, "pods": 1}


def test_pod_level_requests_replace_the_containers_sum_for_what_they_name() -> None:
    spec = {
        "containers": [container(cpu="500m", memory="1Gi"), container(cpu="1", memory="1Gi")],
        "resources": {"requests": {"cpu": "4"}},
        "overhead": {"cpu": "100m"},
    }
    # As kube-scheduler's PodRequests: cpu from the pod level, memory summed, overhead added.
    assert dict(pod_requests(spec)) == {"cpu": 4100, "memory": 2 << 30, "pods": 1}


def test_a_claim_holds_every_option_a_podgroup_or_pod_can_state() -> None:
    stated, errors = stated_options({names.KOORD_MIN_AVAILABLE: "2"}, namespace="ml")
    assert set(stated) == {f.name for f in fields(GangOptions)} - {"errors"}
    assert errors == []


def test_sidecar_init_containers_add_to_everything_after_them() -> None:
    sidecar = {**container(cpu="1"), "restartPolicy": "Always"}
    spec = {"initContainers": [sidecar, container(cpu="2")], "containers": [container(cpu="1")]}
    # The sidecar runs beside the app container (1 + 1) and beside the later init (1 + 2).
    assert pod_requests(spec)["cpu"] == 3000


def test_extended_resources_are_counted_in_units() -> None:
    spec = {"containers": [container(**{"nvidia.com/gpu": "8"})]}
    assert pod_requests(spec)["nvidia.com/gpu"] == 8


def test_pod_group_label_makes_a_claim_that_needs_the_podgroup() -> None:
    claim = read_claim({names.POD_GROUP_LABEL: "mpi"}, {}, namespace="ml")
    assert claim is not None
    assert (claim.key, claim.source, claim.min_available) == (
        GangKey("ml", "mpi"), GangSource.POD_GROUP, None,
    )  # fmt: skip


def test_koordinator_annotations_are_read_in_full() -> None:
    claim = read_claim(
        {},
        {
            names.KOORD_NAME: "gang-a",
            names.KOORD_MIN_AVAILABLE: "5",
            names.KOORD_TOTAL_NUMBER: "6",
            names.KOORD_WAITING_TIME: "3600s",
            names.KOORD_MODE: "NonStrict",
            names.KOORD_GROUPS: '["team-a/gang-a", "team-b/gang-b"]',
        },
        namespace="team-a",
    )
    assert claim is not None
    assert claim.errors == ()
    assert (claim.min_available, claim.total_number, claim.waiting_seconds) == (5, 6, 3600.0)
    assert claim.mode is Mode.NON_STRICT
    assert claim.groups == (GangKey("team-a", "gang-a"), GangKey("team-b", "gang-b"))


def test_legacy_annotations_are_understood() -> None:
    claim = read_claim(
        {}, {names.LEGACY_NAME: "old", names.LEGACY_MIN_AVAILABLE: "3"}, namespace="ns"
    )
    assert claim is not None
    assert (claim.key.name, claim.min_available, claim.source) == ("old", 3, GangSource.LEGACY)


@pytest.mark.parametrize(
    ("annotation", "value", "says"),
    [
        (names.KOORD_MIN_AVAILABLE, "three", "must be a whole number of at least 1, got 'three'"),
        (names.KOORD_MIN_AVAILABLE, "-2", "must be a whole number of at least 1, got '-2'"),
        (names.KOORD_TOTAL_NUMBER, "0", "must be a whole number of at least 1, got '0'"),
        (names.KOORD_MODE, "strictest", "must be Strict or NonStrict, got 'strictest'"),
        (names.KOORD_WAITING_TIME, "soon", "must be a duration such as 600s, 10m or 1h"),
        (names.KOORD_GROUPS, "[gang-a", "must be a JSON list of namespace/name strings"),
        (names.KOORD_GROUPS, '{"a": 1}', "must be a JSON list of namespace/name strings"),
    ],
)
def test_malformed_annotations_name_themselves_and_what_is_allowed(
    annotation: str, value: str, says: str
) -> None:
    claim = read_claim({}, {names.KOORD_NAME: "g", annotation: value}, namespace="ns")
    assert claim is not None
    assert len(claim.errors) == 1
    assert claim.errors[0].startswith(f"annotation {annotation} ")
    assert says in claim.errors[0]


def test_gang_name_that_is_not_rfc_1123_is_an_error() -> None:
    claim = read_claim({}, {names.KOORD_NAME: "My_Gang"}, namespace="ns")
    assert claim is not None
    assert "RFC 1123" in claim.errors[0]


@pytest.mark.parametrize(
    ("text", "seconds"), [("600s", 600), ("10m", 600), ("1h30m", 5400), ("90", 90), ("1.5s", 1.5)]
)
def test_durations_read_like_go(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_podgroup_reads_spec_annotations_and_status() -> None:
    pg = podgroup_from_dict(
        {
            "metadata": {
                "name": "g",
                "namespace": "ns",
                "annotations": {names.KOORD_MODE: "NonStrict"},
            },
            "spec": {"minMember": 0, "minResources": {"cpu": "5"}, "scheduleTimeoutSeconds": 60},
            "status": {"phase": "Scheduling", "scheduled": 2},
        }
    )
    assert (pg.min_member, pg.timeout_seconds, pg.mode) == (1, 60.0, Mode.NON_STRICT)
    assert pg.min_resources == {"cpu": 5000}
    assert (pg.status.phase, pg.status.scheduled) == ("Scheduling", 2)


def test_timeout_annotation_is_read_back() -> None:
    pod = pod_from_dict({"metadata": {"name": "p", "annotations": {names.KOORD_TIMEOUT: "true"}}})
    assert pod.timed_out


@pytest.mark.parametrize(
    "written",
    ["", "yesterday", "2026-13-45T99:99:99Z", "9" * 400, "-1", "1e309", "0000-00-00"],
)
def test_a_first_attempt_mark_that_is_no_time_is_ignored(written: str) -> None:
    pod = pod_from_dict(
        {"metadata": {"name": "p", "annotations": {names.FIRST_ATTEMPT: written}}, "spec": {}}
    )
    assert pod.first_attempt is None


def test_a_first_attempt_mark_is_read_back_as_written() -> None:
    pod = pod_from_dict(
        {
            "metadata": {"name": "p", "annotations": {names.FIRST_ATTEMPT: "2026-11-22T04:00:00Z"}},
            "spec": {},
        }
    )
    assert pod.first_attempt == 1_795_320_000.0


def test_a_disruption_budget_reads_its_selector_and_what_its_status_allows() -> None:
    budget = budget_from_dict(
        {
            "metadata": {"namespace": "ml", "name": "keep"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}},
            "status": {
                "disruptionsAllowed": 1,
                "disruptedPods": {"train-0": "2026-11-24T00:00:00Z"},
            },
        }
    )
    assert (budget.namespace, budget.name, budget.disruptions_allowed) == ("ml", "keep", 1)
    assert budget.selector == LabelSelector(match_labels=(("app", "train"),))
    assert budget.disrupted == frozenset({"train-0"})
    unseen = budget_from_dict(
        {"metadata": {"name": "new"}, "spec": {}, "status": {"disruptionsAllowed": -3}}
    )
    assert unseen.disruptions_allowed == 0
    assert unseen.selector is None


def test_starvation_after_is_read_from_pods_and_podgroups_and_a_bad_one_is_named() -> None:
    pg = podgroup_from_dict(
        {"metadata": {"name": "big", "annotations": {names.STARVATION_AFTER: "2m"}}, "spec": {}}
    )
    assert pg.starvation_seconds == 120
    bad = podgroup_from_dict(
        {"metadata": {"name": "big", "annotations": {names.STARVATION_AFTER: "soon"}}, "spec": {}}
    )
    assert bad.starvation_seconds is None
    assert any(names.STARVATION_AFTER in e and "'soon'" in e for e in bad.errors)


# No deadline: the first example imports the client package (a fifth of a second, more
# on a loaded machine), which overran hypothesis's 200 ms now and then in make test.
@settings(deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789.eE+-numkKMGTPEi sNaInfty", max_size=12),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False),
    )
)
def test_quantities_are_read_as_the_kubernetes_client_reads_them(raw: object) -> None:
    """Ours is the client's own, loaded from its file without the client package (whose
    import costs a fifth of a second at start): the same value, or a ValueError where the
    client raises one."""
    from kubernetes.utils.quantity import parse_quantity as theirs  # noqa: PLC0415

    def outcome(parse) -> object:
        try:
            value = parse(raw)
        except ValueError:
            return ValueError
        return ("nan",) if value.is_nan() else value

    assert outcome(parse_quantity) == outcome(theirs)
