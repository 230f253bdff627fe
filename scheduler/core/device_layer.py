"""What one ledger's placements did to resource claims: the ledger's book of devices.

A layer sits over its parent's as a scratch ledger sits over its parent: what it records
reaches the parent only when committed, and is forgotten with it. The devices themselves,
and what the snapshot's claims hold, are the pass's ``DeviceWorld``.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.claiming import ClaimPlan, DeviceWorld
from scheduler.model.devices import Allocation, DeviceId
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod, PodRef


class DeviceLayer:
    """Allocations made (by claim, with the pod that made it; None for one a gang's turn
    made before placing members), devices taken, devices a what-if gave back, consumers
    reserved, and each placed pod's plan, over the parent layer's."""

    def __init__(self, world: DeviceWorld, parent: DeviceLayer | None = None) -> None:
        self.world = world
        self._parent = parent
        self._allocated: dict[tuple[str, str], tuple[Allocation, PodRef | None]] = {}
        self._taken: set[DeviceId] = set()
        # Devices the snapshot's claims hold, given back in a what-if (``free``).
        self._freed: set[DeviceId] = set()
        self._reserved: dict[tuple[str, str], int] = {}
        self._plans: dict[tuple[PodRef, str], ClaimPlan] = {}
        self._pending: dict[tuple[PodRef, str], ClaimPlan | str] = {}

    def child(self) -> DeviceLayer:
        return DeviceLayer(self.world, self)

    def asks(self, pod: Pod) -> bool:
        """Whether placing ``pod`` may allocate devices (its claims, or its extended
        resources that devices serve)."""
        return self.world.asks_devices(pod)

    # -- what the layers from this one down did ------------------------------------------------

    def allocated(self, key: tuple[str, str]) -> Allocation | None:
        """The allocation this pass made for a claim, if it made one."""
        own = self._allocated.get(key)
        if own is not None:
            return own[0]
        return self._parent.allocated(key) if self._parent is not None else None

    def taken(self, device: DeviceId) -> bool:
        """Whether a placement of this pass took the device."""
        if device in self._taken:
            return True
        return self._parent.taken(device) if self._parent is not None else False

    def freed(self, device: DeviceId) -> bool:
        """Whether a what-if gave back the device (its claim's pods evicted)."""
        if device in self._freed:
            return True
        return self._parent.freed(device) if self._parent is not None else False

    def holds(self, device: DeviceId) -> bool:
        """Whether a claim holds ``device`` here: the snapshot's (unless a what-if gave it
        back) or a placement's."""
        return (device in self.world.in_use and not self.freed(device)) or self.taken(device)

    def reserved(self, key: tuple[str, str]) -> int:
        """How many pods this pass reserved a claim for."""
        own = self._reserved.get(key, 0)
        return own + (self._parent.reserved(key) if self._parent is not None else 0)

    def plan_of(self, ref: PodRef, node: str) -> ClaimPlan | None:
        own = self._plans.get((ref, node))
        if own is not None:
            return own
        return self._parent.plan_of(ref, node) if self._parent is not None else None

    # -- plans -------------------------------------------------------------------------------

    def plan(self, pod: Pod, node: Node) -> ClaimPlan | str:
        """What placing ``pod`` on ``node`` does to its claims, or why its devices cannot be
        had there. Kept until the next change of this layer."""
        key = (pod.ref, node.name)
        known = self._pending.get(key)
        if known is None:
            known = self._pending[key] = self.world.plan(
                pod,
                node,
                taken=self.taken,
                allocated=self.allocated,
                reserved=self.reserved,
                freed=self.freed,
            )
        return known

    def reasons(self, pod: Pod, node: Node) -> tuple[str, ...]:
        """Why ``pod``'s claims cannot be allocated on ``node`` now; () if they can."""
        plan = self.plan(pod, node)
        return (plan,) if isinstance(plan, str) else ()

    # -- changes -----------------------------------------------------------------------------

    def place(self, pod: Pod, node: Node) -> str:
        """Allocate and reserve ``pod``'s claims on ``node``; returns why it cannot ("" when
        done, and then nothing is changed)."""
        plan = self.plan(pod, node)
        self._pending.clear()  # what is free changes: every plan worked out is stale
        if isinstance(plan, str):
            return plan
        self._plans[(pod.ref, node.name)] = plan
        for claim, allocation in plan.allocate:
            self._allocated[claim.key] = (allocation, pod.ref)
            self._taken.update(allocation.held)
        for claim in plan.reserve:
            self._reserved[claim.key] = self._reserved.get(claim.key, 0) + 1
        return ""

    def unplace(self, pod: Pod, node: str) -> None:
        """Undo a ``place`` of this layer."""
        self._pending.clear()
        plan = self._plans.pop((pod.ref, node), None)
        if plan is None:
            return
        for claim, allocation in plan.allocate:
            made = self._allocated.get(claim.key)
            if made is not None and made[1] == pod.ref:
                del self._allocated[claim.key]
                self._taken.difference_update(allocation.held)
        for claim in plan.reserve:
            left = self._reserved.get(claim.key, 0) - 1
            if left > 0:
                self._reserved[claim.key] = left
            else:
                self._reserved.pop(claim.key, None)

    def evict(self, pod: Pod) -> None:
        """A victim's devices are freed only by ``free``: a what-if's alone."""

    def unevict(self, pod: Pod) -> None:
        pass

    def set_aside(self, pod: Pod, node: str) -> None:
        """Not done for devices: in a preemptor's what-if, its own held members keep the
        devices their holds took (a hold takes them only where its plan held); only their
        room and volumes are its to use again."""

    def preallocate(self, key: tuple[str, str], allocation: Allocation) -> None:
        """A claim allocated before the pods that share it are placed."""
        self._pending.clear()
        self._allocated[key] = (allocation, None)
        self._taken.update(allocation.held)

    def unallocate(self, key: tuple[str, str]) -> None:
        """Undo ``preallocate``."""
        self._pending.clear()
        made = self._allocated.pop(key, None)
        if made is not None:
            self._taken.difference_update(made[0].held)

    def free(self, devices: Iterable[DeviceId]) -> None:
        """A what-if's victims' devices, usable on this layer."""
        self._pending.clear()
        self._freed.update(devices)

    def commit(self) -> None:
        parent = self._parent
        if parent is None:
            raise ValueError("only a child layer can be committed")
        parent._allocated.update(self._allocated)
        parent._taken.update(self._taken)
        for key, count in self._reserved.items():
            parent._reserved[key] = parent._reserved.get(key, 0) + count
        parent._plans.update(self._plans)
        parent._pending.clear()
        # Devices a what-if freed stay on its own layer: they are never freed for real
        # until the ResourceClaim controller deallocates the victims' claims.
        self._allocated, self._taken, self._reserved, self._plans = {}, set(), {}, {}
        self._pending = {}
