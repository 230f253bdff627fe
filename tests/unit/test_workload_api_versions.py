"""The upstream PodGroup at every version Kubernetes serves it: v1alpha2 (1.36), v1beta1 and
v1alpha3 (1.37, one object at both). The same gang either way; the condition written is the
version's own; what 1.37 asks that is not honoured yet makes the gang invalid, by name."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.codecs.podgroups import podgroup_status_to_dict, workload_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.gangs import Condition, PodGroupStatus
from scheduler.model.pods import PodGroupApi
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map

V1BETA1 = "scheduling.k8s.io/v1beta1"
V1ALPHA3 = "scheduling.k8s.io/v1alpha3"
V1ALPHA2 = "scheduling.k8s.io/v1alpha2"


def body(version: str | None, **spec: Any) -> dict:
    made: dict[str, Any] = {
        "metadata": {"name": "train", "namespace": "default", "uid": "uid-train"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }
    if version is not None:
        made["apiVersion"] = version
    return made


def members(count: int) -> list:
    return gang_pods("train", count, spec={"schedulingGroup": {"podGroupName": "train"}}, cpu="1")


@pytest.mark.parametrize("version", [V1BETA1, V1ALPHA3, V1ALPHA2])
def test_a_gang_reads_the_same_at_every_version_and_knows_which_it_was_read_at(
    version: str,
) -> None:
    group = workload_podgroup_from_dict(body(version))
    assert (group.min_member, group.errors, group.api_version) == (2, (), version)
    assert group.disruption_mode == "single"


def test_the_version_the_shell_read_at_wins_over_the_object_and_v1alpha2_is_the_default() -> None:
    # A LIST's items carry no apiVersion: the version watched says it.
    assert workload_podgroup_from_dict(body(None), version=V1BETA1).api_version == V1BETA1
    assert workload_podgroup_from_dict(body(None)).api_version == V1ALPHA2


@pytest.mark.parametrize(
    ("mode", "read"),
    [({"single": {}}, "single"), ({"all": {}}, "all"), ("Pod", "single"), ("PodGroup", "all")],
)
def test_disruption_mode_is_read_in_both_schemas(mode: object, read: str) -> None:
    assert workload_podgroup_from_dict(body(V1BETA1, disruptionMode=mode)).disruption_mode == read


@pytest.mark.parametrize("mode", [{"single": {}, "all": {}}, "Everything", {"some": {}}, 3])
def test_a_malformed_disruption_mode_is_said_with_what_is_allowed(mode: object) -> None:
    (error,) = workload_podgroup_from_dict(body(V1BETA1, disruptionMode=mode)).errors
    assert error.startswith("spec.disruptionMode must be {single: {}} or {all: {}}")


def test_a_podgroup_reads_its_parent_and_its_claims_for_the_group() -> None:
    nested = workload_podgroup_from_dict(body(V1ALPHA3, parentCompositePodGroupName="job"))
    assert (nested.parent, nested.errors) == ("job", ())
    claims = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    shared = workload_podgroup_from_dict(body(V1BETA1, resourceClaims=claims))
    assert shared.errors == ()
    assert [(c.name, c.template) for c in shared.claims] == [("gpus", "eight-gpus")]


@pytest.mark.parametrize(
    ("version", "kind"),
    [(V1BETA1, "PodGroupInitiallyScheduled"), (V1ALPHA3, "PodGroupInitiallyScheduled"),
     (V1ALPHA2, "PodGroupScheduled")],
)  # fmt: skip
def test_the_condition_written_is_the_versions_own(version: str, kind: str) -> None:
    group = workload_podgroup_from_dict(body(version))
    result = schedule(snapshot([node("n0", cpu="2")], members(2), podgroups=[group]), now=T0)
    assert len(bind_map(result)) == 2
    (update,) = result.status_updates
    assert [(c.type, c.status, c.reason) for c in update.status.conditions] == [
        (kind, "True", "Scheduled")
    ]
    sent = podgroup_status_to_dict(update.status, PodGroupApi.WORKLOAD)["conditions"]
    assert [c["type"] for c in sent if "$patch" not in c] == [kind]


def test_once_initially_scheduled_a_v1beta1_gang_never_goes_back_to_false() -> None:
    scheduled = {
        "type": names.UPSTREAM_INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    group = workload_podgroup_from_dict({**body(V1BETA1), "status": {"conditions": [scheduled]}})
    result = schedule(snapshot([node("n0", cpu="1")], members(2), podgroups=[group]), now=T0)
    assert bind_map(result) == {}
    assert result.status_updates == ()


def test_only_the_scheduled_conditions_are_sent_other_writers_keep_theirs() -> None:
    theirs = Condition("DisruptionTarget", "True", "PreemptionByScheduler", "", "")
    ours = Condition(names.UPSTREAM_INITIALLY_SCHEDULED, "False", "Unschedulable", "", "")
    status = PodGroupStatus(conditions=(theirs, ours))
    sent = podgroup_status_to_dict(status, PodGroupApi.WORKLOAD)["conditions"]
    assert [c["type"] for c in sent if "$patch" not in c] == [names.UPSTREAM_INITIALLY_SCHEDULED]
