"""``resource.k8s.io/v1`` objects (plain dicts) to the model of dynamic resource allocation,
and an allocation back to the ``status.allocation`` the API takes.

The API server validates these objects; what it would reject is still read without a crash
(a field of the wrong type is absent), and what this scheduler cannot allocate faithfully is
marked so that it is never allocated wrongly: devices that consume shared counters or carry
binding conditions, slices with per-device node selection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.codecs.selectors import node_selector_terms, tolerations
from scheduler.codecs.shapes import listed, obj, objs, text, texts, whole
from scheduler.model.devices import (
    EXACT_COUNT,
    EXTENDED_CLAIM_ANNOTATION,
    EXTENDED_CLAIM_NAME,
    Allocation,
    Attribute,
    Consumer,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DeviceResult,
    DeviceTaint,
    MatchAttribute,
    ResourceClaim,
    ResourceSlice,
    SubRequest,
    is_extended_resource,
)
from scheduler.model.pods import ContainerAsk, NodeSelectorTerm, PodClaim
from scheduler.model.times import parse_time

Obj = Mapping[str, Any]


def _attribute(raw: Obj) -> Attribute | None:
    if isinstance(raw.get("bool"), bool):
        return Attribute("bool", raw["bool"])
    if (number := whole(raw.get("int"))) is not None:
        return Attribute("int", number)
    if isinstance(raw.get("string"), str):
        return Attribute("string", raw["string"])
    if isinstance(raw.get("version"), str):
        return Attribute("version", raw["version"])
    return None


def _taints(raw: object) -> tuple[DeviceTaint, ...]:
    return tuple(
        DeviceTaint(
            key=text(t.get("key")), value=text(t.get("value")), effect=text(t.get("effect"))
        )
        for t in objs(raw)
    )


def _device(raw: Obj) -> Device:
    attributes = {}
    for name, value in obj(raw.get("attributes")).items():
        if isinstance(name, str) and (attribute := _attribute(obj(value))) is not None:
            attributes[name] = attribute
    capacity = {
        name: value
        for name, entry in obj(raw.get("capacity")).items()
        if isinstance(name, str) and isinstance(value := obj(entry).get("value"), str | int)
    }
    unsupported = ""
    if listed(raw.get("consumesCounters")):
        unsupported = "consumes shared counters (partitionable devices)"
    elif listed(raw.get("bindingConditions")):
        unsupported = "has binding conditions"
    return Device(
        name=text(raw.get("name")),
        attributes=attributes,
        capacity={k: str(v) for k, v in capacity.items()},
        taints=_taints(raw.get("taints")),
        allow_multiple_allocations=raw.get("allowMultipleAllocations") is True,
        unsupported=unsupported,
    )


def slice_from_dict(raw: object) -> ResourceSlice:
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    pool = obj(spec.get("pool"))
    selector = spec.get("nodeSelector")
    unsupported = ""
    if spec.get("perDeviceNodeSelection") is True:
        unsupported = "selects nodes per device (perDeviceNodeSelection)"
    elif listed(spec.get("sharedCounters")):
        unsupported = "publishes shared counters (partitionable devices)"
    return ResourceSlice(
        name=text(meta.get("name")),
        driver=text(spec.get("driver")),
        pool=text(pool.get("name")),
        generation=whole(pool.get("generation")) or 0,
        slice_count=whole(pool.get("resourceSliceCount")) or 1,
        node_name=text(spec.get("nodeName")),
        all_nodes=spec.get("allNodes") is True,
        node_selector=node_selector_terms(selector) if isinstance(selector, Mapping) else None,
        devices=tuple(_device(d) for d in objs(spec.get("devices"))),
        unsupported=unsupported,
    )


def _selectors(raw: object) -> tuple[str, ...]:
    """CEL expressions; a selector of another kind (none exists yet) is kept as an
    expression that cannot compile, so that it matches nothing and says so."""
    return tuple(
        text(obj(s.get("cel")).get("expression")) or "<a selector without a CEL expression>"
        for s in objs(raw)
    )


def device_class_from_dict(raw: object) -> DeviceClass:
    body = obj(raw)
    spec = obj(body.get("spec"))
    return DeviceClass(
        name=text(obj(body.get("metadata")).get("name")),
        selectors=_selectors(spec.get("selectors")),
        config=tuple(objs(spec.get("config"))),
        extended_resource_name=text(spec.get("extendedResourceName")),
        created=parse_time(obj(body.get("metadata")).get("creationTimestamp")) or 0.0,
    )


def _sub_request(raw: Obj, name: str) -> SubRequest:
    mode = text(raw.get("allocationMode"), EXACT_COUNT)
    count = whole(raw.get("count"))
    return SubRequest(
        name=name,
        device_class=text(raw.get("deviceClassName")),
        selectors=_selectors(raw.get("selectors")),
        mode=mode,
        count=(count if count is not None else 1) if mode == EXACT_COUNT else 0,
        admin_access=raw.get("adminAccess") is True,
        tolerations=tolerations(raw.get("tolerations")),
    )


def _request(raw: Obj) -> DeviceRequest:
    name = text(raw.get("name"))
    exactly = raw.get("exactly")
    return DeviceRequest(
        name=name,
        exactly=_sub_request(obj(exactly), name) if isinstance(exactly, Mapping) else None,
        first_available=tuple(
            _sub_request(s, text(s.get("name"))) for s in objs(raw.get("firstAvailable"))
        ),
    )


def device_request_to_dict(request: DeviceRequest) -> dict[str, Any]:
    """An ``exactly`` request as the API takes it (what the scheduler writes into the claims
    it makes: a class and a count)."""
    sub = request.exactly
    if sub is None:
        raise ValueError(f"request {request.name}: only an exactly request can be written")
    body: dict[str, Any] = {"deviceClassName": sub.device_class, "allocationMode": sub.mode}
    if sub.mode == EXACT_COUNT:
        body["count"] = sub.count
    if sub.selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in sub.selectors]
    return {"name": request.name, "exactly": body}


def _node_selector_to_dict(terms: tuple[NodeSelectorTerm, ...]) -> dict[str, Any]:
    def reqs(rs: tuple) -> list[dict[str, Any]]:
        return [
            {
                "key": r.key,
                "operator": r.operator,
                **({"values": list(r.values)} if r.values else {}),
            }
            for r in rs
        ]

    return {
        "nodeSelectorTerms": [
            {
                **({"matchExpressions": reqs(t.match_expressions)} if t.match_expressions else {}),
                **({"matchFields": reqs(t.match_fields)} if t.match_fields else {}),
            }
            for t in terms
        ]
    }


def _allocation(raw: object) -> Allocation | None:
    if not isinstance(raw, Mapping):
        return None
    devices = obj(raw.get("devices"))
    selector = raw.get("nodeSelector")
    return Allocation(
        results=tuple(
            DeviceResult(
                request=text(r.get("request")),
                device=DeviceId(text(r.get("driver")), text(r.get("pool")), text(r.get("device"))),
                admin_access=r.get("adminAccess") is True,
            )
            for r in objs(devices.get("results"))
        ),
        node_selector=node_selector_terms(selector) if isinstance(selector, Mapping) else None,
        config=tuple(objs(devices.get("config"))),
    )


def resource_claim_from_dict(raw: object) -> ResourceClaim:
    body = obj(raw)
    meta, spec, status = obj(body.get("metadata")), obj(body.get("spec")), obj(body.get("status"))
    devices = obj(spec.get("devices"))
    requests = tuple(_request(r) for r in objs(devices.get("requests")))
    constraints = []
    problem = ""
    for i, c in enumerate(objs(devices.get("constraints"))):
        attribute = text(c.get("matchAttribute"))
        if not attribute:
            problem = f"constraint #{i}: empty constraint (unsupported constraint type?)"
            continue
        constraints.append(
            MatchAttribute(
                attribute, tuple(t for t in listed(c.get("requests")) if isinstance(t, str))
            )
        )
    for request in requests:
        if request.exactly is None and not request.first_available:
            problem = problem or f"request {request.name}: unknown request type"
    return ResourceClaim(
        namespace=text(meta.get("namespace"), "default"),
        name=text(meta.get("name")),
        uid=text(meta.get("uid")),
        resource_version=text(meta.get("resourceVersion")),
        requests=requests,
        constraints=tuple(constraints),
        config=tuple(objs(devices.get("config"))),
        allocation=_allocation(status.get("allocation")),
        reserved_for=tuple(
            Consumer(
                resource=text(r.get("resource")),
                name=text(r.get("name")),
                uid=text(r.get("uid")),
                api_group=text(r.get("apiGroup")),
            )
            for r in objs(status.get("reservedFor"))
        ),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(f for f in listed(meta.get("finalizers")) if isinstance(f, str)),
        extended=texts(meta.get("annotations")).get(EXTENDED_CLAIM_ANNOTATION) == "true",
        owner_uid=next(
            (
                text(o.get("uid"))
                for o in objs(meta.get("ownerReferences"))
                if o.get("controller") is True
            ),
            "",
        ),
        problem=problem,
    )


def pod_claims(spec: Obj, status: Obj) -> tuple[PodClaim, ...]:
    """A pod's ``spec.resourceClaims``, each with the claim it names: its own
    ``resourceClaimName``, or the one ``status.resourceClaimStatuses`` says the controller
    made from its template."""
    made = {
        text(s.get("name")): text(s.get("resourceClaimName"))
        for s in objs(status.get("resourceClaimStatuses"))
    }
    claims = []
    for entry in objs(spec.get("resourceClaims")):
        name = text(entry.get("name"))
        template = text(entry.get("resourceClaimTemplateName"))
        claim = text(entry.get("resourceClaimName")) or (made.get(name, "") if template else "")
        claims.append(PodClaim(name=name, claim=claim, template=template))
    return tuple(claims)


def container_asks(
    spec: Obj, amounts: Callable[[object], Mapping[str, int]]
) -> tuple[ContainerAsk, ...]:
    """Each container's requests of extended resources (``amounts`` reads a ResourceList),
    init containers first, as kube-scheduler numbers them; none for a pod that asks none."""
    asks = []
    inits = objs(spec.get("initContainers"))
    for index, container in enumerate((*inits, *objs(spec.get("containers")))):
        requests = amounts(obj(container.get("resources")).get("requests"))
        extended = tuple(
            (name, amount)
            for name, amount in sorted(requests.items())
            if amount > 0 and is_extended_resource(name)
        )
        if extended:
            asks.append(
                ContainerAsk(
                    index=index,
                    name=text(container.get("name")),
                    short_lived=index < len(inits) and container.get("restartPolicy") != "Always",
                    keys=tuple(sorted(requests)),
                    asks=extended,
                )
            )
    return tuple(asks)


def extended_claim(status: Obj) -> tuple[PodClaim | None, frozenset[str]]:
    """The claim ``status.extendedResourceClaimStatus`` names (as an entry of the pod's
    claims) and the resources it serves; (None, none) if it names none."""
    raw = obj(status.get("extendedResourceClaimStatus"))
    name = text(raw.get("resourceClaimName"))
    if not name:
        return None, frozenset()
    served = frozenset(text(m.get("resourceName")) for m in objs(raw.get("requestMappings")))
    return PodClaim(name=EXTENDED_CLAIM_NAME, claim=name), served


def allocation_to_dict(allocation: Allocation) -> dict[str, Any]:
    """``status.allocation`` as the API takes it."""
    results = []
    for r in allocation.results:
        entry: dict[str, Any] = {
            "request": r.request,
            "driver": r.device.driver,
            "pool": r.device.pool,
            "device": r.device.device,
        }
        if r.admin_access:
            entry["adminAccess"] = True
        if r.tolerations:
            entry["tolerations"] = [
                {
                    k: v
                    for k, v in (
                        ("key", t.key),
                        ("operator", t.operator),
                        ("value", t.value),
                        ("effect", t.effect),
                    )
                    if v
                }
                for t in r.tolerations
            ]
        results.append(entry)
    body: dict[str, Any] = {"devices": {"results": results}}
    if allocation.config:
        body["devices"]["config"] = [dict(c) for c in allocation.config]
    if allocation.node_selector is not None:
        body["nodeSelector"] = _node_selector_to_dict(allocation.node_selector)
    return body
