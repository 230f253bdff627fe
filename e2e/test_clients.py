"""The job frameworks, with their real operators (issue #21): each operator is built from its
Go module (e2e/operators/) and runs out of cluster against the control plane under test,
unchanged; the scheduler answers whatever schedulerName the operator writes.

For every framework the same story: two jobs submitted together where room is for one end
with one bound whole and the other with nothing bound; deleting the first lets the second
bind whole; a pod of the running job that is deleted (its node lost) is recreated by the
operator and placed again. `make test` runs KubeRay in its scheduler-plugins mode; `make
clients` runs every framework and mode (marker ``clients``)."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e import operators
from e2e.fixtures import TEST_LABEL, Cluster, ClusterAccess, PrivateSchedulers, Queues, wait_for
from testbed.cluster import free_port
from testbed.pki import write_webhook_pki

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane, pytest.mark.tools]

TIMEOUT = 60
# KWOK moves a Job's pods to Succeeded at once; with this they run for an hour.
RUNS_AN_HOUR = {"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}
VOLCANO_PODGROUP_CRD = Path(__file__).resolve().parent / "crds" / "volcano-podgroups.yaml"
CPU = "4"  # each pod's request; each test node has exactly this much


@dataclass(frozen=True)
class Setup:
    """What an operator is run with: its test's namespace, a port and certificates for its
    webhook server (on 127.0.0.1), and a folder of its own."""

    namespace: str
    port: int
    cert_dir: Path
    folder: Path


@dataclass(frozen=True)
class Framework:
    """How to run one operator and make its jobs."""

    operator: str  # the name in e2e/operators/versions.txt
    crds: tuple[str, ...]  # CRD files of its module to install (in its CRD folder)
    # The schedulerName its pods ask for when the operator writes one ("": the template's).
    asks_for: str
    # (cluster, job name, schedulerName for the templates, pods) -> the manifests of a job.
    job: Callable[[Cluster, str, str, int], list[dict]]
    selector: Callable[[str], str]  # job name -> a label selector of its pods
    kind: str  # what `kubectl delete` calls the job
    args: Callable[[Setup], tuple[str, ...]] = lambda setup: ()
    # Its webhooks' manifests in its module (served on 127.0.0.1, reached by URL), if any.
    webhooks: str = ""
    # Its configuration file, if it takes one (--config).
    config: Callable[[Setup], dict] | None = None
    # Anything else it needs before it starts (certificates where it insists on a path).
    prepare: Callable[[Setup], None] = lambda setup: None
    # Environment variables it reads.
    env: Callable[[Setup], dict[str, str]] = lambda setup: {}
    # Objects it needs before it starts, deleted after it (cluster-scoped ones too).
    objects: Callable[[Setup], list[dict]] = lambda setup: []
    # What a kubelet would do for it once it runs (a Secret of its own, mounted).
    started: Callable[[Cluster, Setup], None] = lambda cluster, setup: None

    def pods(self, cluster: Cluster, job: str) -> dict[str, str]:
        return _live_pods(cluster, self.selector(job))


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


def _uids(cluster: Cluster, selector: str) -> set[str]:
    out = cluster.access.kubectl(
        "get", "pods", "-n", cluster.namespace, "-l", selector, "-o", "json"
    ).stdout
    return {p["metadata"]["uid"] for p in json.loads(out)["items"]}


def _pod_spec(cluster: Cluster, scheduler: str, container: str) -> dict:
    """A pod spec for this test's nodes, asking for CPU; without a schedulerName when the
    operator writes one."""
    spec = cluster.pod("unused", scheduler=scheduler, requests={"cpu": CPU})["spec"]
    spec["containers"][0]["name"] = container
    if not scheduler:
        del spec["schedulerName"]
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


KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
KUBERAY_FLAGS = ("--metrics-addr=0", "--health-probe-bind-address=0",
                 "--enable-leader-election=false")  # fmt: skip


def _ray(mode: str, asks_for: str) -> Framework:
    flags = (*KUBERAY_FLAGS, f"--batch-scheduler={mode}") if mode else KUBERAY_FLAGS
    return Framework(
        operator="kuberay",
        args=lambda setup: flags,
        crds=KUBERAY_CRDS,
        asks_for=asks_for,
        job=ray_cluster(gang_label=bool(mode)),
        selector=lambda name: f"ray.io/cluster={name}",
        kind="raycluster",
    )


# -- JobSet, LeaderWorkerSet: webhooks served on the loopback address -------------------------


def _controller_config(group: str, setup: Setup) -> dict:
    """JobSet's and LeaderWorkerSet's Configuration (the same kubebuilder shape): no leader
    election, no certificate management of their own (ours are in the cert dir), the
    webhook server on 127.0.0.1, metrics and probes off."""
    return {
        "apiVersion": f"config.{group}/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": setup.port, "host": "127.0.0.1", "certDir": str(setup.cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
    }


def job_template(cluster: Cluster, scheduler: str, pods: int, container: str) -> dict:
    spec = _pod_spec(cluster, scheduler, container)
    spec["restartPolicy"] = "Never"
    return {
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 10,
            "template": {"metadata": {"annotations": dict(RUNS_AN_HOUR)}, "spec": spec},
        }
    }


def jobset(cluster: Cluster, name: str, scheduler: str, pods: int) -> list[dict]:
    """A driver and pods - 1 workers in replicas of one: the JobSet is one gang of them."""
    return [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {
                "replicatedJobs": [
                    {"name": "driver", "replicas": 1,
                     "template": job_template(cluster, scheduler, 1, "driver")},
                    {"name": "workers", "replicas": pods - 1,
                     "template": job_template(cluster, scheduler, 1, "worker")},
                ]
            },
        }
    ]  # fmt: skip


def leader_worker_set(cluster: Cluster, name: str, scheduler: str, pods: int) -> list[dict]:
    """One group of a leader and pods - 1 workers: a gang of its own."""
    spec = _pod_spec(cluster, scheduler, "worker")
    return [
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {"size": pods, "workerTemplate": {"spec": spec}},
            },
        }
    ]


def mpi_job(cluster: Cluster, name: str, scheduler: str, pods: int) -> list[dict]:
    """A launcher (a Job of the MPI Operator's) and pods - 1 workers."""
    launcher = _pod_spec(cluster, scheduler, "launcher")
    worker = _pod_spec(cluster, scheduler, "worker")
    return [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {
                "slotsPerWorker": 1,
                "runPolicy": {"cleanPodPolicy": "Running"},
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "template": {
                        "metadata": {"annotations": dict(RUNS_AN_HOUR)}, "spec": launcher}},
                    "Worker": {"replicas": pods - 1, "template": {"spec": worker}},
                },
            },
        }
    ]  # fmt: skip


FRAMEWORKS = {
    # KubeRay writes a scheduler-plugins PodGroup and schedulerName scheduler-plugins-scheduler.
    "kuberay-scheduler-plugins": _ray("scheduler-plugins", "scheduler-plugins-scheduler"),
    # KubeRay writes a Volcano PodGroup, its annotation, and schedulerName volcano.
    "kuberay-volcano": _ray("volcano", "volcano"),
    # No batch scheduler: no PodGroup at all; the RayCluster is the gang (gangs from owners).
    "kuberay-plain": _ray("", ""),
    # JobSet writes no PodGroup: the JobSet is the gang, its replicas one GangGroup.
    "jobset": Framework(
        operator="jobset",
        crds=("jobset.x-k8s.io_jobsets.yaml",),
        asks_for="",
        job=jobset,
        selector=lambda name: f"jobset.sigs.k8s.io/jobset-name={name}",
        kind="jobset",
        webhooks="config/components/webhook/manifests.yaml",
        config=lambda setup: _controller_config("jobset.x-k8s.io", setup),
    ),
    # LeaderWorkerSet writes no PodGroup: each group is a gang; its pod webhook labels them.
    "lws": Framework(
        operator="lws",
        crds=("leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
        asks_for="",
        job=leader_worker_set,
        selector=lambda name: f"leaderworkerset.sigs.k8s.io/name={name}",
        kind="leaderworkerset",
        webhooks="config/webhook/manifests.yaml",
        config=lambda setup: _controller_config("lws.x-k8s.io", setup),
    ),
    # The MPI Operator with no gang scheduling of its own: the MPIJob is the gang.
    "mpi-operator": Framework(
        operator="mpi-operator",
        crds=("kubeflow.org_mpijobs.yaml",),
        asks_for="",
        job=mpi_job,
        selector=lambda name: f"training.kubeflow.org/job-name={name}",
        kind="mpijob",
        args=lambda setup: ("--lock-namespace", setup.namespace, "--threadiness", "2"),
    ),
}


# -- the story, the same for every framework --------------------------------------------------


@pytest.fixture
def running(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    control_plane: ClusterAccess,
    private_scheduler: PrivateSchedulers,
    tmp_path: Path,
) -> Iterator[tuple[Framework, str]]:
    """The framework's CRDs installed, its operator running (its webhooks served and
    registered for this test's namespace), and a scheduler that answers what the operator
    writes; yields the framework and the templates' schedulerName."""
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
    setup = Setup(
        namespace=cluster.namespace,
        port=free_port(),
        cert_dir=tmp_path / "certs",
        folder=tmp_path,
    )
    ca = write_webhook_pki(setup.cert_dir)
    framework.prepare(setup)
    args = framework.args(setup)
    if framework.config is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(framework.config(setup)))
        args = (*args, f"--config={tmp_path / 'config.yaml'}")
    hooks: list[dict] = []
    if framework.webhooks:
        source = operators.source(framework.operator) / framework.webhooks
        hooks = operators.webhook_configurations(
            operators.manifests_in(source),
            port=setup.port,
            ca=ca,
            namespace=cluster.namespace,
            prefix=framework.operator,
        )
    needed = framework.objects(setup)
    if needed:
        cluster.apply(*needed)
    extra = ("--scheduler-name", framework.asks_for) if framework.asks_for else ()
    scheduler = private_scheduler.start(*extra)
    operator = operators.OperatorProcess(
        name=framework.operator,
        kubeconfig=control_plane.kubeconfig,
        log=control_plane.kubeconfig.parent / "logs" / f"{request.param}-{cluster.namespace}.log",
        args=args,
        env=framework.env(setup),
    ).start()
    try:
        framework.started(cluster, setup)
        if hooks:
            wait_for(lambda: _serving(setup.port), timeout=TIMEOUT,
                     what=f"the {framework.operator} webhook server up")  # fmt: skip
            cluster.apply(*hooks)
        yield framework, private_scheduler.name
        operator.assert_alive()
        scheduler.assert_alive()
    finally:
        for hook in hooks:  # before the server goes: they would refuse this namespace's pods
            control_plane.kubectl("delete", hook["kind"], hook["metadata"]["name"],
                                  "--ignore-not-found", check=False)  # fmt: skip
        operator.stop()
        for thing in needed:
            control_plane.kubectl("delete", thing["kind"], thing["metadata"]["name"], "-n",
                                  cluster.namespace, "--ignore-not-found", check=False)  # fmt: skip


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _crd_name(path: Path) -> str:
    return yaml.safe_load(path.read_text())["metadata"]["name"]


def _bound(placements: dict[str, str]) -> set[str]:
    return {pod for pod, node in placements.items() if node}


def story(cluster: Cluster, framework: Framework, scheduler: str, *, pods: int = 3) -> str:
    """Two jobs, one binds whole, the other once the first is deleted, and again after a
    node loss; returns the other (the one still there)."""
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

    # Node loss: a bound pod deleted at once; its operator makes another (a StatefulSet's
    # under the same name: told apart by uid), placed again.
    placements = framework.pods(cluster, loser)
    before = _uids(cluster, framework.selector(loser))
    lost = sorted(placements)[-1]
    cluster.access.kubectl("delete", "pod", lost, "-n", cluster.namespace, "--grace-period=0",
                           "--force", "--wait=true")  # fmt: skip
    wait_for(
        lambda: (
            _uids(cluster, framework.selector(loser)) - before
            and len(_bound(framework.pods(cluster, loser))) == pods
        ),
        timeout=TIMEOUT,
        what=f"the lost pod of {framework.kind} {loser} recreated and bound",
    )
    return loser


@pytest.mark.parametrize("running", ["kuberay-scheduler-plugins"], indirect=True)
def test_kuberay_in_scheduler_plugins_mode(cluster: Cluster, running: tuple) -> None:
    framework, scheduler = running
    # The one still there: either may bind first (and then be deleted).
    still = story(cluster, framework, scheduler)
    podgroup = cluster.get("podgroups.scheduling.x-k8s.io", still)
    assert podgroup["spec"]["minMember"] == 3  # KubeRay's own PodGroup, honoured
    events = cluster.access.kubectl(
        "get", "events", "-n", cluster.namespace, "--field-selector", "reason=Scheduled",
        "-o", "json",
    ).stdout  # fmt: skip
    components = {e["reportingComponent"] for e in json.loads(events)["items"]}
    assert components == {"scheduler-plugins-scheduler"}  # the name the pods asked for


# -- KubeRay in a team's queue (#22) -----------------------------------------------------------

# KubeRay's Volcano integration (v1.5.0, controllers/ray/batchscheduler/volcano): this label
# on a RayCluster is copied into its PodGroup's spec.queue when KubeRay creates the PodGroup,
# and onto every pod as a label.
KUBERAY_QUEUE_LABEL = "volcano.sh/queue-name"
VOLCANO_PODGROUPS = "podgroups.scheduling.volcano.sh"


def ray_cluster_in_queue(cluster: Cluster, name: str, queue: str, pods: int) -> dict:
    """A RayCluster for KubeRay's volcano mode, put in ``queue`` as KubeRay's docs say."""
    (manifest,) = ray_cluster(gang_label=True)(cluster, name, "", pods)
    manifest["metadata"]["labels"][KUBERAY_QUEUE_LABEL] = queue
    return manifest


def _volcano_podgroup(cluster: Cluster, name: str) -> dict | None:
    found = cluster.access.kubectl(
        "get", VOLCANO_PODGROUPS, name, "-n", cluster.namespace, "-o", "json", check=False
    )
    return json.loads(found.stdout) if found.returncode == 0 else None


def _unschedulable(cluster: Cluster, podgroup: str) -> dict | None:
    """The condition Unschedulable of a Volcano PodGroup, if it has one."""
    status = (_volcano_podgroup(cluster, podgroup) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == "Unschedulable"), None)


def _says_unschedulable(cluster: Cluster, podgroup: str, why: str) -> dict:
    """Waits until a Volcano PodGroup's condition Unschedulable is True and says ``why``."""

    def said() -> dict | None:
        found = _unschedulable(cluster, podgroup)
        return found if found and found["status"] == "True" and why in found["message"] else None

    found = wait_for(
        said, timeout=TIMEOUT, what=f"PodGroup {podgroup}'s condition Unschedulable saying {why!r}"
    )
    assert isinstance(found, dict)
    return found


def bound_whole_at_once(
    cluster: Cluster, framework: Framework, job: str, pods: int, *, window: float = 5.0
) -> None:
    """Until all ``pods`` of ``job`` are bound; fails if some are bound and the rest not
    ``window`` seconds later (binds are separate calls: a gang is seen part bound briefly)."""
    first_bind: float | None = None

    def whole() -> bool:
        nonlocal first_bind
        bound = len(_bound(framework.pods(cluster, job)))
        if bound and first_bind is None:
            first_bind = time.monotonic()
        if bound == pods:
            return True
        assert first_bind is None or time.monotonic() - first_bind < window, (
            f"{framework.kind} {job} partly bound ({bound} of {pods}) for over {window:.0f}s"
        )
        return False

    wait_for(whole, timeout=TIMEOUT, what=f"{framework.kind} {job} bound whole")


@pytest.mark.clients
@pytest.mark.parametrize("running", ["kuberay-volcano"], indirect=True)
def test_a_raycluster_in_a_teams_queue_waits_for_its_capability_then_binds_whole(
    cluster: Cluster, running: tuple, queues: Queues
) -> None:
    """KubeRay's real operator puts a RayCluster labelled for a Volcano Queue in that queue
    (its PodGroup's spec.queue). The queue's capability is less than the RayCluster needs
    while the nodes have room: nothing binds and the scheduler names the capability; once it
    is raised the RayCluster binds whole. A RayCluster in a Closed queue stays pending."""
    framework, _ = running
    pods = 3
    need = pods * int(CPU)
    team = queues.make("team-a", weight=1, capability={"cpu": str(need - int(CPU))})
    shut = queues.make("shut")
    queues.set_state(shut, "Closed")
    cluster.nodes(2 * pods, cpu=CPU)  # room for both: only their queues hold them back
    cluster.apply(
        ray_cluster_in_queue(cluster, "a", team, pods),
        ray_cluster_in_queue(cluster, "c", shut, pods),
    )

    # What KubeRay wrote: the queue in its PodGroup's spec.queue and on every pod.
    group = wait_for(lambda: _volcano_podgroup(cluster, "ray-a-pg"), timeout=TIMEOUT,
                     what="KubeRay's Volcano PodGroup ray-a-pg")  # fmt: skip
    assert isinstance(group, dict)
    assert group["spec"]["queue"] == team, group["spec"]
    assert group["spec"]["minMember"] == pods, group["spec"]
    wait_for(lambda: len(framework.pods(cluster, "a")) == pods, timeout=TIMEOUT,
             what=f"KubeRay's {pods} pods of RayCluster a")  # fmt: skip
    listed = cluster.access.kubectl(
        "get", "pods", "-n", cluster.namespace, "-l", framework.selector("a"), "-o", "json"
    ).stdout
    labels = [p["metadata"]["labels"] for p in json.loads(listed)["items"]]
    assert all(pod.get(KUBERAY_QUEUE_LABEL) == team for pod in labels), labels

    # Why it waits, said on its pods (Events) and on the PodGroup (Volcano's condition).
    why = (
        f"queue {team} would go over its capability for cpu: it holds 0 of {need - int(CPU)}, "
        f"and {need} more are asked"
    )
    wait_for(lambda: any(why in m for m in cluster.events("FailedScheduling")),
             timeout=TIMEOUT, what=f"a FailedScheduling event saying {why!r}")  # fmt: skip

    said = _says_unschedulable(cluster, "ray-a-pg", why)
    assert said["reason"] == "NotEnoughResources", said
    # Not let in by its queue: Pending, not Volcano's Inqueue (admitted by the queue).
    assert (_volcano_podgroup(cluster, "ray-a-pg") or {})["status"]["phase"] == "Pending"
    # The Closed queue, named on its pods and its PodGroup (which has all its members: room
    # is what it lacks, not tasks).
    closed = f"queue '{shut}' is Closed"
    wait_for(lambda: any(closed in m for m in cluster.events("QueueClosed")), timeout=TIMEOUT,
             what=f"a QueueClosed event saying {closed!r}")  # fmt: skip
    said = _says_unschedulable(cluster, "ray-c-pg", closed)
    assert said["reason"] == "NotEnoughResources", said
    assert (_volcano_podgroup(cluster, "ray-c-pg") or {})["status"]["phase"] == "Pending"
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert not _bound(framework.pods(cluster, "a")), "RayCluster a bound over its capability"
        assert not _bound(framework.pods(cluster, "c")), "RayCluster c bound in a Closed queue"
        time.sleep(0.2)

    # The capability raised to what it needs: the RayCluster binds, all of it at once.
    cluster.access.kubectl("patch", "queue", team, "--type=merge", "-p",
                           json.dumps({"spec": {"capability": {"cpu": str(need)}}}))  # fmt: skip
    bound_whole_at_once(cluster, framework, "a", pods)
    wait_for(
        lambda: (_unschedulable(cluster, "ray-a-pg") or {}).get("status") == "False",
        timeout=TIMEOUT,
        what="the PodGroup's condition Unschedulable withdrawn once bound",
    )
    time.sleep(2)  # the room is there, the queue still Closed
    assert not _bound(framework.pods(cluster, "c")), "RayCluster c bound in a Closed queue"


def pytorch_job(cluster: Cluster, name: str, scheduler: str, pods: int) -> list[dict]:
    """A master and pods - 1 workers (the training operator wants containers named pytorch)."""
    master = _pod_spec(cluster, scheduler, "pytorch")
    worker = _pod_spec(cluster, scheduler, "pytorch")
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                               "template": {"spec": master}},
                    "Worker": {"replicas": pods - 1, "restartPolicy": "OnFailure",
                               "template": {"spec": worker}},
                },
            },
        }
    ]  # fmt: skip


def training_operator_objects(setup: Setup) -> list[dict]:
    """The training operator rotates certificates of its own into a Secret of its namespace
    and a ValidatingWebhookConfiguration it patches; both must exist, and its webhooks are
    not needed here (they only validate), so the configuration it patches holds none."""
    return [
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "training-operator-webhook-cert", "namespace": setup.namespace}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "validator.training-operator.kubeflow.org"}},
    ]  # fmt: skip


# Where the training operator's certificate rotator expects its Secret mounted.
TRAINING_OPERATOR_CERTS = Path("/tmp/k8s-webhook-server/serving-certs")


def mount_training_operator_secret(cluster: Cluster, setup: Setup) -> None:
    """The kubelet's part: the Secret the rotator filled, written where it looks for it
    (it waits until the files match before it starts its controllers)."""

    def filled() -> dict[str, str] | None:
        data = cluster.get("secret", "training-operator-webhook-cert").get("data") or {}
        return data if "tls.crt" in data else None

    data = wait_for(filled, timeout=TIMEOUT, what="the training operator's certificates")
    TRAINING_OPERATOR_CERTS.mkdir(parents=True, exist_ok=True)
    for name, value in data.items():
        (TRAINING_OPERATOR_CERTS / name).write_bytes(base64.b64decode(value))


FRAMEWORKS["training-operator"] = Framework(
    operator="training-operator",
    crds=("kubeflow.org_pytorchjobs.yaml",),
    asks_for="",
    job=pytorch_job,
    selector=lambda name: f"training.kubeflow.org/job-name={name}",
    kind="pytorchjob",
    objects=training_operator_objects,
    started=mount_training_operator_secret,
    args=lambda setup: (
        "--enable-scheme=pytorchjob",
        f"--webhook-server-port={setup.port}",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ),
    env=lambda setup: {"MY_POD_NAMESPACE": setup.namespace},
)

OTHERS = ["kuberay-volcano", "kuberay-plain", "jobset", "lws", "mpi-operator",
          "training-operator"]  # fmt: skip


# -- Kueue: admits whole jobs against quota; this scheduler places them -----------------------


KUEUE_CRDS = tuple(
    f"kueue.x-k8s.io_{kind}.yaml"
    for kind in ("admissionchecks", "clusterqueues", "cohorts", "localqueues",
                 "multikueueclusters", "multikueueconfigs", "provisioningrequestconfigs",
                 "resourceflavors", "topologies", "workloadpriorityclasses", "workloads")
)  # fmt: skip
RACK = "gang-scheduler.io/rack"


def kueue_config(setup: Setup) -> dict:
    config = _controller_config("kueue.x-k8s.io", setup)
    config["apiVersion"] = "config.kueue.x-k8s.io/v1beta2"
    config["manageJobsWithoutQueueName"] = False
    config["integrations"] = {"frameworks": ["batch/job"]}
    return config


def queued_job(
    cluster: Cluster, name: str, scheduler: str, pods: int, *, topology: str = ""
) -> dict:
    """An Indexed Job for Kueue's queue "lq": created suspended, as Kueue asks; with
    ``topology``, all its pods required in one domain of that level (Kueue's TAS)."""
    template = job_template(cluster, scheduler, pods, "main")
    if topology:
        template["spec"]["template"]["metadata"]["annotations"] = {
            **RUNS_AN_HOUR,
            "kueue.x-k8s.io/podset-required-topology": topology,
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {**template["spec"], "suspend": True},
    }


# With its own certificate management off, Kueue reads its metrics server's pair from here.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def kueue_metrics_certs(setup: Setup) -> None:
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(setup.cert_dir / name, KUEUE_METRICS_CERTS / name)
    except OSError as error:
        raise AssertionError(
            f"Kueue reads its metrics certificates from {KUEUE_METRICS_CERTS} only; this test "
            f"writes them there and could not ({error}): run it as a user who may"
        ) from error


FRAMEWORKS["kueue"] = Framework(
    operator="kueue",
    crds=KUEUE_CRDS,
    asks_for="",
    job=lambda cluster, name, scheduler, pods: [queued_job(cluster, name, scheduler, pods)],
    selector=lambda name: f"batch.kubernetes.io/job-name={name}",
    kind="job",
    webhooks="config/components/webhook/manifests.yaml",
    config=kueue_config,
    prepare=kueue_metrics_certs,
    # Its visibility API is an aggregated API server, which needs an in-cluster identity.
    args=lambda setup: ("--feature-gates=VisibilityOnDemand=false",),
)


def kueue_queues(cluster: Cluster, *, cpu: int, topology: bool) -> None:
    """A ClusterQueue of ``cpu`` CPUs over this test's nodes (a flavor that selects them, with
    a Topology of racks and hosts when asked), and the namespace's LocalQueue "lq"."""
    ns = cluster.namespace
    flavor: dict = {"nodeLabels": {TEST_LABEL: ns}}
    objects: list[dict] = []
    if topology:
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": f"racks-{ns}"},
                "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]},
            }
        )
        flavor["topologyName"] = f"racks-{ns}"
    objects += [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": f"flavor-{ns}"}, "spec": flavor},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": f"cq-{ns}"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu"],
             "flavors": [{"name": f"flavor-{ns}",
                          "resources": [{"name": "cpu", "nominalQuota": str(cpu)}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": f"cq-{ns}"}},
    ]  # fmt: skip
    cluster.apply(*objects)


def _suspended(cluster: Cluster, job: str) -> bool:
    return bool(cluster.get("job", job)["spec"].get("suspend"))


@pytest.mark.clients
@pytest.mark.parametrize("running", ["kueue"], indirect=True)
def test_kueue_admits_whole_jobs_and_this_scheduler_binds_them_only_once_admitted(
    cluster: Cluster, running: tuple
) -> None:
    """Quota for one of two jobs where the nodes have room for both: the admitted one binds
    whole; the other is not admitted, so it has no pod bound and no FailedScheduling; once
    the first is deleted Kueue admits the second, which binds whole."""
    framework, scheduler = running
    cluster.nodes(6, cpu=CPU)
    kueue_queues(cluster, cpu=3 * int(CPU), topology=False)
    cluster.apply(queued_job(cluster, "a", scheduler, 3), queued_job(cluster, "b", scheduler, 3))
    admitted = wait_for(
        lambda: next((j for j in ("a", "b") if not _suspended(cluster, j)), None),
        timeout=TIMEOUT,
        what="Kueue admitting one of the two Jobs",
    )
    waiting = "b" if admitted == "a" else "a"
    wait_for(lambda: len(_bound(framework.pods(cluster, admitted))) == 3, timeout=TIMEOUT,
             what=f"Job {admitted} bound whole once admitted")  # fmt: skip
    time.sleep(2)
    assert _suspended(cluster, waiting)
    assert not _bound(framework.pods(cluster, waiting))
    assert not [m for m in cluster.events("FailedScheduling") if f"Job/{waiting}" in m]

    cluster.access.kubectl("delete", "job", admitted, "-n", cluster.namespace,
                           "--cascade=foreground", "--wait=false")  # fmt: skip
    wait_for(
        lambda: len(_bound(framework.pods(cluster, waiting))) == 3,
        timeout=TIMEOUT,
        what=f"Job {waiting} admitted and bound whole once {admitted} was deleted",
    )


@pytest.mark.clients
@pytest.mark.parametrize("running", ["kueue"], indirect=True)
def test_with_kueues_topology_aware_scheduling_placement_stays_in_the_domain_it_chose(
    cluster: Cluster, running: tuple
) -> None:
    """Kueue's TAS picks a rack for the Job, holds its pods behind its scheduling gate, then
    lifts the gate with a node selector into that rack: this scheduler keeps the gang there."""
    framework, scheduler = running
    names = cluster.nodes(2, cpu=CPU, labels={RACK: "r0"}) + cluster.nodes(
        2, cpu=CPU, labels={RACK: "r1"}
    )
    kueue_queues(cluster, cpu=4 * int(CPU), topology=True)
    cluster.apply(queued_job(cluster, "tas", scheduler, 2, topology=RACK))
    wait_for(lambda: len(_bound(framework.pods(cluster, "tas"))) == 2, timeout=TIMEOUT,
             what="the TAS Job bound whole")  # fmt: skip
    listed = cluster.access.kubectl("get", "nodes", *names, "-o", "json").stdout
    racks = {
        node["metadata"]["name"]: node["metadata"]["labels"][RACK]
        for node in json.loads(listed)["items"]
    }
    placed = framework.pods(cluster, "tas")
    assert len({racks[node] for node in placed.values()}) == 1, placed
    workloads = json.loads(
        cluster.access.kubectl("get", "workloads.kueue.x-k8s.io", "-n", cluster.namespace,
                               "-o", "json").stdout
    )["items"]  # fmt: skip
    assignment = workloads[0]["status"]["admission"]["podSetAssignments"][0]
    chosen = kueue_domains(assignment["topologyAssignment"])
    assert set(placed.values()) <= chosen, (placed, assignment["topologyAssignment"])


def kueue_domains(assignment: dict) -> set[str]:
    """The lowest-level domains (here: nodes) of a Kueue topology assignment, in its v1beta2
    form: slices whose values per level are given once ("universal") or per domain
    ("individual": a prefix, roots and a suffix)."""
    domains: set[str] = set()
    for piece in assignment["slices"]:
        lowest = piece["valuesPerLevel"][-1]
        if "universal" in lowest:
            domains.add(lowest["universal"])
        individual = lowest.get("individual") or {}
        prefix, suffix = individual.get("prefix", ""), individual.get("suffix", "")
        domains.update(prefix + root + suffix for root in individual.get("roots", ()))
    return domains


@pytest.mark.clients
@pytest.mark.parametrize("running", OTHERS, indirect=True)
def test_every_framework_binds_whole_jobs_unchanged(cluster: Cluster, running: tuple) -> None:
    framework, scheduler = running
    story(cluster, framework, scheduler)


def test_every_framework_is_tested() -> None:
    """A framework added to FRAMEWORKS without a test of its own would never run."""
    assert set(FRAMEWORKS) == {"kuberay-scheduler-plugins", *OTHERS, "kueue"}
