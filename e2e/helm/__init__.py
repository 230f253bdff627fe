"""helm, built from its Go module by build.sh beside this file, and the chart it installs
(charts/gang-scheduler/): what the chart's tests share; promtool too (e2e/promtool/build.sh),
which checks the chart's alert rules.

Nothing here builds: a cold build belongs to ``make binaries``, not to a test, so a binary
that is not there yet is a :class:`MissingBinary` whose message says to run it (the tests
fail with it, never skip).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHART = REPO / "charts" / "gang-scheduler"
MANIFESTS = REPO / "manifests"


class MissingBinary(Exception):
    """helm, promtool or kubectl is not built yet; the message says how to build it."""


def _path_of(script: Path, what: str) -> Path:
    result = subprocess.run(
        ["bash", str(script), "--path"], capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise MissingBinary(
            f"{what} is not built yet: run `make binaries` (it runs "
            f"{script.relative_to(REPO)} and caches what it builds). {result.stderr.strip()}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def helm_binary() -> Path:
    """helm, as e2e/helm/build.sh cached it."""
    return _path_of(HERE / "build.sh", "helm")


def servicemonitor_crd() -> Path:
    """The Prometheus Operator's ServiceMonitor CRD, cached beside helm by build.sh."""
    return helm_binary().parent / "servicemonitor-crd.yaml"


def prometheusrule_crd() -> Path:
    """The Prometheus Operator's PrometheusRule CRD, cached beside helm by build.sh."""
    return helm_binary().parent / "prometheusrule-crd.yaml"


def promtool_binary() -> Path:
    """promtool, as e2e/promtool/build.sh cached it (it checks the chart's alert rules)."""
    return _path_of(REPO / "e2e" / "promtool" / "build.sh", "promtool")


def kubectl_binary() -> Path:
    """kubectl: KUBE_BIN_DIR's when it has one (as testbed.cluster picks it), else the control
    plane's build, found without building it."""
    override = os.environ.get("KUBE_BIN_DIR")
    if override and (Path(override) / "kubectl").is_file():
        return Path(override) / "kubectl"
    folder = _path_of(REPO / "e2e" / "controlplane" / "build.sh", "kubectl")
    return folder / "kubectl"


@dataclass(frozen=True)
class Helm:
    """The built helm, with its cache, config and data in ``home`` (never the user's own),
    talking to the cluster of ``kubeconfig`` when it has one."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def run(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        env.pop("KUBECONFIG", None)
        cluster = ["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []
        result = subprocess.run(
            [str(self.binary), *args, *cluster],
            capture_output=True, text=True, env=env, timeout=timeout, check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def template(
        self, release: str, namespace: str, *values: str, chart: Path = CHART
    ) -> list[dict]:
        """The chart rendered as ``helm install`` would (``values``: ``--set`` arguments)."""
        sets = [arg for value in values for arg in ("--set", value)]
        out = self.run("template", release, str(chart), "--namespace", namespace, *sets).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


def kustomize(kubectl: Path, folder: Path = MANIFESTS) -> list[dict]:
    """``kubectl kustomize`` of ``folder``: what ``kubectl apply -k`` would apply."""
    out = subprocess.run(
        [str(kubectl), "kustomize", str(folder)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def token_kubeconfig(admin: Path, token: str, path: Path, user: str) -> Path:
    """A kubeconfig for the cluster of ``admin`` that authenticates with ``token`` alone (a
    ServiceAccount's), written to ``path``."""
    cluster = yaml.safe_load(admin.read_text())["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    return path
