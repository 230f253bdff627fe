"""pytest fixtures that give tests a real control plane.

By default the session starts its own control plane in ``.cluster-test/`` (separate from the
``make demo`` one in ``.cluster/``) and stops it when the session ends, pass or fail. With
``E2E_USE_EXISTING_CLUSTER=1`` the tests use whatever cluster ``KUBECONFIG`` names instead
(a kind cluster, say), and leave it running.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pykube
import pytest

from testbed import cluster as local_cluster
from testbed.rest import RequestFailed, Rest

TEST_CLUSTER_DIR = local_cluster.REPO / ".cluster-test"
# How long a pod may be refused for a PriorityClass the API server has not seen yet.
CLASS_SEEN_SECONDS = 10.0


@dataclass(frozen=True)
class ClusterAccess:
    """What a test needs to talk to the cluster: a kubeconfig, a kubectl, and one HTTP
    client for the requests every test makes."""

    kubeconfig: Path
    kubectl_path: Path

    def kubectl(
        self, *args: str, timeout: float = 60, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def api(self) -> pykube.HTTPClient:
        return pykube.HTTPClient(pykube.KubeConfig.from_file(str(self.kubeconfig)))

    # The requests every test makes (its namespace and nodes, their clean-up, the polls of
    # where its pods went) go over one HTTP client (testbed/rest.py), not a kubectl each.

    @functools.cached_property
    def rest(self) -> Rest:
        return Rest(self.api(), timeout=30)

    @property
    def http(self) -> pykube.HTTPClient:
        return self.rest.client


def wait_for(
    condition: Callable[[], object], *, timeout: float, what: str, interval: float = 0.2
) -> object:
    """Poll ``condition`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _existing_cluster() -> ClusterAccess:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        raise pytest.UsageError(
            "E2E_USE_EXISTING_CLUSTER=1 needs KUBECONFIG to name the cluster's kubeconfig"
        )
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    kubectl_path = Path(found) if found else local_cluster.resolve_binaries().kubectl
    access = ClusterAccess(kubeconfig=Path(kubeconfig), kubectl_path=kubectl_path)
    access.kubectl("apply", "-f", str(local_cluster.CRDS))
    access.kubectl(
        "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90
    )
    return access


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ClusterAccess]:
    if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
        yield _existing_cluster()
        return
    try:
        plane = local_cluster.up(TEST_CLUSTER_DIR)
    except local_cluster.AlreadyRunning:
        # Left behind by a session that was killed: start clean rather than inherit its state.
        local_cluster.down(TEST_CLUSTER_DIR)
        plane = local_cluster.up(TEST_CLUSTER_DIR)
    except local_cluster.ClusterError as error:
        pytest.fail(f"the local control plane did not start: {error}", pytrace=False)
    try:
        yield ClusterAccess(kubeconfig=plane.kubeconfig, kubectl_path=plane.kubectl)
    finally:
        local_cluster.down(TEST_CLUSTER_DIR)


@contextlib.contextmanager
def own_control_plane(name: str) -> Iterator[ClusterAccess]:
    """A control plane of its own in ``.cluster-NAME/``, for tests that kill or restart
    parts of it (the session's control plane stays untouched)."""
    directory = local_cluster.REPO / f".cluster-{name}"
    local_cluster.down(directory)  # whatever a killed session left behind
    try:
        plane = local_cluster.up(directory)
    except local_cluster.ClusterError as error:
        pytest.fail(f"the local control plane did not start: {error}", pytrace=False)
    try:
        yield ClusterAccess(kubeconfig=plane.kubeconfig, kubectl_path=plane.kubectl)
    finally:
        local_cluster.down(directory)


# `kubectl get podgroups` means the built-in scheduling.k8s.io PodGroup wherever the API
# server serves it (the local control plane does): ours is named in full.
OUR_PODGROUPS = "podgroups.scheduling.x-k8s.io"
OTHER_PODGROUPS = ("podgroups.scheduling.k8s.io", "podgroups.scheduling.volcano.sh")


@pytest.fixture
def namespace(control_plane: ClusterAccess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; its pods are deleted afterwards.

    The local control plane runs no controller-manager, so deleting a namespace does not
    delete what is in it: the pods (which hold node capacity) are deleted explicitly first.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{uuid.uuid4().hex[:5]}"
    control_plane.rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        # Each kind apart: a cluster that does not serve one of the PodGroup kinds refuses
        # only that one.
        for kind in ("pods", OUR_PODGROUPS, "configmaps", *OTHER_PODGROUPS):
            control_plane.rest.remove(kind, namespace=name)
        control_plane.rest.remove("namespaces", name)


# -- the scheduler under test ---------------------------------------------------------------


def healthz(port: int) -> int:
    """The status of a scheduler's /healthz on ``port`` (kopf serves it), 0 if none answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL if it has not ended 10 s later."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class SchedulerProcess:
    """``gang-scheduler run`` as a real process, as it runs in production."""

    kubeconfig: Path
    log: Path
    name: str = "gang-scheduler"
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> SchedulerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "scheduler", "run", "--kubeconfig", str(self.kubeconfig),
                    "--scheduler-name", self.name, "--max-backoff", "2", "-v", *self.extra,
                ],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        return self

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as when a node dies under it."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.process)

    def assert_alive(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"the scheduler exited with {code}; its log ends:\n{tail}")


def _log_dir(control_plane: ClusterAccess) -> Path:
    return control_plane.kubeconfig.parent / "logs"


@dataclass
class DeployedScheduler:
    """The scheduler the manifests deployed (the kind path): the tests only watch it."""

    access: ClusterAccess
    name: str = "gang-scheduler"

    def assert_alive(self) -> None:
        out = self.access.kubectl(
            "get", "deployment", "gang-scheduler", "-n", "gang-scheduler-system", "-o", "json"
        ).stdout
        available = json.loads(out).get("status", {}).get("availableReplicas", 0)
        assert available >= 1, "the deployed gang-scheduler has no available replica"


@pytest.fixture(scope="session")
def scheduler(control_plane: ClusterAccess) -> Iterator[SchedulerProcess | DeployedScheduler]:
    """One scheduler for the whole session, named gang-scheduler: a process of our own, or,
    with E2E_SCHEDULER_IN_CLUSTER=1, the one deployed in the cluster."""
    if os.environ.get("E2E_SCHEDULER_IN_CLUSTER") == "1":
        yield DeployedScheduler(control_plane)
        return
    process = SchedulerProcess(
        kubeconfig=control_plane.kubeconfig, log=_log_dir(control_plane) / "scheduler.log"
    ).start()
    try:
        yield process
    finally:
        process.stop()


@dataclass
class PrivateSchedulers:
    """Schedulers with a name of their own, for tests that kill or restart one: the session's
    scheduler leaves their pods alone."""

    kubeconfig: Path
    log: Path
    name: str
    started: list[SchedulerProcess] = field(default_factory=list)

    def start(self, *extra: str) -> SchedulerProcess:
        log = self.log.with_name(f"{self.log.stem}-{len(self.started)}{self.log.suffix}")
        process = SchedulerProcess(
            kubeconfig=self.kubeconfig, log=log, name=self.name, extra=extra
        ).start()
        self.started.append(process)
        return process


@pytest.fixture
def private_scheduler(control_plane: ClusterAccess) -> Iterator[PrivateSchedulers]:
    name = f"private-{uuid.uuid4().hex[:6]}"
    schedulers = PrivateSchedulers(
        kubeconfig=control_plane.kubeconfig,
        log=_log_dir(control_plane) / f"scheduler-{name}.log",
        name=name,
    )
    try:
        yield schedulers
    finally:
        for process in schedulers.started:
            process.stop()


# -- nodes and workloads ----------------------------------------------------------------------

TEST_LABEL = "gang-scheduler.io/test"


@dataclass(frozen=True)
class Cluster:
    """What one test sees: its namespace, its own nodes, and kubectl."""

    access: ClusterAccess
    namespace: str

    def nodes(
        self,
        count: int,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpu: int = 0,
        labels: dict[str, str] | None = None,
        extended: dict[str, str] | None = None,
    ) -> list[str]:
        """Create ``count`` KWOK nodes that only this test's pods select, and wait until Ready
        (``extended``: more allocatable resources, by name)."""
        from testbed.nodes import FakeNode, create_nodes, node_manifest  # noqa: PLC0415

        # Numbered past the highest there is: a test may have deleted one (a count would
        # name the next after an existing node, and overwrite it).
        prefix = f"{self.namespace}-n"
        taken = [int(n.removeprefix(prefix)) for n in self.node_names() if n.startswith(prefix)]
        first = max(taken, default=-1) + 1
        names_ = [f"{prefix}{first + i}" for i in range(count)]
        manifests = [
            node_manifest(
                FakeNode(name, {TEST_LABEL: self.namespace, **(labels or {})}),
                cpu=cpu,
                memory=memory,
                gpu=gpu,
                extended=extended,
            )
            for name in names_
        ]
        create_nodes(self.access.http, manifests)

        self.access.rest.wait_ready(names_, selector=f"{TEST_LABEL}={self.namespace}")
        return names_

    def node_names(self) -> list[str]:
        found = self.access.rest.read("nodes", labelSelector=f"{TEST_LABEL}={self.namespace}")
        return [n["metadata"]["name"] for n in found["items"]]

    def apply(self, *manifests: dict) -> None:
        for manifest in manifests:
            self._apply_once_admitted(manifest)

    def _apply_once_admitted(self, manifest: dict) -> None:
        """Apply ``manifest``; a pod refused because the API server's Priority admission has
        not yet seen a PriorityClass made a moment ago (it reads its own informer's cache)
        is applied again, for up to ``CLASS_SEEN_SECONDS`` (make test, loaded machine: a
        class made, then its pods refused with 403 'no PriorityClass with name')."""
        deadline = time.monotonic() + CLASS_SEEN_SECONDS
        while True:
            try:
                self.access.rest.apply(manifest)
                return
            except RequestFailed as error:
                if "no PriorityClass with name" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def pod(
        self,
        name: str,
        *,
        namespace: str | None = None,
        scheduler: str = "gang-scheduler",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        requests: dict[str, str] | None = None,
        priority_class: str | None = None,
        spec: dict | None = None,
    ) -> dict:
        """A pod manifest bound for this test's nodes; ``spec`` adds fields to its spec."""
        requests = requests or {"cpu": "1"}
        body: dict = {
            "schedulerName": scheduler,
            "nodeSelector": {TEST_LABEL: self.namespace},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": requests,
                        "limits": {k: v for k, v in requests.items() if "/" in k},
                    },
                }
            ],
        }
        if priority_class:
            body["priorityClassName"] = priority_class
        body.update(spec or {})
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace or self.namespace,
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "spec": body,
        }

    def gang(self, prefix: str, count: int, **pod: Any) -> set[str]:
        """Apply ``count`` pods PREFIX-0, PREFIX-1, ... alike (see ``pod``); their names."""
        members = [f"{prefix}-{i}" for i in range(count)]
        self.apply(*(self.pod(name, **pod) for name in members))
        return set(members)

    def placements(self, namespace: str | None = None) -> dict[str, str]:
        """pod name -> node name ("" while pending)."""
        found = self.access.rest.read("pods", namespace=namespace or self.namespace)
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in found["items"]}

    def bound(self, namespace: str | None = None) -> set[str]:
        return {name for name, node in self.placements(namespace).items() if node}

    def events(self, reason: str, namespace: str | None = None) -> list[str]:
        found = self.access.rest.read(
            "events", namespace=namespace or self.namespace, fieldSelector=f"reason={reason}"
        )
        return [e["message"] for e in found["items"]]

    def lease_holder(self, name: str) -> str:
        """The holderIdentity of Lease ``name`` in this namespace ("" if none yet)."""
        result = self.access.kubectl(
            "get", "lease", name, "-n", self.namespace, "-o", "json", check=False
        )
        if result.returncode != 0:
            return ""
        return json.loads(result.stdout)["spec"].get("holderIdentity") or ""

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict:
        out = self.access.kubectl(
            "get", kind, name, "-n", namespace or self.namespace, "-o", "json"
        ).stdout
        return json.loads(out)


@pytest.fixture
def cluster(control_plane: ClusterAccess, namespace: str) -> Iterator[Cluster]:
    """A namespace and a place for this test's own nodes; the nodes go when the test ends."""
    view = Cluster(access=control_plane, namespace=namespace)
    try:
        yield view
    finally:
        mine = f"{TEST_LABEL}={namespace}"
        control_plane.rest.remove("nodes", labelSelector=mine)
        # Devices and classes a test published (dynamic resource allocation, cluster-wide).
        control_plane.rest.remove("resourceslices", labelSelector=mine)
        control_plane.rest.remove("deviceclasses", labelSelector=mine)


class Queues:
    """Queues made by one test, named after its namespace (Queues are cluster-wide)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.made: list[str] = []

    def name(self, short: str) -> str:
        return f"{self.cluster.namespace}-{short}"

    def make(self, short: str, *, annotations: dict[str, str] | None = None, **spec: object) -> str:
        name = self.name(short)
        self.cluster.apply(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": spec,
            }
        )
        self.made.append(name)
        return name

    def set_state(self, name: str, state: str) -> None:
        self.cluster.access.kubectl(
            "patch", "queue", name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"state": state}}),
        )  # fmt: skip

    def get(self, name: str) -> dict:
        out = self.cluster.access.kubectl("get", "queue", name, "-o", "json").stdout
        return json.loads(out)


@pytest.fixture
def queues(cluster: Cluster) -> Iterator[Queues]:
    """Volcano Queues a test makes, deleted after it."""
    made = Queues(cluster)
    try:
        yield made
    finally:
        if made.made:
            cluster.access.kubectl("delete", "queue", *made.made, "--wait=false", check=False)
