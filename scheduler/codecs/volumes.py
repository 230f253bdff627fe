"""PersistentVolumeClaims, PersistentVolumes and StorageClasses, read as the scheduler needs
them (``model/volumes.py``). A malformed field never raises: the object carries an error
naming it, and the claim or volume is not matched to anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.codecs.quantities import QUANTITY_RULE, quantity
from scheduler.codecs.selectors import label_selector, node_selector_terms
from scheduler.codecs.shapes import listed, obj, objs, text, texts, whole
from scheduler.model.times import parse_time
from scheduler.model.volumes import (
    BETA_STORAGE_CLASS_ANNOTATION,
    BIND_COMPLETED_ANNOTATION,
    IMMEDIATE,
    SELECTED_NODE_ANNOTATION,
    Claim,
    ClaimRef,
    CsiDriver,
    CsiNode,
    StorageCapacity,
    StorageClass,
    TopologyTerm,
    Volume,
    VolumeAttachment,
)

STORAGE = "storage"
BLOCK = "Block"
LOST = "Lost"


def _storage(raw: object, field: str, errors: list[str]) -> int:
    """A storage quantity in bytes; 0 where none is given (a claim asking for no size takes
    any volume, as the PV controller compares with a zero quantity)."""
    if raw is None:
        return 0
    try:
        return quantity(STORAGE, raw)
    except ValueError:
        errors.append(f"{field}: {raw!r} is not {QUANTITY_RULE}")
        return 0


def _class_of(meta: Mapping[str, Any], spec: Mapping[str, Any], field: str) -> str:
    """The storage class: the beta annotation first, as the PV controller reads it."""
    annotations = texts(meta.get("annotations"))
    if BETA_STORAGE_CLASS_ANNOTATION in annotations:
        return annotations[BETA_STORAGE_CLASS_ANNOTATION]
    return text(spec.get(field))


def _selected(meta: Mapping[str, Any]) -> tuple[str, float | None]:
    """Who last wrote the claim's selected-node annotation, and when: the managedFields
    entry that owns the field (its manager, its time), ("", None) where none says."""
    field = f"f:{SELECTED_NODE_ANNOTATION}"
    for entry in objs(meta.get("managedFields")):
        owned = obj(obj(obj(entry.get("fieldsV1")).get("f:metadata")).get("f:annotations"))
        if field in owned:
            return text(entry.get("manager")), parse_time(entry.get("time"))
    return "", None


def claim_from_dict(raw: object) -> Claim:
    """A PersistentVolumeClaim."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    annotations = texts(meta.get("annotations"))
    errors: list[str] = []
    requested = _storage(
        obj(obj(spec.get("resources")).get("requests")).get(STORAGE),
        "spec.resources.requests.storage",
        errors,
    )
    selector = spec.get("selector")
    selected_by, selected_at = (
        _selected(meta) if SELECTED_NODE_ANNOTATION in annotations else ("", None)
    )
    return Claim(
        namespace=text(meta.get("namespace"), "default"),
        name=text(meta.get("name")),
        volume=text(spec.get("volumeName")),
        storage_class=_class_of(meta, spec, "storageClassName"),
        deleting=bool(meta.get("deletionTimestamp")),
        uid=text(meta.get("uid")),
        requested=requested,
        access_modes=frozenset(m for m in listed(spec.get("accessModes")) if isinstance(m, str)),
        block=text(spec.get("volumeMode")) == BLOCK,
        selector=label_selector(selector) if selector is not None else None,
        attributes_class=text(spec.get("volumeAttributesClassName")),
        bind_completed=BIND_COMPLETED_ANNOTATION in annotations,
        selected_node=annotations.get(SELECTED_NODE_ANNOTATION),
        selected_by=selected_by,
        selected_at=selected_at,
        errors=tuple(errors),
        resource_version=text(meta.get("resourceVersion")),
        controller_uid=next(
            (
                text(owner.get("uid"))
                for owner in objs(meta.get("ownerReferences"))
                if owner.get("controller") is True
            ),
            "",
        ),
        lost=text(obj(body.get("status")).get("phase")) == LOST,
    )


def volume_from_dict(raw: object) -> Volume:
    """A PersistentVolume."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    errors: list[str] = []
    capacity = _storage(obj(spec.get("capacity")).get(STORAGE), "spec.capacity.storage", errors)
    ref = spec.get("claimRef")
    claim = (
        ClaimRef(
            namespace=text(obj(ref).get("namespace")),
            name=text(obj(ref).get("name")),
            uid=text(obj(ref).get("uid")),
        )
        if type(ref) is dict
        else None
    )
    return Volume(
        name=text(meta.get("name")),
        node_affinity=node_selector_terms(obj(spec.get("nodeAffinity")).get("required")),
        capacity=capacity,
        storage_class=_class_of(meta, spec, "storageClassName"),
        access_modes=frozenset(m for m in listed(spec.get("accessModes")) if isinstance(m, str)),
        block=text(spec.get("volumeMode")) == BLOCK,
        attributes_class=text(spec.get("volumeAttributesClassName")),
        claim=claim,
        phase=text(obj(body.get("status")).get("phase")),
        labels=texts(meta.get("labels")),
        deleting=bool(meta.get("deletionTimestamp")),
        csi_driver=text(obj(spec.get("csi")).get("driver")),
        volume_handle=text(obj(spec.get("csi")).get("volumeHandle")),
        errors=tuple(errors),
        resource_version=text(meta.get("resourceVersion")),
    )


def storage_class_from_dict(raw: object) -> tuple[str, StorageClass]:
    """A StorageClass by name: its volumeBindingMode (Immediate unless it says otherwise),
    provisioner and allowedTopologies."""
    body = obj(raw)
    name = text(obj(body.get("metadata")).get("name"))
    return name, StorageClass(
        name=name,
        binding_mode=text(body.get("volumeBindingMode"), IMMEDIATE),
        provisioner=text(body.get("provisioner")),
        allowed_topologies=tuple(
            TopologyTerm(
                tuple(
                    (
                        text(e.get("key")),
                        tuple(v for v in listed(e.get("values")) if isinstance(v, str)),
                    )
                    for e in objs(term.get("matchLabelExpressions"))
                )
            )
            for term in objs(body.get("allowedTopologies"))
        ),
    )


def csi_node_from_dict(raw: object) -> CsiNode:
    """A CSINode: its drivers' attach limits (a count that is not a whole number >= 0 is
    left out: no limit is read from it)."""
    body = obj(raw)
    limits: dict[str, int] = {}
    for driver in objs(obj(body.get("spec")).get("drivers")):
        count = whole(obj(driver.get("allocatable")).get("count"))
        name = text(driver.get("name"))
        if name and count is not None and count >= 0:
            limits[name] = count
    return CsiNode(name=text(obj(body.get("metadata")).get("name")), limits=limits)


def csi_driver_from_dict(raw: object) -> CsiDriver:
    body = obj(raw)
    return CsiDriver(
        name=text(obj(body.get("metadata")).get("name")),
        storage_capacity=obj(body.get("spec")).get("storageCapacity") is True,
    )


def _size(raw: object) -> int | None:
    """A storage quantity in bytes; None where none is given or it cannot be read (a
    capacity that cannot be read holds no volume)."""
    if raw is None:
        return None
    try:
        return quantity(STORAGE, raw)
    except ValueError:
        return None


def storage_capacity_from_dict(raw: object) -> StorageCapacity:
    """A CSIStorageCapacity (its fields are at the top level, not under a spec)."""
    body = obj(raw)
    meta = obj(body.get("metadata"))
    return StorageCapacity(
        namespace=text(meta.get("namespace"), "default"),
        name=text(meta.get("name")),
        storage_class=text(body.get("storageClassName")),
        node_topology=label_selector(body.get("nodeTopology")),
        capacity=_size(body.get("capacity")),
        maximum_volume_size=_size(body.get("maximumVolumeSize")),
    )


def volume_attachment_from_dict(raw: object) -> VolumeAttachment:
    body = obj(raw)
    spec = obj(body.get("spec"))
    return VolumeAttachment(
        name=text(obj(body.get("metadata")).get("name")),
        node=text(spec.get("nodeName")),
        attacher=text(spec.get("attacher")),
        volume=text(obj(spec.get("source")).get("persistentVolumeName")),
    )
