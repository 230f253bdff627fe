"""Allocating the devices of ResourceClaims on a node: kube-scheduler's structured allocator
(``k8s.io/dynamic-resource-allocation/structured``) in Python, for whole gangs.

The search is the upstream one: claims in order, their requests in order, each request's
devices one at a time from the pools the node reaches, backtracking on a dead end; a
``firstAvailable`` request tries its alternatives in order; ``allocationMode: All`` takes
every matching device or fails. Two deliberate differences, neither changes whether a node
can take the pod: a request's devices are chosen in pool order only (upstream also tries
their permutations, which cannot succeed where the ordered choice failed, since a
``matchAttribute`` constraint does not care for order), and pools are visited sorted by
driver and name (upstream, in a Go map's order: whichever devices it picks is luck).

What is in use comes from outside: the claims' allocations in the snapshot, and the devices
taken by this pass's placements so far (the ledger's); a gang is placed, or undone, whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduler.core.extending import extended_requests
from scheduler.core.filtering import term_holds, tolerates
from scheduler.model.devices import (
    ALL,
    DEVICE_CLASS_RESOURCE,
    EXTENDED_CLAIM_NAME,
    MAX_RESERVED,
    MAX_RESULTS,
    Allocation,
    Attribute,
    Consumer,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DeviceResult,
    MatchAttribute,
    ResourceClaim,
    ResourceSlice,
    SelectorError,
    SubRequest,
    class_resource,
    extended_classes,
    served_by,
)
from scheduler.model.nodes import Node, Taint
from scheduler.model.pods import NodeSelectorTerm, Pod, Requirement
from scheduler.model.resources import Resources

# kube-scheduler's words (the DynamicResources plugin), so that FailedScheduling reads the same.
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"


# (expression, driver, device) -> whether the device matches; raises SelectorError. The
# shell gives codecs.cel's (compiled selectors kept across passes).
Evaluate = Callable[[str, str, Device], bool]


def no_selectors(expression: str, driver: str, device: Device) -> bool:
    """Where no evaluator was given (a snapshot built by hand): selectors cannot be
    evaluated, and a device a selector names is never allocated."""
    raise SelectorError("CEL compile error: no CEL evaluator in this snapshot")


@dataclass(frozen=True, slots=True)
class Pool:
    driver: str
    name: str
    slices: tuple[ResourceSlice, ...] = ()
    incomplete: bool = False
    invalid: str = ""


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """What placing one pod on one node does to its claims: ``allocate`` the claims that
    have no allocation yet (each once, with the pod that brought it), and reserve every
    claim of the pod for it."""

    node: str
    allocate: tuple[tuple[ResourceClaim, Allocation], ...] = ()
    reserve: tuple[ResourceClaim, ...] = ()
    # The claim to make for the pod's extended resources that devices serve on this node
    # (it is also in ``allocate`` and ``reserve``), and which device request serves each
    # container's resource: (container, resource, request).
    extended: ResourceClaim | None = None
    mappings: tuple[tuple[str, str, str], ...] = ()


def _slice_reaches(s: ResourceSlice, node: Node) -> bool:
    if s.node_name:
        return s.node_name == node.name
    if s.all_nodes:
        return True
    if s.node_selector is not None:
        return any(term_holds(term, node) for term in s.node_selector)
    return False


def _lookup(device: Device, driver: str, name: str) -> Attribute | None:
    """An attribute by fully qualified name; the driver's own domain may be left out where
    the device published it (``lookupAttribute``)."""
    found = device.attributes.get(name)
    if found is not None:
        return found
    domain, slash, short = name.partition("/")
    if not slash or domain != driver:
        return None
    return device.attributes.get(short)


def _tainted(device: Device, request: SubRequest) -> bool:
    return any(
        t.effect in ("NoSchedule", "NoExecute")
        and not tolerates(request.tolerations, Taint(t.key, t.value, t.effect))
        for t in device.taints
    )


@dataclass(slots=True)
class _Constraint:
    """matchAttribute while a search runs: the value the first device set, and how many
    devices hold it now."""

    spec: MatchAttribute
    value: Attribute | None = None
    count: int = 0

    def applies(self, request: str, sub: str) -> bool:
        names = self.spec.requests
        return not names or request in names or (bool(sub) and f"{request}/{sub}" in names)

    def add(self, request: str, sub: str, device: Device, driver: str) -> bool:
        if not self.applies(request, sub):
            return True
        attribute = _lookup(device, driver, self.spec.attribute)
        if attribute is None:
            return False
        if self.count == 0:
            self.value, self.count = attribute, 1
            return True
        if attribute != self.value:  # kind and value: an int 1 is no bool true
            return False
        self.count += 1
        return True

    def remove(self, request: str, sub: str) -> None:
        if self.applies(request, sub):
            self.count -= 1


@dataclass(slots=True)
class _Search:
    """One allocation of some claims on one node."""

    world: DeviceWorld
    node: Node
    claims: Sequence[ResourceClaim]
    pools: list[Pool]
    taken: Callable[[DeviceId], bool]
    # Devices the snapshot's claims hold that a what-if has given back (their holders'
    # pods evicted): usable in it.
    freed: Callable[[DeviceId], bool] = lambda device: False
    constraints: list[list[_Constraint]] = field(default_factory=list)
    chosen: set[DeviceId] = field(default_factory=set)
    results: list[list[tuple[str, DeviceId, ResourceSlice, SubRequest]]] = field(
        default_factory=list
    )
    # The alternative each firstAvailable request settled on, by (claim, request) index.
    picked: dict[tuple[int, int], int] = field(default_factory=dict)
    steps: int = 0


class DeviceWorld:
    """The devices of the cluster for one pass: slices by the nodes they reach, classes,
    claims, and which devices the snapshot's allocations hold. Selector results are kept
    per device and request for the pass (devices do not change within it)."""

    # A search that has not finished after this many device steps gives up on the node
    # (upstream bounds it by time: the Filter's timeout).
    MAX_STEPS = 200_000

    def __init__(
        self,
        *,
        slices: Iterable[ResourceSlice],
        classes: Mapping[str, DeviceClass],
        claims: Mapping[tuple[str, str], ResourceClaim],
        evaluate: Evaluate,
        shared: Mapping[tuple[str, tuple[str, str]], Consumer] = MappingProxyType({}),
    ) -> None:
        self.classes = classes
        self.claims = claims
        # Claims an upstream PodGroup shares among its members (its spec.resourceClaims, as
        # each member's own entry names them: kube-scheduler's BindTo decides pod by pod),
        # by (pod uid, claim): reserved for the group, made from a template for it.
        self.shared = shared
        self._evaluate = evaluate
        self._slices = tuple(slices)
        self._on_node: dict[str, list[ResourceSlice]] = {}
        self._elsewhere: list[ResourceSlice] = []
        self._by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self._slices:
            self._by_pool.setdefault((s.driver, s.pool), []).append(s)
            if s.unsupported:
                continue
            if s.node_name:
                self._on_node.setdefault(s.node_name, []).append(s)
            elif s.all_nodes or s.node_selector is not None:
                self._elsewhere.append(s)
        # Upstream leaves admin-access results out: such a claim watches a device, it does
        # not hold it (``allocateddevices.go``).
        self.in_use: frozenset[DeviceId] = frozenset(
            d for c in claims.values() if c.allocation is not None for d in c.allocation.held
        )
        # The class serving each extended resource name a pod may ask devices by.
        self.extended = extended_classes(classes)
        # The claims made for pods' extended resources, by their pod's uid (the ones in the
        # API server; not those a bind in flight is making).
        self.made_for: dict[str, ResourceClaim] = {
            c.owner_uid: c
            for c in claims.values()
            if c.extended and c.owner_uid and not c.name.startswith(EXTENDED_CLAIM_NAME)
        }
        self._pools: dict[str, list[Pool]] = {}
        self._served: dict[str, tuple[str, ...]] = {}
        self._counted_on: dict[tuple[str, str], frozenset[DeviceId]] = {}
        self._matches: dict[tuple[DeviceId, str, tuple[str, ...]], bool | str] = {}
        # The devices of a node that a request's selectors take (static within a pass).
        self._selected_on: dict[
            tuple[str, str, tuple[str, ...]], list[tuple[DeviceId, Device, ResourceSlice]] | str
        ] = {}

    # -- what a pod names ---------------------------------------------------------------------

    def claims_of(self, pod: Pod) -> list[ResourceClaim] | str:
        """The pod's claims, or why it cannot be placed anywhere now (kube-scheduler's
        PreFilter: a claim not made yet, missing, being deleted, not the pod's own)."""
        if pod.extended and (left := self.made_for.get(pod.ref.uid)) is not None:
            # kube-scheduler's words, and why: each attempt makes a claim of its own.
            return (
                f"cannot schedule extended resource claim: ResourceClaim "
                f"{left.namespace}/{left.name}, made by an attempt that did not bind, is "
                "being deleted"
            )
        found = []
        for entry in pod.resource_claims:
            if not entry.claim:
                if entry.template:
                    return (
                        f'pod "{pod.ref.namespace}/{pod.ref.name}": ResourceClaim not created yet'
                    )
                return (
                    f'pod "{pod.ref.namespace}/{pod.ref.name}", spec.resourceClaim '
                    f'"{entry.name}": none of the supported fields are set'
                )
            claim = self.claims.get((pod.ref.namespace, entry.claim))
            if claim is None:
                return f'resourceclaim.resource.k8s.io "{entry.claim}" not found'
            if claim.deleting:
                return f'resourceclaim "{claim.name}" is being deleted'
            group = self.shared.get((pod.ref.uid, claim.key))
            made_for = group.uid if group is not None else pod.ref.uid
            if entry.template and pod.ref.uid and claim.owner_uid != made_for:
                owner = (
                    f"neither Pod nor PodGroup {group.name} is the owner"
                    if group is not None
                    else "Pod is not owner"
                )
                return (
                    f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod "
                    f"{pod.ref.namespace}/{pod.ref.name} ({owner})"
                )
            if claim.problem:
                return f"resource claim {claim.namespace}/{claim.name}, {claim.problem}"
            if claim.allocation is None:
                for request in claim.requests:
                    for sub in (request.exactly,) if request.exactly else request.first_available:
                        if sub.device_class not in self.classes:
                            return (
                                f"request {request.name}: device class {sub.device_class} "
                                "does not exist"
                            )
            found.append(claim)
        return found

    def asks_devices(self, pod: Pod) -> bool:
        """Whether placing ``pod`` may allocate devices: it names claims, or asks an
        extended resource a class serves (on nodes that do not publish it)."""
        if pod.resource_claims:
            return True
        if not pod.extended or not self.extended:  # most pods, and clusters of no classes
            return False
        return any(r in self.extended for ask in pod.extended for r, _ in ask.asks)

    def counted(self, requests: Resources) -> Resources:
        """``requests`` with each class's devices asked by its implicit name renamed to the
        name the class is counted by (its ``extendedResourceName``, where it has one): as a
        queue counts them, and as ``served`` knows them."""
        if not any(name.startswith(DEVICE_CLASS_RESOURCE) for name in requests):
            return requests
        renamed: dict[str, int] = {}
        for name, amount in requests.items():
            counted = (
                class_resource(name.removeprefix(DEVICE_CLASS_RESOURCE), self.classes)
                if name.startswith(DEVICE_CLASS_RESOURCE)
                else name
            )
            renamed[counted] = renamed.get(counted, 0) + amount
        return Resources(renamed)

    def delegated(self, pod: Pod, node: Node) -> dict[str, str]:
        """The extended resources ``pod`` asks that devices serve on ``node`` (it publishes
        none of them: a device plugin's are counted as plain resources), each with the class
        that serves it."""
        if not pod.extended:
            return {}
        allocatable = node.allocatable
        return {
            resource: device_class
            for ask in pod.extended
            for resource, _ in ask.asks
            if (device_class := self.extended.get(resource)) is not None
            and not allocatable.get(resource, 0)
        }

    def extended_claim(self, pod: Pod, node: Node) -> ClaimPlan | None:
        """The claim the scheduler makes for ``pod``'s extended resources served by devices
        on ``node`` (unallocated, not yet named: the API server names it), with its
        mappings; None where devices serve none of them there."""
        resources = self.delegated(pod, node)
        if not resources:
            return None
        requests, mappings = extended_requests(pod.extended, resources)
        claim = ResourceClaim(
            namespace=pod.ref.namespace,
            # Unique per pod in a pass, and no name a claim in the API can have.
            name=f"{EXTENDED_CLAIM_NAME}{pod.ref.name}",
            requests=requests,
            owner_uid=pod.ref.uid,
            extended=True,
        )
        return ClaimPlan(node.name, extended=claim, mappings=mappings)

    def shape(
        self, pod: Pod, *, allocated: Callable[[tuple[str, str]], Allocation | None]
    ) -> tuple | None:
        """What the pod's claims ask, where that alone decides which nodes can give it
        (every claim its own and not allocated yet): pods of one shape find devices on the
        same nodes, and a node that had none for one has none for the next in the pass
        (devices are only taken). None where a claim is allocated already (its node
        decides) or cannot be had."""
        if pod.extended:
            return None  # what its devices are depends on what each node publishes
        claims = self.claims_of(pod)
        if isinstance(claims, str):
            return None
        shape = []
        for claim in claims:
            if claim.allocation is not None or allocated(claim.key) is not None:
                return None
            shape.append((claim.requests, claim.constraints))
        return tuple(shape)

    # -- pools ----------------------------------------------------------------------------------

    def pools(self, node: Node) -> list[Pool]:
        """The pools whose devices ``node`` reaches (``GatherPools``), sorted."""
        cached = self._pools.get(node.name)
        if cached is not None:
            return cached
        newest: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in (*self._on_node.get(node.name, ()), *self._elsewhere):
            if not _slice_reaches(s, node):
                continue
            key = (s.driver, s.pool)
            have = newest.get(key)
            if have is None or s.generation > have[0].generation:
                newest[key] = [s]
            elif s.generation == have[0].generation:
                have.append(s)
        pools = []
        for (driver, name), slices in sorted(newest.items()):
            generation, count = slices[0].generation, slices[0].slice_count
            if len(slices) != count:
                everywhere = self._by_pool.get((driver, name), [])
                if any(s.generation > generation for s in everywhere):
                    continue  # obsolete: a newer generation is being published
                if sum(s.generation == generation for s in everywhere) != count:
                    pools.append(Pool(driver, name, incomplete=True))
                    continue
            seen: set[str] = set()
            invalid = ""
            for s in slices:
                for d in s.devices:
                    if d.name in seen:
                        invalid = f"duplicate device name {d.name}"
                    seen.add(d.name)
            pools.append(Pool(driver, name, tuple(slices), invalid=invalid))
        self._pools[node.name] = pools
        return pools

    def served(self, resource: str) -> tuple[str, ...]:
        """The classes whose devices count as ``resource`` (``model.devices.served_by``):
        none for a resource no device serves."""
        known = self._served.get(resource)
        if known is None:
            known = self._served[resource] = served_by(resource, self.classes)
        return known

    def on_node(self, node: Node, resource: str) -> frozenset[DeviceId]:
        """The devices counted as ``resource`` that ``node`` reaches (of the pools it sees
        whole), none of a class whose selectors cannot be evaluated; kept for the pass."""
        key = (node.name, resource)
        known = self._counted_on.get(key)
        if known is None:
            found: set[DeviceId] = set()
            for device_class in self.served(resource):
                try:
                    candidates = self._candidates(self.pools(node), SubRequest("", device_class))
                except SelectorError:
                    continue  # a class whose selectors cannot be evaluated selects nothing
                found.update(d for d, _, _ in candidates)
            known = self._counted_on[key] = frozenset(found)
        return known

    def count_free(
        self, resource: str, *, nodes: Iterable[Node], held: Callable[[DeviceId], bool]
    ) -> int:
        """How many devices counted as ``resource`` that ``nodes`` reach ``held`` does not
        say are taken (each once, though several nodes reach it): the room a queue's
        shares and guarantees of it weigh."""
        devices: set[DeviceId] = set()
        for node in nodes:
            devices.update(self.on_node(node, resource))
        return sum(1 for device in devices if not held(device))

    # -- selectors ------------------------------------------------------------------------------

    def _selected(self, device: Device, device_id: DeviceId, request: SubRequest) -> bool:
        """The class's selectors and the request's hold for the device (``isSelectable``);
        raises SelectorError with upstream's words when one cannot be evaluated."""
        key = (device_id, request.device_class, request.selectors)
        known = self._matches.get(key)
        if known is None:
            known = self._match(device, device_id, request)
            self._matches[key] = known
        if isinstance(known, str):
            raise SelectorError(known)
        return known

    def _match(self, device: Device, device_id: DeviceId, request: SubRequest) -> bool | str:
        if device.unsupported:
            return False
        cls = self.classes.get(request.device_class)
        for owner, selectors in (
            (f"class {request.device_class}", cls.selectors if cls else ()),
            (f"request {request.name}", request.selectors),
        ):
            for i, expression in enumerate(selectors):
                try:
                    if not self._evaluate(expression, device_id.driver, device):
                        return False
                except SelectorError as error:
                    return f"{owner}: selector #{i}: {error}"
        return True

    # -- allocation -----------------------------------------------------------------------------

    def plan(
        self,
        pod: Pod,
        node: Node,
        *,
        taken: Callable[[DeviceId], bool],
        allocated: Callable[[tuple[str, str]], Allocation | None],
        reserved: Callable[[tuple[str, str]], int],
        freed: Callable[[DeviceId], bool] | None = None,
    ) -> ClaimPlan | str:
        """What placing ``pod`` on ``node`` does to its claims, or why it cannot go there.
        ``allocated`` gives a claim's allocation made earlier in this pass (a gang member
        placed before, sharing it), ``reserved`` how many consumers this pass added to a
        claim, ``taken`` whether this pass allocated a device."""
        claims = self.claims_of(pod)
        if isinstance(claims, str):
            return claims
        made = self.extended_claim(pod, node) if pod.extended else None
        if made is not None:
            claims = [*claims, made.extended]
        to_allocate: list[ResourceClaim] = []
        for claim in claims:
            allocation = claim.allocation or allocated(claim.key)
            if allocation is None:
                to_allocate.append(claim)
                continue
            if allocation.node_selector is not None and not any(
                term_holds(term, node) for term in allocation.node_selector
            ):
                return NOT_AVAILABLE
            group = self.shared.get((pod.ref.uid, claim.key))
            if group is not None:  # one entry for all of its members
                if not claim.reserved_for_group(group) and len(claim.reserved_for) >= MAX_RESERVED:
                    return IN_USE
            elif not claim.reserved_for_pod(pod.ref.uid) and (
                len(claim.reserved_for) + reserved(claim.key) >= MAX_RESERVED
            ):
                return IN_USE
        extended = (made.extended, made.mappings) if made is not None else (None, ())
        if not to_allocate:
            return ClaimPlan(node.name, (), tuple(claims), *extended)
        done = self.allocate(to_allocate, node, taken=taken, freed=freed)
        if isinstance(done, str):
            return done
        return ClaimPlan(
            node.name, tuple(zip(to_allocate, done, strict=True)), tuple(claims), *extended
        )

    def allocate(
        self,
        claims: Sequence[ResourceClaim],
        node: Node,
        *,
        taken: Callable[[DeviceId], bool] = lambda d: False,
        freed: Callable[[DeviceId], bool] | None = None,
    ) -> list[Allocation] | str:
        """Devices for every claim on ``node`` together, or why not (``Allocate``)."""
        pools = self.pools(node)
        search = _Search(self, node, claims, pools, taken)
        if freed is not None:
            search.freed = freed
        try:
            for claim in claims:
                problem = self._validate(claim, pools)
                if problem:
                    return problem
                search.constraints.append([_Constraint(c) for c in claim.constraints])
                search.results.append([])
            found = self._claim(search, 0)
        except SelectorError as error:
            return str(error)
        if not found:
            if any(p.invalid for p in pools):
                return f"{CANNOT_ALLOCATE}: invalid resource pools were encountered"
            return CANNOT_ALLOCATE
        return [self._result(search, i) for i in range(len(claims))]

    def _validate(self, claim: ResourceClaim, pools: list[Pool]) -> str:
        """What upstream checks before it searches (``validateDeviceRequest``): classes that
        exist, "All" only over pools that are whole, at most 32 devices per claim."""
        total = 0
        for request in claim.requests:
            fewest: int | None = None
            for sub in (request.exactly,) if request.exactly else request.first_available:
                if sub.device_class not in self.classes:
                    return f"request {request.name}: device class {sub.device_class} does not exist"
                need = sub.count
                if sub.mode == ALL:
                    for pool in pools:
                        state = "being updated" if pool.incomplete else "invalid"
                        if pool.incomplete or pool.invalid:
                            return (
                                f"claim {claim.namespace}/{claim.name}, request "
                                f"{request.name}: asks for all devices, but resource pool "
                                f"{pool.driver}/{pool.name} is currently {state}"
                            )
                    need = len(self._candidates(pools, sub))
                fewest = need if fewest is None else min(fewest, need)
            total += fewest or 0
        if total > MAX_RESULTS:
            return (
                f"claim {claim.namespace}/{claim.name}: number of requested devices {total} "
                f"exceeds the claim limit of {MAX_RESULTS}"
            )
        return ""

    def _claim(self, search: _Search, index: int) -> bool:
        if index >= len(search.claims):
            return True
        return self._request(search, index, 0)

    def _request(self, search: _Search, ci: int, ri: int) -> bool:
        claim = search.claims[ci]
        if ri >= len(claim.requests):
            return self._claim(search, ci + 1)
        request = claim.requests[ri]
        if request.exactly is not None:
            return self._sub(
                search, ci=ci, ri=ri, request=request, sub=request.exactly, sub_name=""
            )
        for i, sub in enumerate(request.first_available):
            if self._sub(search, ci=ci, ri=ri, request=request, sub=sub, sub_name=sub.name):
                search.picked[(ci, ri)] = i
                return True
        return False

    def _devices_on(self, search: _Search) -> list[tuple[DeviceId, Device, ResourceSlice]]:
        """Every device of the pools the search's node reaches, in order (kept for the
        pass)."""
        key = (search.node.name, "", ())
        known = self._selected_on.get(key)
        if known is None:
            known = self._selected_on[key] = [
                (DeviceId(s.driver, s.pool, device.name), device, s)
                for pool in search.pools
                if not pool.incomplete and not pool.invalid
                for s in pool.slices
                for device in s.devices
            ]
        assert not isinstance(known, str)
        return known

    def _selectable(
        self, search: _Search, sub: SubRequest
    ) -> list[tuple[DeviceId, Device, ResourceSlice]]:
        """``_candidates`` on the search's node, kept for the pass."""
        key = (search.node.name, sub.device_class, sub.selectors)
        known = self._selected_on.get(key)
        if known is None:
            try:
                known = self._candidates(search.pools, sub)
            except SelectorError as error:
                known = str(error)
            self._selected_on[key] = known
        if isinstance(known, str):
            raise SelectorError(known)
        return known

    def _candidates(
        self, pools: list[Pool], request: SubRequest
    ) -> list[tuple[DeviceId, Device, ResourceSlice]]:
        found = []
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            for s in pool.slices:
                for device in s.devices:
                    device_id = DeviceId(s.driver, s.pool, device.name)
                    if self._selected(device, device_id, request):
                        found.append((device_id, device, s))
        return found

    def _sub(
        self,
        search: _Search,
        *,
        ci: int,
        ri: int,
        request: DeviceRequest,
        sub: SubRequest,
        sub_name: str,
    ) -> bool:
        # "All": every device the selectors take, evaluated up front (upstream's validation
        # does so, and fails on a selector error); a count: the node's devices in order, each
        # checked as the search reaches it, in use first (upstream's order: a selector that
        # fails on a device in use, or on one past the first solution, is never evaluated).
        lazy = sub.mode != ALL
        candidates = self._devices_on(search) if lazy else self._selectable(search, sub)
        if sub.mode == ALL:
            if not candidates:
                return False
            need = len(candidates)
        else:
            need = sub.count
        mark = len(search.results[ci])
        if mark + need > MAX_RESULTS:
            return False

        def pick(start: int, left: int) -> bool:
            if left == 0:
                return self._request(search, ci, ri + 1)
            for at in range(start, len(candidates) - left + 1 if sub.mode != ALL else start + 1):
                search.steps += 1
                if search.steps > self.MAX_STEPS:
                    raise SelectorError(
                        f"node {search.node.name}: gave up allocating devices after "
                        f"{self.MAX_STEPS} steps"
                    )
                device_id, device, s = candidates[at]
                if not self._usable(search, ci, device_id, sub):
                    if sub.mode == ALL:
                        return False
                    continue
                if lazy and not self._selected(device, device_id, sub):
                    continue
                if _tainted(device, sub):
                    if sub.mode == ALL:
                        return False
                    continue
                added = []
                fits = True
                for constraint in search.constraints[ci]:
                    if not constraint.add(request.name, sub_name, device, device_id.driver):
                        fits = False
                        break
                    added.append(constraint)
                if not fits and sub.mode == ALL:
                    # Upstream gives up on the node here (an error, not a dead end).
                    claim = search.claims[ci]
                    raise SelectorError(
                        f"claim {claim.namespace}/{claim.name}, request {request.name}: "
                        f"cannot add device {device_id} because a claim constraint would not "
                        "be satisfied"
                    )
                if fits:
                    search.chosen.add(device_id)
                    search.results[ci].append(
                        (
                            request.name if not sub_name else f"{request.name}/{sub_name}",
                            device_id,
                            s,
                            sub,
                        )
                    )
                    if pick(at + 1, left - 1):
                        return True
                    search.results[ci].pop()
                    search.chosen.discard(device_id)
                for constraint in added:
                    constraint.remove(request.name, sub_name)
                if sub.mode == ALL:
                    return False
            return False

        return pick(0, need)

    def _usable(self, search: _Search, ci: int, device_id: DeviceId, sub: SubRequest) -> bool:
        if sub.admin_access:  # any device, in use or not, once per claim
            return all(d != device_id for _, d, _, _ in search.results[ci])
        return (
            device_id not in search.chosen
            and (device_id not in self.in_use or search.freed(device_id))
            and not search.taken(device_id)
        )

    def _result(self, search: _Search, ci: int) -> Allocation:
        claim = search.claims[ci]
        chosen = search.results[ci]
        results = tuple(
            DeviceResult(
                request=name,
                device=device_id,
                admin_access=sub.admin_access,
                tolerations=sub.tolerations,
            )
            for name, device_id, _, sub in chosen
        )
        return Allocation(
            results=results,
            node_selector=_node_selector(search.node, [s for _, _, s, _ in chosen]),
            config=self._config(claim, ci, search),
        )

    def _config(self, claim: ResourceClaim, ci: int, search: _Search) -> tuple[Mapping, ...]:
        """The classes' configuration (FromClass) then the claim's (FromClaim), as upstream."""
        config: list[dict] = []
        by_class: dict[str, list[dict]] = {}
        for ri, request in enumerate(claim.requests):
            if request.exactly is not None:
                sub, name = request.exactly, request.name
            else:
                picked = request.first_available[search.picked.get((ci, ri), 0)]
                sub, name = picked, f"{request.name}/{picked.name}"
            cls = self.classes.get(sub.device_class)
            if cls is None:
                continue
            entries = by_class.get(cls.name)
            if entries is not None:
                for entry in entries:
                    entry["requests"].append(name)
                continue
            entries = by_class[cls.name] = [
                {"source": "FromClass", "requests": [name], **_configuration(c)} for c in cls.config
            ]
            config.extend(entries)
        for c in claim.config:
            requests = [r for r in c.get("requests") or () if isinstance(r, str)]
            if not requests:
                config.append({"source": "FromClaim", "requests": [], **_configuration(c)})
                continue
            # Upstream's loop, duplicates included: once per request the entry names.
            for ri, request in enumerate(claim.requests):
                if request.name in requests:
                    config.append(
                        {"source": "FromClaim", "requests": requests, **_configuration(c)}
                    )
                    continue
                if request.exactly is not None or not request.first_available:
                    continue
                picked = request.first_available[search.picked.get((ci, ri), 0)]
                if f"{request.name}/{picked.name}" in requests:
                    config.append(
                        {"source": "FromClaim", "requests": requests, **_configuration(c)}
                    )
        for entry in config:
            if not entry["requests"]:
                del entry["requests"]
        return tuple(config)


def _configuration(entry: Mapping) -> dict:
    """The DeviceConfiguration part of a config entry (``opaque`` today)."""
    return {k: v for k, v in entry.items() if k not in ("requests", "source")}


def _node_selector(node: Node, slices: list[ResourceSlice]) -> tuple[NodeSelectorTerm, ...] | None:
    """Which nodes reach the allocated devices (``createNodeSelector``): the node itself if
    one device is local to it, else the selectors of network-attached slices merged."""
    expressions: list[Requirement] = []
    fields: list[Requirement] = []
    for s in slices:
        if s.node_name:
            return (
                NodeSelectorTerm(
                    match_fields=(Requirement("metadata.name", "In", (s.node_name,)),)
                ),
            )
        if s.node_selector and len(s.node_selector) == 1:
            term = s.node_selector[0]
            expressions += [r for r in term.match_expressions if r not in expressions]
            fields += [r for r in term.match_fields if r not in fields]
    if expressions or fields:
        return (NodeSelectorTerm(tuple(expressions), tuple(fields)),)
    return None
