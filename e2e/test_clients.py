"""The job frameworks, with their real operators (issue #21): each operator is built from its
Go module (e2e/operators/) and runs out of cluster against the control plane under test,
unchanged; the scheduler answers whatever schedulerName the operator writes.

For every framework the same story: two jobs submitted together where room is for one end
with one bound whole and the other with nothing bound; deleting the first lets the second
bind whole; a pod of the running job that is deleted (its node lost) is recreated by the
operator and placed again. `make test` runs KubeRay in its scheduler-plugins mode; `make
clients` runs every framework and mode (marker ``clients``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e import operators
from e2e.fixtures import Cluster, ClusterAccess, PrivateSchedulers, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

TIMEOUT = 60
VOLCANO_PODGROUP_CRD = Path(__file__).resolve().parent / "crds" / "volcano-podgroups.yaml"
CPU = "4"  # each pod's request; each test node has exactly this much


@dataclass(frozen=True)
class Framework:
    """How to run one operator and make its jobs."""

    operator: str  # the name in e2e/operators/versions.txt
    args: tuple[str, ...]  # its flags
    crds: tuple[str, ...]  # CRD files of its module to install (relative to its CRD folder)
    # The schedulerName its pods ask for when the operator writes one ("" : the template's).
    asks_for: str
    # (cluster, job name, schedulerName for the templates, pods) -> the manifests of a job.
    job: Callable[[Cluster, str, str, int], list[dict]]
    # (cluster, job name) -> the names of its live pods
    pods: Callable[[Cluster, str], set[str]]
    kind: str  # what `kubectl delete` calls the job


def _live_pods(cluster: Cluster, selector: str) -> dict[str, str]:
    """Pod name -> node ("" while pending), of the pods that ``selector`` matches and that
    are not being deleted."""
    out = cluster.access.kubectl(
        "get", "pods", "-n", cluster.namespace, "-l", selector, "-o", "json"
    ).stdout
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in json.loads(out)["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


def _pod_spec(cluster: Cluster, scheduler: str, container: str) -> dict:
    spec = cluster.pod("unused", scheduler=scheduler, requests={"cpu": CPU})["spec"]
    spec["containers"][0]["name"] = container
    spec["containers"][0]["image"] = "rayproject/ray:2.46.0"
    if not scheduler:
        del spec["schedulerName"]  # the operator writes it
    return spec


# -- KubeRay ---------------------------------------------------------------------------------


def ray_cluster(gang_label: bool) -> Callable[[Cluster, str, str, int], list[dict]]:
    def make(cluster: Cluster, name: str, scheduler: str, pods: int) -> list[dict]:
        workers = pods - 1
        labels = {"ray.io/gang-scheduling-enabled": "true"} if gang_label else {}
        return [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels},
                "spec": {
                    "rayVersion": "2.46.0",
                    "headGroupSpec": {
                        "rayStartParams": {},
                        "template": {"spec": _pod_spec(cluster, scheduler, "ray-head")},
                    },
                    "workerGroupSpecs": [
                        {
                            "groupName": "worker",
                            "rayStartParams": {},
                            "replicas": workers,
                            "minReplicas": workers,
                            "maxReplicas": workers,
                            "template": {"spec": _pod_spec(cluster, scheduler, "ray-worker")},
                        }
                    ],
                },
            }
        ]

    return make


def ray_pods(cluster: Cluster, name: str) -> dict[str, str]:
    return _live_pods(cluster, f"ray.io/cluster={name}")


KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
KUBERAY_FLAGS = ("--metrics-addr=0", "--health-probe-bind-address=0",
                 "--enable-leader-election=false")  # fmt: skip

FRAMEWORKS = {
    # KubeRay writes a scheduler-plugins PodGroup and schedulerName scheduler-plugins-scheduler.
    "kuberay-scheduler-plugins": Framework(
        operator="kuberay",
        args=(*KUBERAY_FLAGS, "--batch-scheduler=scheduler-plugins"),
        crds=KUBERAY_CRDS,
        asks_for="scheduler-plugins-scheduler",
        job=ray_cluster(gang_label=True),
        pods=ray_pods,
        kind="raycluster",
    ),
    # KubeRay writes a Volcano PodGroup, its annotation, and schedulerName volcano.
    "kuberay-volcano": Framework(
        operator="kuberay",
        args=(*KUBERAY_FLAGS, "--batch-scheduler=volcano"),
        crds=KUBERAY_CRDS,
        asks_for="volcano",
        job=ray_cluster(gang_label=True),
        pods=ray_pods,
        kind="raycluster",
    ),
    # No batch scheduler: no PodGroup at all; the RayCluster is the gang (gangs from owners).
    "kuberay-plain": Framework(
        operator="kuberay",
        args=KUBERAY_FLAGS,
        crds=KUBERAY_CRDS,
        asks_for="",
        job=ray_cluster(gang_label=False),
        pods=ray_pods,
        kind="raycluster",
    ),
}


# -- the story, the same for every framework --------------------------------------------------


@pytest.fixture
def running(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    control_plane: ClusterAccess,
    private_scheduler: PrivateSchedulers,
) -> Iterator[tuple[Framework, str]]:
    """The framework's CRDs installed, its operator running, and a scheduler that answers
    what the operator writes; yields the framework and the templates' schedulerName."""
    framework = FRAMEWORKS[request.param]
    folder = operators.crds(framework.operator)
    for crd in framework.crds:
        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                              str(folder / crd), timeout=120)  # fmt: skip
    if framework.asks_for == "volcano":
        control_plane.kubectl("apply", "-f", str(VOLCANO_PODGROUP_CRD))
    for crd in framework.crds:
        name = _crd_name(folder / crd)
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{name}",
                              "--timeout=60s", timeout=90)  # fmt: skip
    extra = ("--scheduler-name", framework.asks_for) if framework.asks_for else ()
    scheduler = private_scheduler.start(*extra)
    operator = operators.OperatorProcess(
        name=framework.operator,
        kubeconfig=control_plane.kubeconfig,
        log=control_plane.kubeconfig.parent / "logs" / f"{request.param}-{cluster.namespace}.log",
        args=framework.args,
    ).start()
    try:
        yield framework, private_scheduler.name
        operator.assert_alive()
        scheduler.assert_alive()
    finally:
        operator.stop()


def _crd_name(path: Path) -> str:
    return yaml.safe_load(path.read_text())["metadata"]["name"]


def _bound(placements: dict[str, str]) -> set[str]:
    return {pod for pod, node in placements.items() if node}


def story(cluster: Cluster, framework: Framework, scheduler: str, *, pods: int = 3) -> None:
    cluster.nodes(pods, cpu=CPU)
    template_scheduler = "" if framework.asks_for else scheduler
    cluster.apply(
        *framework.job(cluster, "a", template_scheduler, pods),
        *framework.job(cluster, "b", template_scheduler, pods),
    )

    def one_whole() -> str | None:
        bound = {job: len(_bound(framework.pods(cluster, job))) for job in ("a", "b")}
        return next((job for job, n in bound.items() if n == pods), None)

    winner = wait_for(one_whole, timeout=TIMEOUT, what=f"one of two {framework.kind}s bound whole")
    loser = "b" if winner == "a" else "a"
    wait_for(lambda: len(framework.pods(cluster, loser)) == pods, timeout=TIMEOUT,
             what=f"the other {framework.kind}'s {pods} pods created")  # fmt: skip
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert not _bound(framework.pods(cluster, loser)), "the other job is partly bound"
        time.sleep(0.2)

    cluster.access.kubectl("delete", framework.kind, winner, "-n", cluster.namespace,
                           "--wait=false")  # fmt: skip
    wait_for(
        lambda: len(_bound(framework.pods(cluster, loser))) == pods,
        timeout=TIMEOUT,
        what=f"the other {framework.kind} bound whole once the first was deleted",
    )

    # Node loss: a bound pod deleted at once; its operator makes another, placed again.
    placements = framework.pods(cluster, loser)
    lost = sorted(placements)[-1]
    cluster.access.kubectl("delete", "pod", lost, "-n", cluster.namespace, "--grace-period=0",
                           "--force", "--wait=true")  # fmt: skip
    wait_for(
        lambda: (
            (now := framework.pods(cluster, loser)).keys() != placements.keys()
            and len(_bound(now)) == pods
        ),
        timeout=TIMEOUT,
        what=f"the lost pod of {framework.kind} {loser} recreated and bound",
    )


@pytest.mark.parametrize("running", ["kuberay-scheduler-plugins"], indirect=True)
def test_kuberay_in_scheduler_plugins_mode(cluster: Cluster, running: tuple) -> None:
    framework, scheduler = running
    story(cluster, framework, scheduler)
    podgroup = cluster.get("podgroups.scheduling.x-k8s.io", "b")
    assert podgroup["spec"]["minMember"] == 3  # KubeRay's own PodGroup, honoured
    events = cluster.access.kubectl(
        "get", "events", "-n", cluster.namespace, "--field-selector", "reason=Scheduled",
        "-o", "json",
    ).stdout  # fmt: skip
    components = {e["reportingComponent"] for e in json.loads(events)["items"]}
    assert components == {"scheduler-plugins-scheduler"}  # the name the pods asked for


@pytest.mark.clients
@pytest.mark.parametrize("running", ["kuberay-volcano", "kuberay-plain"], indirect=True)
def test_kuberay_in_its_other_modes(cluster: Cluster, running: tuple) -> None:
    framework, scheduler = running
    story(cluster, framework, scheduler)


def test_every_framework_is_tested() -> None:
    """A framework added to FRAMEWORKS without a test of its own would never run."""
    tested = {"kuberay-scheduler-plugins", "kuberay-volcano", "kuberay-plain"}
    assert set(FRAMEWORKS) == tested
