"""Claims, volumes and storage classes are read with every field the volume binder of
kube-scheduler reads, and a malformed size is an error on the object, never an exception."""

from __future__ import annotations

from scheduler.codecs.volumes import claim_from_dict, storage_class_from_dict, volume_from_dict
from scheduler.model.pods import LabelSelector, NodeSelectorTerm, Requirement
from scheduler.model.volumes import ClaimRef, TopologyTerm


def test_a_claim_waiting_for_its_volume_on_a_selected_node() -> None:
    claim = claim_from_dict({
        "metadata": {"name": "scratch-0", "namespace": "ml", "uid": "c1",
                     "annotations": {"volume.kubernetes.io/selected-node": "n3"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                 "resources": {"requests": {"storage": "1Gi"}},
                 "selector": {"matchLabels": {"tier": "fast"}}},
    })  # fmt: skip
    assert claim.key == ("ml", "scratch-0")
    assert (claim.uid, claim.storage_class, claim.requested) == ("c1", "local-path", 2**30)
    assert claim.access_modes == {"ReadWriteOnce"}
    assert claim.selected_node == "n3"
    assert claim.selector == LabelSelector(match_labels=(("tier", "fast"),))
    assert not claim.block
    assert not claim.fully_bound


def test_a_claim_is_fully_bound_once_the_pv_controller_completed_its_binding() -> None:
    raw = {"metadata": {"name": "c", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
           "spec": {"volumeName": "pv-1", "volumeMode": "Block"}}  # fmt: skip
    claim = claim_from_dict(raw)
    assert claim.fully_bound
    assert claim.block
    assert claim.namespace == "default"
    assert claim.selector is None, "no selector: any volume"
    assert not claim_from_dict({"spec": {"volumeName": "pv-1"}}).fully_bound, "pre-bound only"


def test_the_beta_class_annotation_comes_before_the_field_as_the_pv_controller_reads_it() -> None:
    raw = {"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "old"}},
           "spec": {"storageClassName": "new"}}  # fmt: skip
    assert claim_from_dict(raw).storage_class == "old"
    assert volume_from_dict(raw).storage_class == "old"


def test_a_malformed_size_is_an_error_on_the_claim() -> None:
    claim = claim_from_dict({"spec": {"resources": {"requests": {"storage": "lots"}}}})
    assert claim.requested == 0
    assert len(claim.errors) == 1
    assert "spec.resources.requests.storage" in claim.errors[0]


def test_a_local_volume_with_its_node_affinity_and_its_claim() -> None:
    volume = volume_from_dict({
        "metadata": {"name": "local-n1", "labels": {"tier": "fast"}},
        "spec": {"capacity": {"storage": "10Gi"}, "storageClassName": "local",
                 "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": "ml", "name": "scratch-0", "uid": "c1"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}},
                 "csi": {"driver": "local.csi.example.com", "volumeHandle": "h"}},
        "status": {"phase": "Bound"},
    })  # fmt: skip
    assert (volume.name, volume.capacity, volume.storage_class) == ("local-n1", 10 * 2**30, "local")
    assert volume.claim == ClaimRef("ml", "scratch-0", "c1")
    assert volume.phase == "Bound"
    assert volume.labels == {"tier": "fast"}
    assert volume.csi_driver == "local.csi.example.com"
    assert volume.node_affinity == (
        NodeSelectorTerm((Requirement("kubernetes.io/hostname", "In", ("n1",)),)),
    )


def test_a_volume_without_a_status_is_not_available() -> None:
    assert volume_from_dict({"metadata": {"name": "v"}}).phase == ""


def test_a_claim_ref_without_a_uid_names_any_claim_of_that_name() -> None:
    claim = claim_from_dict({"metadata": {"name": "c", "namespace": "ml", "uid": "u"}})
    assert ClaimRef("ml", "c").names(claim)
    assert ClaimRef("ml", "c", "u").names(claim)
    assert not ClaimRef("ml", "c", "other").names(claim)
    assert not ClaimRef("other", "c").names(claim)


def test_a_storage_class_with_its_provisioner_and_allowed_topologies() -> None:
    name, storage_class = storage_class_from_dict({
        "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}],
    })  # fmt: skip
    assert name == "zonal"
    assert storage_class.waits_for_first_consumer
    assert storage_class.provisions
    assert storage_class.allowed_topologies == (
        TopologyTerm((("topology.kubernetes.io/zone", ("a", "b")),)),
    )


def test_a_class_of_hand_made_volumes_provisions_nothing() -> None:
    _, local = storage_class_from_dict({"provisioner": "kubernetes.io/no-provisioner"})
    assert not local.provisions
    assert local.binding_mode == "Immediate"
