"""The Helm chart (charts/gang-scheduler/) rendered by the real helm, no cluster: it lints, it
grants exactly what the kustomize install grants (its rules are read from
manifests/rbac.yaml), its CRDs are the repository's, and its Deployment runs the scheduler
with flags ``gang-scheduler run`` accepts and, by default, as manifests/ runs it.

helm and kubectl come from ``make binaries`` (e2e/helm/build.sh, e2e/controlplane/build.sh):
without them these tests fail saying so. e2e/test_helm.py installs the chart."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from e2e.helm import (
    CHART,
    MANIFESTS,
    REPO,
    Helm,
    MissingBinary,
    helm_binary,
    kubectl_binary,
    kustomize,
)
from e2e.monitoring import ALERTS, DASHBOARD
from scheduler.cli import _names, build_parser

# helm is built by make test while other tests run (e2e/awaiting_builds.py).
pytestmark = pytest.mark.tools

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# As manifests/ installs it: `helm install gang-scheduler` names everything the same.
RELEASE, NAMESPACE = "gang-scheduler", "gang-scheduler-system"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        return Helm(binary=helm_binary(), home=tmp_path_factory.mktemp("helm-home"))
    except MissingBinary as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="module")
def kustomized() -> list[dict]:
    try:
        return kustomize(kubectl_binary())
    except MissingBinary as missing:
        pytest.fail(str(missing), pytrace=False)


def rbac(docs: list[dict]) -> dict[tuple[str, str, str | None], dict]:
    """Each RBAC object by (kind, name, namespace): what it grants or binds, labels aside."""
    return {
        (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")): {
            field: doc.get(field) for field in ("rules", "roleRef", "subjects")
        }
        for doc in docs
        if doc["kind"] in RBAC_KINDS
    }


def one(docs: list[dict], kind: str) -> dict:
    (found,) = [doc for doc in docs if doc["kind"] == kind]
    return found


def scheduler_args(docs: list[dict]) -> list[str]:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container["args"]


def settings(args: list[str]) -> dict:
    """What a command line means to ``gang-scheduler run``, parsed by its own parser: the
    names as the scheduler reads them (identity and aliases), whether given or defaulted."""
    parsed = vars(build_parser().parse_args(args))
    return {**parsed, **_names(parsed.pop("scheduler_name"))}


def test_helm_lint_passes_on_the_chart_strictly(helm: Helm) -> None:
    result = helm.run("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_helm_lint_passes_with_every_option_set(helm: Helm) -> None:
    result = helm.run(
        "lint", "--strict", str(CHART), "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.ruleLabels.team=ml",
        "--set", "metrics.dashboard.enabled=true",
        "--set", "metrics.dashboard.annotations.grafana_folder=Scheduling",
        "--set", "topology.fromLabels[0].level=rack",
        "--set", "topology.fromLabels[0].label=example.com/rack",
        "--set", "serviceAccount.annotations.team=ml", "--set", "podLabels.team=ml",
    )  # fmt: skip
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_the_chart_and_the_kustomize_manifests_grant_the_same_rbac(
    helm: Helm, kustomized: list[dict]
) -> None:
    chart = rbac(helm.template(RELEASE, NAMESPACE))
    manifests = rbac(kustomized)
    assert sorted(chart) == sorted(manifests)
    for key, granted in manifests.items():
        assert chart[key] == granted, f"{key} differs between the chart and manifests/"


def test_another_release_grants_the_same_rules_under_its_own_names(
    helm: Helm, kustomized: list[dict]
) -> None:
    docs = helm.template("batch", "scheduling")
    assert one(docs, "ClusterRole")["metadata"]["name"] == "batch-gang-scheduler"
    assert one(docs, "ClusterRole")["rules"] == one(kustomized, "ClusterRole")["rules"]
    assert one(docs, "Role")["rules"] == one(kustomized, "Role")["rules"]
    assert one(docs, "Role")["metadata"]["namespace"] == "scheduling"
    subjects = [one(docs, kind)["subjects"] for kind in ("RoleBinding", "ClusterRoleBinding")]
    account = {"kind": "ServiceAccount", "name": "batch-gang-scheduler", "namespace": "scheduling"}
    assert subjects == [[account], [account]]
    assert one(docs, "ServiceAccount")["metadata"]["name"] == "batch-gang-scheduler"


def test_the_charts_rules_are_read_from_manifests_rbac_not_written_in_the_chart(
    helm: Helm, tmp_path: Path
) -> None:
    # A copy of the chart (symlinks resolved) whose rbac file grants one rule more: the
    # rendered ClusterRole follows the file, so the two installs cannot drift apart.
    copy = tmp_path / "gang-scheduler"
    shutil.copytree(CHART, copy, symlinks=False)
    rules_file = copy / "files" / "rbac.yaml"
    extra = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    text = rules_file.read_text()
    rules = text.index("\nrules:\n", text.index("\nkind: ClusterRole\n")) + len("\nrules:\n")
    rules_file.write_text(f"{text[:rules]}  - {json.dumps(extra)}\n{text[rules:]}")
    rendered = one(helm.template(RELEASE, NAMESPACE, chart=copy), "ClusterRole")["rules"]
    assert rendered[0] == extra


def test_the_charts_crds_and_rbac_file_are_the_repositorys_own_files(helm: Helm) -> None:
    # In the tree: symlinks, so there is one copy to edit.
    assert (CHART / "crds").resolve() == REPO / "crds"
    assert (CHART / "files" / "rbac.yaml").resolve() == MANIFESTS / "rbac.yaml"


def test_the_packaged_chart_carries_the_crds_and_rbac_file_as_real_files(
    helm: Helm, tmp_path: Path
) -> None:
    helm.run("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("gang-scheduler-*.tgz")
    with tarfile.open(package) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert not [name for name, m in members.items() if m.issym() or m.islnk()]
        crds = sorted(name for name in members if name.startswith("gang-scheduler/crds/"))
        assert crds == sorted(f"gang-scheduler/crds/{p.name}" for p in (REPO / "crds").iterdir())
        for name in crds:
            packed = archive.extractfile(members[name])
            assert packed is not None
            assert packed.read() == (REPO / "crds" / Path(name).name).read_bytes(), name
        packed = archive.extractfile(members["gang-scheduler/files/rbac.yaml"])
        assert packed is not None
        assert packed.read() == (MANIFESTS / "rbac.yaml").read_bytes()


def test_by_default_the_chart_runs_the_scheduler_as_the_manifests_run_it(
    helm: Helm, kustomized: list[dict]
) -> None:
    chart, manifests = helm.template(RELEASE, NAMESPACE), kustomized
    assert settings(scheduler_args(chart)) == settings(scheduler_args(manifests))
    chart_pod = one(chart, "Deployment")["spec"]["template"]["spec"]
    manifests_pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    for field in ("serviceAccountName", "priorityClassName", "securityContext"):
        assert chart_pod[field] == manifests_pod[field], field
    (chart_container,) = chart_pod["containers"]
    (manifests_container,) = manifests_pod["containers"]
    for field in ("ports", "livenessProbe", "readinessProbe", "resources", "securityContext"):
        assert chart_container[field] == manifests_container[field], field
    assert one(chart, "Deployment")["spec"]["replicas"] == 2
    chart_ports = one(chart, "Service")["spec"]["ports"]
    assert chart_ports == one(manifests, "Service")["spec"]["ports"]
    assert one(chart, "Service")["metadata"]["name"] == "gang-scheduler-metrics"


def test_every_flag_the_chart_passes_is_one_gang_scheduler_run_accepts(helm: Helm) -> None:
    args = scheduler_args(
        helm.template(
            "batch", "scheduling",
            "schedulerNames={gang-scheduler,volcano}", "leaderElection.leaseDuration=20",
            "scheduling.defaultTimeout=120", "scheduling.maxBackoff=3",
            "scheduling.starvationAfter=900", "scheduling.staleGangAfter=120",
            "scheduling.fairShareHalfLife=1800",
            "scheduling.scoring=spread", "scheduling.actions={allocate,preempt}",
            "scheduling.bindConcurrency=16", "scheduling.kubeApiQps=50",
            "scheduling.kubeApiBurst=100", "topology.namespace=topologies",
            "topology.fromLabels[0].level=rack", "topology.fromLabels[0].label=example.com/rack",
            "topology.fromLabels[1].level=zone",
            "topology.fromLabels[1].label=topology.kubernetes.io/zone",
            "unreachableLimit=30", "verbose=true", "logFormat=console", "healthPort=8081",
            "metrics.port=9091", "extraArgs={--max-backoff=4}",
        )
    )  # fmt: skip
    assert args[0] == "run"
    parsed = settings(args)
    assert (parsed["scheduler_name"], parsed["aliases"]) == ("gang-scheduler", ("volcano",))
    assert parsed["leader_elect"] is True
    assert parsed["leader_elect_namespace"] == "scheduling"
    assert parsed["lease_duration"] == 20
    assert parsed["default_timeout"] == 120
    assert parsed["max_backoff"] == 4  # extraArgs come last, so they win
    assert parsed["starvation_after"] == 900
    assert parsed["stale_gang_after"] == 120
    assert parsed["fair_share_half_life"] == 1800
    assert parsed["scoring"] == "spread"
    assert parsed["actions"] == ("allocate", "preempt")
    assert parsed["bind_concurrency"] == 16
    assert (parsed["kube_api_qps"], parsed["kube_api_burst"]) == (50, 100)
    assert parsed["topology_namespace"] == "topologies"
    assert parsed["topology_from_labels"] == (
        ("rack", "example.com/rack"),
        ("zone", "topology.kubernetes.io/zone"),
    )
    assert parsed["unreachable_limit"] == 30
    assert (parsed["verbose"], parsed["log_format"]) == (True, "console")
    assert (parsed["health_port"], parsed["metrics_port"]) == (8081, 9091)


def test_a_flag_left_null_is_left_to_the_schedulers_own_default(helm: Helm) -> None:
    parsed = settings(scheduler_args(helm.template("batch", "scheduling")))
    defaults = settings(["run"])
    for flag in ("default_timeout", "max_backoff", "starvation_after", "stale_gang_after",
                 "fair_share_half_life", "scoring", "actions", "bind_concurrency", "kube_api_qps",
                 "kube_api_burst", "lease_duration", "unreachable_limit",
                 "topology_from_labels", "verbose"):  # fmt: skip
        assert parsed[flag] == defaults[flag], flag
    # The Lease and the topology ConfigMap are looked for in the release's namespace.
    assert parsed["leader_elect_namespace"] == parsed["topology_namespace"] == "scheduling"


def test_chart_integers_from_a_values_file_render_as_integers(helm: Helm, tmp_path: Path) -> None:
    """Helm reads a values file's numbers as float64, whose {{ . }} of 1000000 would be
    "1e+06", which --kube-api-burst (type=int) refuses at start: the chart renders the
    integer as an integer."""
    values = tmp_path / "v.yaml"
    values.write_text("scheduling:\n  kubeApiBurst: 1000000\n")
    out = helm.run("template", "gs", str(CHART), "-n", "x", "-f", str(values)).stdout
    assert "--kube-api-burst=1000000" in out


def test_without_leader_election_one_replica_runs_and_more_are_refused(helm: Helm) -> None:
    alone = helm.template("batch", "scheduling", "leaderElection.enabled=false", "replicas=1")
    assert settings(scheduler_args(alone))["leader_elect"] is False
    refused = helm.run(
        "template", "batch", str(CHART), "--set", "leaderElection.enabled=false", check=False
    )
    assert refused.returncode != 0
    assert "replicas > 1 needs leaderElection.enabled" in refused.stderr


def test_the_service_monitor_is_optional_and_scrapes_the_metrics_service(helm: Helm) -> None:
    assert not [d for d in helm.template("batch", "scheduling") if d["kind"] == "ServiceMonitor"]
    docs = helm.template(
        "batch", "scheduling", "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selected = monitor["spec"]["selector"]["matchLabels"].items()
    assert selected <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["scheduling"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    # And the Service selects the scheduler's pods.
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_the_dashboard_configmap_is_optional_and_carries_the_dashboard_file(helm: Helm) -> None:
    assert not [d for d in helm.template("batch", "scheduling") if d["kind"] == "ConfigMap"]
    (configmap,) = [
        d
        for d in helm.template("batch", "scheduling", "metrics.dashboard.enabled=true")
        if d["kind"] == "ConfigMap"
    ]
    assert configmap["metadata"]["name"] == "batch-gang-scheduler-dashboard"
    assert configmap["metadata"]["namespace"] == "scheduling"
    # The label Grafana's dashboard sidecar looks for (kube-prometheus-stack's default).
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in configmap["metadata"]
    (text,) = configmap["data"].values()
    assert list(configmap["data"]) == ["gang-scheduler.json"]
    assert json.loads(text) == json.loads(DASHBOARD.read_text())
    # Where a sidecar watches its own namespace, with its own label, in a folder.
    (moved,) = [
        d
        for d in helm.template(
            "batch",
            "scheduling",
            "metrics.dashboard.enabled=true",
            "metrics.dashboard.namespace=monitoring",
            "metrics.dashboard.label=dashboards",
            "metrics.dashboard.labelValue=gang",
            "metrics.dashboard.labels.team=ml",
            "metrics.dashboard.annotations.grafana_folder=Scheduling",
        )
        if d["kind"] == "ConfigMap"
    ]
    assert moved["metadata"]["namespace"] == "monitoring"
    labels = moved["metadata"]["labels"]
    assert (labels["dashboards"], labels["team"]) == ("gang", "ml")
    assert "grafana_dashboard" not in labels
    assert moved["metadata"]["annotations"] == {"grafana_folder": "Scheduling"}


def test_the_prometheus_rule_is_optional_and_carries_the_alerts_file(helm: Helm) -> None:
    assert not [d for d in helm.template("batch", "scheduling") if d["kind"] == "PrometheusRule"]
    rule = one(
        helm.template(
            "batch",
            "scheduling",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        ),
        "PrometheusRule",
    )
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "batch-gang-scheduler"
    assert rule["metadata"]["namespace"] == "scheduling"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The very rules promtool checks (tests/unit/test_dashboard.py), templates in their
    # annotations ({{ $labels.instance }}) left for Prometheus, not eaten by helm.
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    assert any(
        "{{ $labels." in r["annotations"]["summary"] for r in rule["spec"]["groups"][0]["rules"]
    )
    # Labels for routing go on every alert, over the file's own.
    labelled = one(
        helm.template(
            "batch",
            "scheduling",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.ruleLabels.team=ml",
            "metrics.prometheusRule.ruleLabels.severity=page",
        ),
        "PrometheusRule",
    )
    for group, original in zip(
        labelled["spec"]["groups"], yaml.safe_load(ALERTS.read_text())["groups"], strict=True
    ):
        for got, rule_in_file in zip(group["rules"], original["rules"], strict=True):
            assert got["labels"] == {**rule_in_file["labels"], "team": "ml", "severity": "page"}
            assert {k: v for k, v in got.items() if k != "labels"} == {
                k: v for k, v in rule_in_file.items() if k != "labels"
            }


def test_rbac_and_the_metrics_service_can_be_left_to_others(helm: Helm) -> None:
    docs = helm.template(
        "batch", "scheduling", "rbac.create=false", "serviceAccount.create=false",
        "serviceAccount.name=existing", "metrics.service.enabled=false",
    )  # fmt: skip
    assert sorted(doc["kind"] for doc in docs) == ["Deployment"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"


def test_helm_not_built_is_a_failure_that_says_to_run_make_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty cache: build.sh --path finds nothing and builds nothing.
    monkeypatch.setenv("GANG_SCHEDULER_CACHE", str(tmp_path))
    with pytest.raises(MissingBinary, match="run `make binaries`"):
        helm_binary()
