"""A pod whose claim is bound to a zonal volume goes only to a node of that zone (or a node
with no zone at all), as kube-scheduler's VolumeZone decides: the cases of its
TestSingleZone and TestMultiZone, by their names there."""

from __future__ import annotations

import pytest

from scheduler.core.filtering import VOLUME_ZONE_CONFLICT, volume_reason, volume_terms
from scheduler.model.volumes import Claim, Volume
from tests.unit.builders import node, pod

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"

VOLUMES = {
    "Vol_1": {BETA_ZONE: "us-west1-a"},
    "Vol_2": {BETA_REGION: "us-west1", "uselessLabel": "none"},
    "Vol_3": {BETA_REGION: "us-west1"},
    "Vol_Stable_1": {ZONE: "us-west1-a"},
    "Vol_Stable_2": {REGION: "us-west1", "uselessLabel": "none"},
    "Vol_Stable_3": {ZONE: "us-west1-a", REGION: "us-west1-a"},
    "Multi_1": {BETA_ZONE: "us-west1-c__us-west1-a"},
    "Multi_Stable": {ZONE: "us-west1-c__us-west1-a"},
    "Malformed": {ZONE: "us-west1-a__"},
}


def _reason(volume: str, labels: dict[str, str]) -> str:
    claim = Claim("default", "PVC", volume=volume)
    mounted = {"name": "v", "persistentVolumeClaim": {"claimName": "PVC"}}
    terms = volume_terms(
        pod("pod_1", spec={"volumes": [mounted]}),
        claims={claim.key: claim},
        volumes={name: Volume(name, labels=labels) for name, labels in VOLUMES.items()},
    )  # fmt: skip
    return volume_reason(terms, node("host1", labels=labels))


@pytest.mark.parametrize(
    ("case", "volume", "labels", "conflict"),
    [
        ("node without labels", "Vol_1", {}, False),
        ("beta zone label matched", "Vol_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"},
         False),
        ("beta region label matched", "Vol_2", {BETA_REGION: "us-west1", "uselessLabel": "none"},
         False),
        ("beta region label doesn't match", "Vol_2", {BETA_REGION: "no_us-west1"}, True),
        ("beta zone label doesn't match", "Vol_1", {BETA_ZONE: "no_us-west1-a"}, True),
        ("zone label matched", "Vol_Stable_1", {ZONE: "us-west1-a"}, False),
        ("region label matched", "Vol_Stable_2", {REGION: "us-west1"}, False),
        ("region label doesn't match", "Vol_Stable_2", {REGION: "no_us-west1"}, True),
        ("zone label doesn't match", "Vol_Stable_1", {ZONE: "no_us-west1-a"}, True),
        ("pv with zone and region, node with only zone", "Vol_Stable_3", {ZONE: "us-west1-a"},
         True),
        ("pv with zone,node with beta zone", "Vol_Stable_1", {BETA_ZONE: "us-west1-a"}, True),
        ("pv with beta label,node with ga label, matched", "Vol_1", {ZONE: "us-west1-a"}, False),
        ("pv with beta label,node with ga label, don't match", "Vol_1", {ZONE: "us-west1-b"},
         True),
        # TestMultiZone
        ("multi: beta zone label matched", "Multi_1", {BETA_ZONE: "us-west1-a"}, False),
        ("multi: beta zone label doesn't match", "Multi_1", {BETA_ZONE: "us-west1-b"}, True),
        ("multi: zone label matched", "Multi_Stable", {ZONE: "us-west1-a"}, False),
        ("multi: zone label doesn't match", "Multi_Stable", {ZONE: "us-west1-b"}, True),
        ("a malformed zone label is passed over", "Malformed", {ZONE: "elsewhere"}, False),
    ],
)  # fmt: skip
def test_volume_zone(case: str, volume: str, labels: dict[str, str], conflict: bool) -> None:
    assert _reason(volume, labels) == (VOLUME_ZONE_CONFLICT if conflict else ""), case
