"""The backlog with volumes (#45): every pod names a claim of its own, of a StorageClass that
binds WaitForFirstConsumer, as a cluster with a CSI driver has them.

What a backlog run gets from here:

- before the scheduler starts: the class and the claims (``make_claims``), a claim a pod
  (``claim_name``), each pod naming its own (``with_claim``);
- while it runs: the provisioner (``Provisioning``). It follows the namespace's claims (a
  LIST, then a watch: bench/watching.py) and makes each claim's volume on the node a
  scheduler wrote in its ``volume.kubernetes.io/selected-node``, several at once, deciding
  and writing as the e2e tests' provisioner does (testbed/provisioner.py: ``selected_node``,
  ``volume_for``); kube-controller-manager's PV controller completes each binding. Every
  scheduler gets the same one. The e2e tests' provisioner LISTs every claim every 0.1 s and
  makes volumes one at a time: thousands of claims would have made it the bottleneck, and
  its LISTs a load on the API server's cores while the scheduler is timed. It also notes when
  each claim was first seen with a node chosen, and first seen bound;
- the bind watch notes at which resourceVersion each pod was first seen bound
  (``BindOrder``);
- after its last bind: ``check``: every bound pod's claim Bound, to a volume whose node
  affinity names the pod's node; and bound before the pod was. "Bound" as kube-scheduler's
  VolumeBinding and our binder wait for it: ``spec.volumeName`` set and the PV controller's
  ``pv.kubernetes.io/bind-completed``. Order is read from resourceVersions, which on etcd
  are its revision, one counter for every write whatever the resource (opaque by the API's
  contract; the bench relies on the API server it starts). A resourceVersion is compared only
  when it came with a watch event, the change itself; one from a LIST (a watch that had to
  list again) is a later state, and that pod's order is counted as unchecked.
- ``clear``: before the next workload, the namespace's claims, volumes and class go.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bench.apiserver import gather_limited
from bench.report import log
from bench.watching import BindWatch, Following, one_by_one, until_listed
from scheduler.shell.api import ApiClient, ApiError
from testbed.provisioner import (
    CLAIM_NAMESPACE_LABEL,
    HOSTNAME,
    SELECTED_NODE,
    selected_node,
    storage_class,
    volume_for,
)

# What kube-scheduler's VolumeBinding and our binder wait for before a pod's binding.
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
CLAIM_SIZE = "1Gi"
# Volumes the provisioner POSTs at once: more than the PV controller's one worker binds.
PROVISIONER_CONCURRENCY = 8
VOLUME_NAME = "data"


def claim_name(pod: str) -> str:
    return f"{pod}-{VOLUME_NAME}"


def class_name(namespace: str) -> str:
    """The namespace's own StorageClass (cluster-scoped, so named after it)."""
    return f"{namespace}-wffc"


def claim_manifest(name: str, storage: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage,
                 "resources": {"requests": {"storage": CLAIM_SIZE}}},
    }  # fmt: skip


def with_claim(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` naming its own claim (``claim_name`` of the pod's name) as a volume."""
    volume = {
        "name": VOLUME_NAME,
        "persistentVolumeClaim": {"claimName": claim_name(pod["metadata"]["name"])},
    }
    spec = pod["spec"]
    return {**pod, "spec": {**spec, "volumes": [*(spec.get("volumes") or []), volume]}}


def claim_is_bound(claim: Mapping[str, Any]) -> bool:
    """Bound as a scheduler waits for it: its volume named, the PV controller's binding done."""
    meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
    return bool(spec.get("volumeName")) and BIND_COMPLETED in (meta.get("annotations") or {})


def volume_node(volume: Mapping[str, Any]) -> str | None:
    """The node a volume is reachable from, if its node affinity names exactly one by
    hostname (as the provisioner makes them)."""
    affinity = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    nodes = {
        value
        for term in affinity.get("nodeSelectorTerms") or []
        for expression in term.get("matchExpressions") or []
        if expression.get("key") == HOSTNAME and expression.get("operator") == "In"
        for value in expression.get("values") or []
    }
    return next(iter(nodes)) if len(nodes) == 1 else None


def gang_sizes(text: str) -> tuple[int, int]:
    """``--volume-gangs``: ``4-8`` (gangs of 4 to 8 members) or ``8`` (of 8)."""
    smallest, _, largest = text.partition("-")
    try:
        low, high = int(smallest), int(largest or smallest)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes as SMALLEST-LARGEST, e.g. 4-8") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: 1 <= smallest <= largest")
    return low, high


def percentiles(values: Iterable[float]) -> tuple[float, float] | None:
    """The median and the p99 (nearest rank: the smallest value with 99% of them at or
    below it), None of nothing."""
    ordered = sorted(values)
    if not ordered:
        return None
    return statistics.median(ordered), ordered[math.ceil(len(ordered) * 0.99) - 1]


def _version(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Seen:
    """A change first seen: when (monotonic), at which resourceVersion, and whether that came
    with a watch event (``exact``: the change itself) or a LIST (a state at or after it)."""

    at: float
    version: int
    exact: bool


@dataclass
class BindOrder(BindWatch):
    """The backlog's bind watch, also noting where and at which resourceVersion each pod was
    first seen bound."""

    seen: dict[str, Seen] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    _event: bool = field(default=False, init=False, repr=False)

    def _changed(self, kind: str, pod: dict) -> None:
        self._event = True
        try:
            super()._changed(kind, pod)
        finally:
            self._event = False

    def _record(self, pod: dict) -> None:
        super()._record(pod)
        name = (pod.get("metadata") or {}).get("name")
        node = (pod.get("spec") or {}).get("nodeName")
        if name and node and name not in self.seen and name in self.bound_at:
            self.seen[name] = Seen(self.bound_at[name], _version(pod), exact=self._event)
            self.nodes[name] = node


@dataclass
class Provisioning:
    """The bench's provisioner for the claims of ``storage`` in ``namespace`` (see the module's
    docstring); ``selected`` and ``bound``: when each claim was first seen with a node chosen,
    and bound; ``made``: the node each volume was made on; ``claims``: each claim as last seen.
    """

    api: ApiClient
    namespace: str
    storage: str
    concurrency: int = PROVISIONER_CONCURRENCY
    claims: dict[str, dict] = field(default_factory=dict)
    selected: dict[str, Seen] = field(default_factory=dict)
    bound: dict[str, Seen] = field(default_factory=dict)
    made: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    task: asyncio.Task | None = None
    following: Following = field(init=False)
    _posts: set[asyncio.Task] = field(default_factory=set, init=False, repr=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.following = Following(
            self.api,
            f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims",
            listed=one_by_one(lambda claim: self._seen(claim, exact=False)),
            changed=self._changed,
            log=log,
        )

    def _changed(self, kind: str, claim: dict) -> None:
        if kind == "DELETED":
            self.claims.pop((claim.get("metadata") or {}).get("name"), None)
        else:
            self._seen(claim, exact=True)

    def _seen(self, claim: dict, *, exact: bool) -> None:
        name = (claim.get("metadata") or {}).get("name")
        if not name:
            return
        self.claims[name] = claim
        now = time.monotonic()
        annotations = claim["metadata"].get("annotations") or {}
        if annotations.get(SELECTED_NODE) and name not in self.selected:
            self.selected[name] = Seen(now, _version(claim), exact)
        if claim_is_bound(claim) and name not in self.bound:
            self.bound[name] = Seen(now, _version(claim), exact)
        node = selected_node(claim, {self.storage})
        if node is not None and name not in self.made:
            self.made[name] = node
            post = asyncio.get_running_loop().create_task(self._make(claim, node))
            self._posts.add(post)
            post.add_done_callback(self._posts.discard)

    async def _make(self, claim: dict, node: str) -> None:
        assert self._slots is not None
        async with self._slots:
            try:
                await self.api.post("/api/v1/persistentvolumes", volume_for(claim, node), retries=3)
            except ApiError as error:
                if error.status != 409:  # made already (a retry whose first try landed)
                    self.errors.append(f"{claim['metadata']['name']}: {error}")

    def start(self) -> Provisioning:
        self._slots = asyncio.Semaphore(self.concurrency)
        self.task = asyncio.get_running_loop().create_task(self.following.run())
        return self

    async def until_listed(self, *, timeout: float) -> Provisioning:
        what = f"the claims of {self.namespace}"
        await until_listed(self.following.ready, self.task, timeout=timeout, what=what)
        return self

    async def wait_bound(self, claims: Iterable[str], *, timeout: float) -> None:
        """Until every one of ``claims`` has its phase Bound (the PV controller's last write
        of a binding, after the one a scheduler waits for); gives up quietly at ``timeout``,
        the check then says which are not."""
        wanted = list(claims)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.task is not None and self.task.done():
                return
            if all(_phase(self.claims.get(c)) == "Bound" for c in wanted):
                return
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        pending = [self.task, *self._posts] if self.task is not None else [*self._posts]
        await asyncio.gather(*pending, return_exceptions=True)


def _phase(claim: Mapping[str, Any] | None) -> str | None:
    return ((claim or {}).get("status") or {}).get("phase")


@dataclass(frozen=True)
class Verdict:
    """What ``check`` found: claims Bound on their pod's node, pods bound before their claim
    was, pods whose order could not be read, and a line for each problem."""

    claims_on_pod_node: int
    bound_before_claim: tuple[str, ...]
    order_unchecked: int
    problems: tuple[str, ...]

    def figures(self) -> dict[str, Any]:
        return {
            "claims_on_pod_node": self.claims_on_pod_node,
            "pods_bound_before_claim": len(self.bound_before_claim),
            "bind_order_unchecked": self.order_unchecked,
        }


def check(
    *,
    pods: Mapping[str, str],
    pod_bound: Mapping[str, Seen],
    claim_bound: Mapping[str, Seen],
    claims: Mapping[str, Mapping[str, Any]],
    volumes: Mapping[str, Mapping[str, Any]],
) -> Verdict:
    """Every pod of ``pods`` (bound pod -> its node): its claim (``claim_name``) in ``claims``
    (by name, as last seen) with phase Bound, to a volume of ``volumes`` (by name) that is
    pre-bound to that claim and reachable from the pod's node alone; and the claim bound
    (``claim_bound``) at an earlier resourceVersion than the pod's binding (``pod_bound``)."""
    on_node = 0
    before: list[str] = []
    unchecked = 0
    problems: list[str] = []
    for pod, node in sorted(pods.items()):
        name = claim_name(pod)
        claim = claims.get(name)
        if claim is None:
            problems.append(f"{pod} is bound on {node} and its claim {name} is gone")
            continue
        phase, volume_name = _phase(claim), (claim.get("spec") or {}).get("volumeName")
        volume = volumes.get(volume_name or "")
        if phase != "Bound" or volume is None:
            missing = " (missing)" if volume_name and volume is None else ""
            problems.append(f"{pod} is bound on {node} and its claim {name} is {phase}, "
                            f"volume {volume_name or 'none'}{missing}")  # fmt: skip
            continue
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        uid = (claim.get("metadata") or {}).get("uid")
        there = volume_node(volume)
        if ref.get("name") != name or (uid and ref.get("uid") != uid):
            problems.append(f"{name}'s volume {volume_name} is pre-bound to another claim: "
                            f"{ref.get('name')}, uid {ref.get('uid')}")  # fmt: skip
        elif there != node:
            problems.append(f"{pod} is bound on {node} and its volume {volume_name} on {there}")
        else:
            on_node += 1
        bind, bound = pod_bound.get(pod), claim_bound.get(name)
        if bound is None or bind is None or not bound.exact or not bind.exact:
            unchecked += 1
        elif bound.version >= bind.version:
            before.append(pod)
            problems.append(
                f"{pod} was bound (resourceVersion {bind.version}) before its claim {name} "
                f"was ({bound.version})"
            )
    return Verdict(on_node, tuple(before), unchecked, tuple(problems))


def timings(
    *,
    pod_bound: Mapping[str, Seen],
    selected: Mapping[str, Seen],
    claim_bound: Mapping[str, Seen],
) -> dict[str, float]:
    """Where a bound pod's time went, as the bench's watches saw it: from its claim's node
    chosen to its claim bound (the provisioner and the PV controller: the control plane's
    part), and from its claim bound to the pod bound (the scheduler's own wait and bind);
    median and p99, in ms."""
    claiming = [
        claim_bound[c].at - selected[c].at
        for pod in pod_bound
        if (c := claim_name(pod)) in claim_bound and c in selected
    ]
    binding = [
        max(seen.at - claim_bound[c].at, 0.0)
        for pod, seen in pod_bound.items()
        if (c := claim_name(pod)) in claim_bound
    ]
    figures: dict[str, float] = {}
    for key, values in (("claim_binding", claiming), ("bind_after_claim", binding)):
        if (found := percentiles(values)) is not None:
            figures[f"{key}_p50_ms"] = round(found[0] * 1000, 1)
            figures[f"{key}_p99_ms"] = round(found[1] * 1000, 1)
    return figures


def _volumes_path(namespace: str) -> str:
    selector = quote(f"{CLAIM_NAMESPACE_LABEL}={namespace}", safe="")
    return f"/api/v1/persistentvolumes?labelSelector={selector}"


def _claims_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"


async def make_claims(
    api: ApiClient, namespace: str, pods: Iterable[str], *, concurrency: int
) -> str:
    """The namespace's StorageClass (WaitForFirstConsumer, the testbed provisioner's) and a
    claim for every one of ``pods``; the class's name."""
    storage = class_name(namespace)
    await api.post("/apis/storage.k8s.io/v1/storageclasses", storage_class(storage), retries=3)
    path = _claims_path(namespace)
    await gather_limited(
        concurrency,
        [api.post(path, claim_manifest(claim_name(p), storage), retries=3) for p in pods],
    )
    return storage


async def events_settled(
    api: ApiClient, namespace: str, *, at_least: int, timeout: float = 60.0
) -> None:
    """Until the namespace has ``at_least`` Events, or none came for 2 s: the PV controller
    posts one for each claim new to it (WaitForFirstConsumer), and should be done before a
    scheduler's clock starts. Best effort: it gives up quietly at ``timeout``."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        page = await api.request("GET", f"/api/v1/namespaces/{namespace}/events?limit=1")
        count = len(page.get("items") or []) + int(
            (page.get("metadata") or {}).get("remainingItemCount") or 0
        )
        if count >= at_least:
            return
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since > 2.0:
            return
        await asyncio.sleep(0.25)


async def volumes_of(api: ApiClient, namespace: str) -> dict[str, dict]:
    """The volumes made for the namespace's claims, by name."""
    items = (await api.request("GET", _volumes_path(namespace))).get("items") or []
    return {v["metadata"]["name"]: v for v in items}


async def clear(api: ApiClient, namespace: str, *, concurrency: int, timeout: float = 300) -> None:
    """The namespace's claims and volumes deleted, and its class (its pods gone first). The
    bench's control plane runs no pvc- or pv-protection controller, so the finalizers the API
    server put on them are taken off here; until none is left (``timeout``: a wait in which
    none went)."""
    claims, volumes = _claims_path(namespace), _volumes_path(namespace)
    for path in (claims, volumes):
        with contextlib.suppress(ApiError):
            await api.request("DELETE", path)
    deadline = time.monotonic() + timeout
    fewest: int | None = None
    while True:
        left = [
            (f"{path}/{item['metadata']['name']}", item["metadata"])
            for path, listing in ((claims, claims), ("/api/v1/persistentvolumes", volumes))
            for item in (await api.request("GET", listing)).get("items") or []
        ]
        if not left:
            break
        if fewest is None or len(left) < fewest:
            fewest, deadline = len(left), time.monotonic() + timeout
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} claims and volumes of {namespace} not gone")
        await gather_limited(concurrency, [_gone(api, path, meta) for path, meta in left])
        await asyncio.sleep(0.5)
    with contextlib.suppress(ApiError):
        await api.request(
            "DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{class_name(namespace)}"
        )


async def _gone(api: ApiClient, path: str, meta: Mapping[str, Any]) -> None:
    """One claim or volume: its finalizers taken off, and deleted if the collection's DELETE
    did not reach it; gone meanwhile or changed, the next look sees it."""
    with contextlib.suppress(ApiError):
        if meta.get("finalizers"):
            await api.merge_patch(path, {"metadata": {"finalizers": None}})
        if not meta.get("deletionTimestamp"):
            await api.request("DELETE", path)
