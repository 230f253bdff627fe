"""What the testbed's provisioner acts on and what it makes (testbed/provisioner.py), shared
by the e2e tests' provisioner and the bench's: a claim of its classes with a node chosen
and no volume yet; a volume pre-bound to the claim, reachable from that node alone,
labelled with the claim's namespace."""

from __future__ import annotations

from bench.volumes import volume_node
from testbed.provisioner import CLAIM_NAMESPACE_LABEL, SELECTED_NODE, selected_node, volume_for


def claim(*, node: str = "", volume: str = "", cls: str = "wffc") -> dict:
    spec = {"storageClassName": cls, "resources": {"requests": {"storage": "2Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {
        "metadata": {"name": "data-0", "namespace": "ns", "uid": "u-0",
                     "annotations": {SELECTED_NODE: node} if node else {}},
        "spec": spec,
    }  # fmt: skip


def test_a_claim_of_its_class_with_a_node_chosen_and_no_volume_is_acted_on() -> None:
    assert selected_node(claim(node="n-1"), {"wffc"}) == "n-1"


def test_a_claim_bound_of_another_class_or_with_no_node_chosen_is_not() -> None:
    assert selected_node(claim(node="n-1", volume="pv-0"), {"wffc"}) is None
    assert selected_node(claim(node="n-1", cls="other"), {"wffc"}) is None
    assert selected_node(claim(), {"wffc"}) is None


def test_the_volume_made_is_pre_bound_on_the_node_chosen_and_labelled_with_the_namespace() -> None:
    volume = volume_for(claim(node="n-1"), "n-1")
    assert volume["metadata"]["labels"] == {CLAIM_NAMESPACE_LABEL: "ns"}
    assert volume["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "ns",
        "name": "data-0", "uid": "u-0",
    }  # fmt: skip
    assert volume["spec"]["capacity"] == {"storage": "2Gi"}
    assert volume_node(volume) == "n-1"
