"""The job frameworks' real operators, built from their Go modules (build.sh beside this file)
and run out of cluster against the control plane under test, as their own processes."""

from __future__ import annotations

import base64
import copy
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.fixtures import stop_process
from testbed.cluster import BACKGROUND_BUILDS

HERE = Path(__file__).resolve().parent


def _build(name: str, *args: str) -> str:
    result = subprocess.run(
        ["bash", str(HERE / "build.sh"), name, *args],
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(
            f"could not build the {name} operator (e2e/operators/build.sh {name}): "
            f"{result.stderr.strip()[-2000:]}"
        )
    return result.stdout.strip().splitlines()[-1]


def binary(name: str) -> Path:
    """The operator's binary, built (or taken from the cache) first; under make test, whose
    background build builds it (e2e/run-tests.sh), only taken from the cache."""
    if os.environ.get(BACKGROUND_BUILDS):
        path = Path(_build(name, "--path"))
        if not path.is_file():
            raise RuntimeError(f"the {name} operator was not built by make test's background build")
        return path
    return Path(_build(name))


def crds(name: str) -> Path:
    """The folder of the CRDs the operator's own module ships."""
    return Path(_build(name, "--crds"))


def source(name: str) -> Path:
    """The operator's module source (read only: the Go module cache)."""
    return Path(_build(name, "--source"))


@dataclass
class OperatorProcess:
    """One operator, run as a process of its own with the test cluster's kubeconfig."""

    name: str
    kubeconfig: Path
    log: Path
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> OperatorProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(binary(self.name)), *self.args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)},
            )  # fmt: skip
        return self

    def assert_alive(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
            raise AssertionError(
                f"the {self.name} operator exited with {code}; its log ends:\n{tail}"
            )

    def stop(self) -> None:
        stop_process(self.process)


def webhook_configurations(
    manifests: Iterable[Mapping[str, Any]],
    *,
    port: int,
    ca: bytes,
    namespace: str,
    prefix: str,
) -> list[dict[str, Any]]:
    """An operator's own (Mutating|Validating)WebhookConfigurations, pointed at its webhook
    server on the loopback address by URL, with ``ca`` as their caBundle, and held to
    ``namespace`` (a test's): with failurePolicy Fail, a configuration outliving its server
    would refuse every pod of the cluster. Renamed with ``prefix`` and the namespace, so
    tests of the same operator never share one."""
    made = []
    bundle = base64.b64encode(ca).decode()
    for manifest in manifests:
        if manifest.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        config = copy.deepcopy(dict(manifest))
        config["metadata"] = {"name": f"{prefix}-{config['metadata']['name']}-{namespace}"}
        for hook in config.get("webhooks") or []:
            path = (hook.get("clientConfig") or {}).get("service", {}).get("path", "/")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            hook["timeoutSeconds"] = 10
        made.append(config)
    return made


def manifests_in(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of ``path`` (a file or every .yaml file of a folder)."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]
