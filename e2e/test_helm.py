"""The Helm chart on the real API server: its rendering passes the server's own validation
(the ServiceMonitor and the PrometheusRule against the Prometheus Operator's CRDs, the
dashboard's ConfigMap), and a release installed then upgraded with the built helm gives a
ServiceAccount whose token runs the scheduler, with the flags the release's Deployment holds,
to schedule a gang. tests/unit/test_helm_chart.py checks the chart without a cluster."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.fixtures import Cluster, ClusterAccess, SchedulerProcess, wait_for
from e2e.helm import (
    CHART,
    Helm,
    MissingBinary,
    helm_binary,
    prometheusrule_crd,
    servicemonitor_crd,
    token_kubeconfig,
)
from scheduler.model import names
from testbed import cluster as local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane, pytest.mark.tools]

SERVICE_MONITORS = "servicemonitors.monitoring.coreos.com"
PROMETHEUS_RULES = "prometheusrules.monitoring.coreos.com"
# A CRD's Established condition, as kubectl's jsonpath reads it.
ESTABLISHED = '{.status.conditions[?(@.type=="Established")].status}'


@pytest.fixture(scope="module")
def helm(control_plane: ClusterAccess, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = helm_binary()
    except MissingBinary as missing:
        pytest.fail(str(missing), pytrace=False)
    home = tmp_path_factory.mktemp("helm-home")
    return Helm(binary=binary, home=home, kubeconfig=control_plane.kubeconfig)


def test_the_rendered_chart_passes_the_api_servers_own_validation(
    control_plane: ClusterAccess, helm: Helm, namespace: str
) -> None:
    # The ServiceMonitor's and the PrometheusRule's schemas: the CRDs the Prometheus Operator
    # ships, served here.
    for crd, kind in (
        (servicemonitor_crd(), SERVICE_MONITORS),
        (prometheusrule_crd(), PROMETHEUS_RULES),
    ):
        control_plane.kubectl("apply", "--server-side", "-f", str(crd))
        # Polled, not `kubectl wait`: that exits 1 at once while a new CRD has no conditions
        # yet (".status.conditions accessor error: <nil>"), as it did once in make test.
        wait_for(
            lambda kind=kind: (
                control_plane.kubectl(
                    "get", f"crd/{kind}", "-o", f"jsonpath={ESTABLISHED}", check=False
                ).stdout.strip()
                == "True"
            ),
            timeout=30,
            what=f"crd/{kind} Established",
        )
        # Established comes a moment before the storage serves lists.
        wait_for(
            lambda kind=kind: control_plane.kubectl("get", kind, "-A", check=False).returncode == 0,
            timeout=30,
            what=f"{kind} served",
        )
    # Every option that adds or shapes an object, and the CRDs; strict field validation (the
    # kubectl default) refuses a field the server's schema does not know.
    rendered = helm.run(
        "template", "dry", str(CHART), "--namespace", namespace, "--include-crds",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.scrapeTimeout=10s",
        "--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        "--set", "metrics.prometheusRule.ruleLabels.team=ml",
        "--set", "metrics.dashboard.enabled=true",
        "--set", "metrics.dashboard.annotations.grafana_folder=Scheduling",
        "--set", "metrics.service.annotations.team=ml",
        "--set", "serviceAccount.annotations.team=ml",
        "--set", "podLabels.team=ml", "--set", "podAnnotations.team=ml",
        "--set", "imagePullSecrets[0].name=registry",
        "--set", "nodeSelector.kubernetes\\.io/os=linux",
        "--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
        "--set", "topology.fromLabels[0].level=rack",
        "--set", "topology.fromLabels[0].label=example.com/rack",
    ).stdout  # fmt: skip
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=rendered, timeout=90
    )
    kinds = [line.split("/")[0] for line in result.stdout.splitlines()]
    assert all(line.endswith("(server dry run)") for line in result.stdout.splitlines())
    for kind in (
        "customresourcedefinition.apiextensions.k8s.io", "serviceaccount",
        "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io",
        "role.rbac.authorization.k8s.io", "rolebinding.rbac.authorization.k8s.io",
        "service", "deployment.apps", "servicemonitor.monitoring.coreos.com",
        "prometheusrule.monitoring.coreos.com", "configmap",
    ):  # fmt: skip
        assert kind in kinds, result.stdout


class Release:
    """One release of the chart, named uniquely (its ClusterRole is cluster-wide), in the
    test's namespace; uninstalled at the end whatever happens."""

    def __init__(self, helm: Helm, cluster: Cluster) -> None:
        self.helm, self.cluster = helm, cluster
        self.name = f"e2e-{uuid.uuid4().hex[:5]}"
        self.fullname = f"{self.name}-gang-scheduler"  # the chart's fullname of this release
        self.installed = False

    def install(self, *values: str) -> None:
        self._run("install", values)
        self.installed = True

    def upgrade(self, *values: str) -> None:
        """An upgrade that keeps what the last revision was given, as one would change a
        value or two of a running release."""
        self._run("upgrade", values, "--reuse-values")

    def _run(self, verb: str, values: tuple[str, ...], *flags: str) -> None:
        sets = [arg for value in values for arg in ("--set", value)]
        self.helm.run(
            verb, self.name, str(CHART), "--namespace", self.cluster.namespace, "--timeout=60s",
            *flags, *sets, timeout=90,
        )  # fmt: skip

    def history(self) -> list[dict]:
        out = self.helm.run("history", self.name, "-n", self.cluster.namespace, "-o", "json")
        return json.loads(out.stdout)

    def deployment(self) -> dict:
        return self.cluster.get("deployment", self.fullname)

    def uninstall(self, *, check: bool = True) -> None:
        if self.installed:
            self.helm.run(
                "uninstall", self.name, "-n", self.cluster.namespace, "--timeout=60s", check=check
            )
            self.installed = False


@pytest.fixture
def release(helm: Helm, cluster: Cluster) -> Iterator[Release]:
    made = Release(helm, cluster)
    try:
        yield made
    finally:
        made.uninstall(check=False)


def test_a_release_installed_then_upgraded_schedules_a_gang_as_its_service_account(
    cluster: Cluster, release: Release, tmp_path: Path
) -> None:
    # A scheduler name of its own: the session's scheduler leaves this gang alone.
    name = f"helm-{uuid.uuid4().hex[:6]}"
    release.install("replicas=1", f"schedulerNames={{{name}}}")
    assert release.deployment()["spec"]["replicas"] == 1
    release.upgrade("replicas=2", "scheduling.defaultTimeout=120", "scheduling.maxBackoff=2")
    assert [(r["revision"], r["status"]) for r in release.history()] == [
        (1, "superseded"),
        (2, "deployed"),
    ]
    deployment = release.deployment()
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    # --reuse-values kept the name given at install; the upgrade added the timeout.
    assert f"--scheduler-name={name}" in args, args
    assert "--default-timeout=120" in args, args
    assert container["image"] == "gang-scheduler:0.1.0"  # the chart's appVersion

    # The scheduler as the Deployment would run it: its args (ports moved off the ones
    # other processes here may hold), with the release's ServiceAccount token alone.
    access = cluster.access
    token = access.kubectl(
        "create", "token", release.fullname, "-n", cluster.namespace, "--duration=1h"
    ).stdout.strip()
    kubeconfig = token_kubeconfig(access.kubeconfig, token, tmp_path / "kubeconfig", name)
    ports = {flag: local_cluster.free_port() for flag in ("--health-port", "--metrics-port")}
    run_args = tuple(
        f"{flag}={ports[flag]}" if flag in ports else arg
        for arg in args[1:]
        for flag in [arg.partition("=")[0]]
    )
    scheduler = SchedulerProcess(
        kubeconfig=kubeconfig,
        log=access.kubeconfig.parent / "logs" / f"scheduler-{name}.log",
        name=name,
        extra=run_args,
    ).start()
    try:
        cluster.nodes(1, cpu="4")
        cluster.apply(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "chart", "namespace": cluster.namespace},
                "spec": {"minMember": 3},
            },
            *(
                cluster.pod(f"chart-{i}", scheduler=name, labels={names.POD_GROUP_LABEL: "chart"})
                for i in range(3)
            ),
        )
        wait_for(
            lambda: {"chart-0", "chart-1", "chart-2"} <= cluster.bound(),
            timeout=30,
            what="the gang bound by the scheduler running as the chart's ServiceAccount",
        )
        wait_for(
            lambda: (
                cluster.get("podgroups.scheduling.x-k8s.io", "chart")
                .get("status", {})
                .get("scheduled")
                == 3
            ),
            timeout=30,
            what="PodGroup status written",
        )
        # Leader election in the release's namespace: the chart's Role at work.
        assert cluster.lease_holder(name)
        scheduler.assert_alive()
    finally:
        scheduler.stop()
    log = scheduler.log.read_text(errors="replace")
    status_403 = re.compile(r"(?<![\d.:])403(?!\d)")  # not digits of a timestamp
    forbidden = [line for line in log.splitlines() if status_403.search(line) or "orbidden" in line]
    assert forbidden == [], "\n".join(forbidden[:5])
    whoami = ClusterAccess(kubeconfig=kubeconfig, kubectl_path=access.kubectl_path).kubectl(
        "auth", "whoami", "-o", "json"
    )
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{cluster.namespace}:{release.fullname}"
    )

    # Uninstalled, the release takes its RBAC with it and leaves the CRDs (Helm never deletes
    # what crds/ installed: PodGroups everywhere would go with them).
    release.uninstall()
    gone = access.kubectl("get", "clusterrole", release.fullname, check=False)
    assert gone.returncode != 0
    assert "NotFound" in gone.stderr
    access.kubectl("get", "crd", "podgroups.scheduling.x-k8s.io", "queues.scheduling.volcano.sh")
