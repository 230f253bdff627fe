"""Volumes in ``make chaos`` (bench/chaos.py): gangs whose pods each mount a scratch volume
of a WaitForFirstConsumer class, made per pod (a generic ephemeral volume) and provisioned by
the testbed's provisioner on the node the scheduler chose for it, and the invariants they
are checked by:

- **I11, no pod bound before its claims.** The claim's bind (``volumeName`` set and the PV
  controller's ``bind-completed``) comes before the pod's bind, in etcd's order: a claim
  whose bind the watch saw as it happened is bound at that event's resourceVersion, which
  must be older than the pod's. A claim first seen bound in a LIST (a re-list after a
  restart) is bound at that version or before, which proves nothing either way; so is a
  pod first seen bound in a LIST: counted as ``unordered``, not judged. At the check every
  bound pod's claim must be bound.
- **I12, no volume bound to two claims**: at every event, no PersistentVolume is named by
  two claims that exist.
- **I13, each volume on its pod's node**: at the check, the volume of every bound pod's
  claim is reachable from the pod's node (its node affinity names it).
- **I14, no claim points at a node its gang will not use**: at the check (quiescent), no
  claim of a pod waiting unbound carries a selected-node without a volume made for it, once
  the scheduler's wait for it and the grace before it releases a leftover are over.

The provisioner is slow now and then (``Delaying``): one volume in five is made only after
the scheduler's ``--volume-bind-timeout`` (the run's is short), so that waits end, what they
asked for is taken back and the gang goes again; with faults in the middle, choices a dead
leader left are released (I14 then checks that none is left over).

Pods the rival bound (it binds without asking for volumes) are excused from I11, I13 and
I14: that is the rival's doing, not the scheduler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench.watching import follow_through_restarts
from testbed.provisioner import (
    SELECTED_NODE,
    Provisioner,
    selected_node,
    storage_class,
    volume_for,
)
from testbed.rest import RequestFailed, Rest

SCRATCH = "scratch"  # the volume's name in the pod spec; its claim is POD-scratch
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
HOSTNAME = "kubernetes.io/hostname"


def scratch_class(namespace: str) -> str:
    """The run's StorageClass (cluster-wide: named after the run's namespace)."""
    return f"{namespace}-scratch"


def class_object(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    made = storage_class(scratch_class(namespace))
    made["metadata"]["labels"] = dict(labels)
    return made


def with_scratch(spec: dict, namespace: str) -> dict:
    """The pod spec with a scratch volume of 1Gi, made for the pod from its template."""
    template = {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": scratch_class(namespace),
            "resources": {"requests": {"storage": "1Gi"}},
        }
    }
    volume = {"name": SCRATCH, "ephemeral": {"volumeClaimTemplate": template}}
    return {**spec, "volumes": [*(spec.get("volumes") or []), volume]}


def scratch_claim(pod: dict) -> str:
    """The claim a pod's scratch volume makes ("" for a pod without one)."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == SCRATCH and "ephemeral" in volume:
            return f"{pod['metadata']['name']}-{SCRATCH}"
    return ""


def _version(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass
class ClaimState:
    name: str
    uid: str
    owner: str  # the uid of the pod it was made for
    seen_t: float
    volume: str = ""
    selected_node: str = ""
    selected_t: float = 0.0  # when the watch first showed its selected-node as it is now
    bound: bool = False
    bound_rv: int = 0  # the resourceVersion at which it was first seen bound
    precise: bool = False  # the watch saw it become bound (else a LIST showed it bound)
    gone: bool = False


@dataclass
class Violation:
    """An invariant broken in a chaos run (the volume ones' and chaos's own)."""

    invariant: str
    what: str
    details: dict = field(default_factory=dict)


class ClaimWatch:
    """The run's claims, LIST+WATCH in a thread: each claim's history (when it was made,
    when bound, to what), and I12 at every event."""

    def __init__(self, kubeconfig: Any, namespace: str, t0: float) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.t0 = t0
        self.lock = threading.Lock()
        self.claims: dict[str, ClaimState] = {}  # uid -> state
        self.violations: list[Violation] = []
        self._named: set[tuple[str, str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim watch", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> ClaimWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.run(self._follow())

    async def _follow(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        await follow_through_restarts(
            kubeconfig=self.kubeconfig,
            path=f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims",
            listed=self.listed,
            changed=self.changed,
            stop=self._stop,
            user_agent="gang-scheduler-chaos",
        )

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def listed(self, items: list[dict]) -> None:
        with self.lock:
            seen = {item["metadata"]["uid"] for item in items}
            for uid, claim in self.claims.items():
                if uid not in seen:
                    claim.gone = True
            for item in items:
                self._apply(item, watched=False)

    def changed(self, kind: str, obj: dict) -> None:
        with self.lock:
            claim = self._apply(obj, watched=True)
            if kind == "DELETED":
                claim.gone = True

    def _apply(self, obj: dict, *, watched: bool) -> ClaimState:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        claim = self.claims.get(meta["uid"])
        if claim is None:
            owners = [o.get("uid", "") for o in meta.get("ownerReferences") or []]
            claim = ClaimState(meta["name"], meta["uid"], owners[0] if owners else "", self.now())
            self.claims[claim.uid] = claim
        claim.volume = spec.get("volumeName") or ""
        selected = (meta.get("annotations") or {}).get(SELECTED_NODE, "")
        if selected != claim.selected_node:
            claim.selected_node, claim.selected_t = selected, self.now()
        bound = bool(claim.volume) and BIND_COMPLETED in (meta.get("annotations") or {})
        if bound and not claim.bound:
            # Precise only if this very event made it bound, as the watch saw it happen.
            claim.bound, claim.bound_rv, claim.precise = True, _version(obj), watched
        if claim.volume:
            self._check_twice(claim)
        return claim

    def _check_twice(self, claim: ClaimState) -> None:
        for other in self.claims.values():
            if other.uid == claim.uid or other.gone or other.volume != claim.volume:
                continue
            pair = (claim.volume, *sorted((claim.name, other.name)))
            if pair not in self._named:
                self._named.add(pair)
                self.violations.append(
                    Violation(
                        "I12",
                        f"persistentvolume {claim.volume} named by claims {pair[1]} and {pair[2]}",
                        {"volume": claim.volume, "claims": list(pair[1:])},
                    )
                )

    def copy(self) -> dict[str, ClaimState]:
        """By name, the newest claim of each name."""
        with self.lock:
            out: dict[str, ClaimState] = {}
            for claim in sorted(self.claims.values(), key=lambda c: c.seen_t):
                out[claim.name] = replace(claim)
            return out


def made_for(claims: dict[str, ClaimState], name: str, owner: str) -> ClaimState | None:
    """The claim ``name`` if it was made for the pod of uid ``owner`` and exists."""
    claim = claims.get(name)
    if claim is None or claim.gone or claim.owner != owner:
        return None
    return claim


def binding_late(claims: dict[str, ClaimState], made: Collection[str]) -> set[str]:
    """The claims (by uid; ``claims`` as ``ClaimWatch.copy`` keys them, by name) that a
    volume was made for (a PersistentVolume's claimRef names them) and that the PV
    controller has not bound yet: their pods wait on the controller, not on the scheduler
    (seed 11598: after an API server restart, kube-controller-manager's stale caches bound
    none of 50 claims for 25 s, their volumes made)."""
    return {c.uid for c in claims.values() if not c.gone and not c.bound and c.uid in made}


def node_of(volume: dict) -> str:
    """The node a volume the testbed's provisioner made is reachable from ("" if none)."""
    terms = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    for term in terms.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == HOSTNAME and expression.get("operator") == "In":
                return (expression.get("values") or [""])[0]
    return ""


@dataclass(frozen=True)
class Mounting:
    """What the check needs of a pod with a scratch volume."""

    name: str
    uid: str
    claim: str
    node: str  # "" while unbound
    bound_rv: int  # the resourceVersion at which it was first seen bound
    alive: bool
    bind_watched: bool = True  # seen bound by a watch event (else a LIST: a later version)


def volume_violations(
    pods: Iterable[Mounting],
    claims: dict[str, ClaimState],
    volumes: dict[str, dict],
    *,
    rival_bound: Iterable[str],
    now: float = float("inf"),
    in_flight: float = 0.0,
    pauses: Sequence[tuple[float, float]] = (),
) -> tuple[list[Violation], int]:
    """I11, I13 and I14 at the check (``now``, on the claims' clock); also how many binds I11
    could not order. A selected-node written less than ``in_flight`` seconds ago is a
    group's wait still running, not a leftover: I14 leaves it be (seed 11003: the check
    came 0.6 s after a group of 11 asked for its volumes). Only a leader's passes release
    a leftover, with the API server up: ``pauses`` are the windows in which none could
    (start, and when a leader could act again), and one that overlaps a choice's wait
    pushes its deadline past it (seed 11038: the writer lost its Lease as its group's wait
    ended, and API server restarts then kept every replica from leading until 1.6 s
    before the check)."""
    rival = set(rival_bound)
    found: list[Violation] = []
    unordered = 0
    for pod in pods:
        if pod.name in rival:
            continue
        claim = made_for(claims, pod.claim, pod.uid)
        if pod.node:
            if claim is None or not claim.bound:
                state = "missing" if claim is None else f"unbound (volume {claim.volume or '-'})"
                found.append(
                    Violation(
                        "I11",
                        f"pod {pod.name} bound to {pod.node} while its claim {pod.claim} is "
                        + state,
                        {"pod": pod.name, "claim": pod.claim},
                    )
                )
                continue
            if not claim.precise or not pod.bind_watched:
                unordered += 1
            elif claim.bound_rv > pod.bound_rv:
                found.append(
                    Violation(
                        "I11",
                        f"pod {pod.name} bound (resourceVersion {pod.bound_rv}) before its "
                        f"claim {claim.name} (resourceVersion {claim.bound_rv})",
                        {"pod": pod.name, "claim": claim.name},
                    )
                )
            where = node_of(volumes.get(claim.volume) or {})
            if where != pod.node:
                found.append(
                    Violation(
                        "I13",
                        f"pod {pod.name} on {pod.node} mounts {claim.volume}, made on "
                        f"{where or 'no node'}",
                        {"pod": pod.name, "claim": claim.name, "volume": claim.volume},
                    )
                )
        elif (
            pod.alive
            and claim is not None
            and claim.selected_node
            and not claim.volume
            and now >= _leftover_at(claim.selected_t, in_flight, pauses)
        ):
            found.append(
                Violation(
                    "I14",
                    f"claim {claim.name} asks for its volume on {claim.selected_node}; its pod "
                    f"{pod.name} waits unbound",
                    {"pod": pod.name, "claim": claim.name},
                )
            )
    return found, unordered


# A leader's pass and its write, once one can act again.
RELEASE_SECONDS = 2.0


def _leftover_at(selected: float, in_flight: float, pauses: Sequence[tuple[float, float]]) -> float:
    """When a choice made at ``selected`` is a leftover the scheduler should have released:
    its wait and grace past, later by every pause that overlaps them."""
    due = selected + in_flight
    for start, resumed in sorted(pauses):
        if start <= due and resumed >= selected:
            due = max(due, resumed + RELEASE_SECONDS)
    return due


class Delaying(Provisioner):
    """The testbed's provisioner, slow now and then: each node asked for a claim gets its
    volume after a delay drawn from the run's seed, under a second four times in five, else
    past ``bind_timeout`` (the scheduler's wait for it then ends and takes the choice back;
    asked again for the same node, it is made at once)."""

    def __init__(
        self, rest: Rest, namespace: str, classes: set[str], *, seed: int, bind_timeout: float
    ) -> None:
        super().__init__(rest, namespace, classes)
        self._rng = random.Random(seed * 7919 + 451)
        self._bind_timeout = bind_timeout
        self._due: dict[tuple[str, str], float] = {}  # (claim uid, node) -> when to make it
        self._made_for: set[str] = set()  # the claims (uids) a volume was made for: one each
        self.slow = 0

    def _delay(self) -> float:
        if self._rng.random() < 0.2:
            self.slow += 1
            return self._bind_timeout + self._rng.uniform(1.0, 3.0)
        return self._rng.uniform(0.0, 1.0)

    def look(self) -> None:
        claims = self.rest.read("persistentvolumeclaims", namespace=self.namespace)
        now = time.monotonic()
        for claim in claims.get("items") or []:
            node = selected_node(claim, self.classes)
            if node is None:
                continue
            meta = claim["metadata"]
            key = (meta["uid"], node)
            due = self._due.setdefault(key, now + self._delay())
            if now < due or key[0] in self._made_for:
                continue
            try:
                self.rest.create(volume_for(claim, node))
            except RequestFailed as error:  # made by an earlier try whose answer was lost
                if ": 409 " not in str(error):
                    raise
            self._made_for.add(key[0])
            self.made.append(meta["name"])


class Volumes:
    """A run's volumes: its StorageClass, the provisioner serving it, the claims' watch."""

    def __init__(
        self,
        rest: Rest,
        kubeconfig: Any,
        namespace: str,
        t0: float,
        *,
        seed: int,
        bind_timeout: float,
    ) -> None:
        self.rest = rest
        self.namespace = namespace
        self.provisioner = Delaying(
            rest, namespace, {scratch_class(namespace)}, seed=seed, bind_timeout=bind_timeout
        )
        self.watch = ClaimWatch(kubeconfig, namespace, t0)
        self._nodes: dict[str, str] = {}  # volume -> its node, once read

    def node_of(self, volume: str) -> str:
        """The node ``volume`` was made on ("" while it cannot be read)."""
        if volume not in self._nodes:
            try:
                found = node_of(self.rest.read("persistentvolumes", volume))
            except Exception:  # the API server away, or the volume not made yet: ask again
                return ""
            if found:
                self._nodes[volume] = found
        return self._nodes.get(volume, "")

    def start(self) -> Volumes:
        self.provisioner.start()
        self.watch.start()
        return self

    def stop(self) -> None:
        self.provisioner.stop()
        self.watch.stop()

    def claims_with_volumes(self) -> set[str]:
        """The uids of the run's claims a PersistentVolume names in its claimRef (empty
        while the API server cannot be read)."""
        try:
            made = self.volumes().values()
        except Exception:  # the API server away: nothing is taken as made
            return set()
        return {((v.get("spec") or {}).get("claimRef") or {}).get("uid", "") for v in made} - {""}

    def volumes(self) -> dict[str, dict]:
        """The PersistentVolumes made for the run's claims, by name."""
        items = self.rest.read("persistentvolumes").get("items") or []
        return {
            v["metadata"]["name"]: v
            for v in items
            if ((v.get("spec") or {}).get("claimRef") or {}).get("namespace") == self.namespace
        }

    def remove(self) -> None:
        """The run's volumes and StorageClass (cluster-wide), best effort."""
        with contextlib.suppress(Exception):
            for name in self.volumes():
                self.rest.remove("persistentvolumes", name)
        with contextlib.suppress(Exception):
            self.rest.remove("storageclasses", scratch_class(self.namespace))
