"""The schedulers ``make bench`` runs side by side, each in turn on the same control plane:
gang-scheduler and its peers, each with its own way of saying "these pods are a gang".

- **gang-scheduler** (us): a PodGroup of ours (``scheduling.x-k8s.io/v1alpha1``, the
  schema of scheduler-plugins'), pods labelled ``scheduling.x-k8s.io/pod-group``.
- **kube-scheduler**, the same build as the control plane (v1.37.2, or the release
  KUBE_BIN_DIR points at), with its own gang scheduling (GenericWorkload, and GangScheduling
  in 1.36): an upstream PodGroup (``scheduling.k8s.io``, v1alpha2 in 1.36 and v1beta1 from
  1.37, gang policy with ``minCount``), pods joined to it through
  ``spec.schedulingGroup.podGroupName``.
- **Coscheduling**: kube-scheduler v1.34.7 with scheduler-plugins' Coscheduling v0.34.7
  (bench/peers/coscheduling/), configured as scheduler-plugins' own example
  (manifests/coscheduling/scheduler-config.yaml); the same PodGroup objects as ours.
- **Coscheduling (tuned)**: the same, tuned for contention as scheduler-plugins' README
  recommends (``podGroupBackoffSeconds``, PodGroups with ``minResources`` and
  ``scheduleTimeoutSeconds``).

Every scheduler's API client is held to the same QPS and burst (kube-scheduler's
clientConnection, our ``--kube-api-qps``/``--kube-api-burst``).
"""

from __future__ import annotations

import compileall
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from bench.pprof import pprof_argv
from scheduler import __version__
from scheduler.codecs.quantities import quantity
from scheduler.model import names
from scheduler.model.resources import CPU
from testbed import cluster as local_cluster

REPO = Path(__file__).resolve().parent.parent
COSCHEDULING_BUILD = REPO / "bench" / "peers" / "coscheduling" / "build.sh"
# scheduler-plugins' example configuration waits this long at Permit for a gang's members.
COSCHEDULING_PERMIT_WAITING_SECONDS = 10
# Coscheduling tuned for contention as its README ("Advanced Configuration") recommends:
# a PodGroup that failed in PostFilter is not tried again for podGroupBackoffSeconds ("5-10:
# for clusters with moderate resource contention"), each PodGroup states minResources (its
# PreFilter rejects a gang the cluster has no room for before any member waits at Permit)
# and scheduleTimeoutSeconds (how long its members wait at Permit).
COSCHEDULING_TUNED_BACKOFF_SECONDS = 10
COSCHEDULING_TUNED_SCHEDULE_TIMEOUT_SECONDS = 10
# ... and grown with the gang: 0.1 s a member beyond that (25.6 s for 256), so that a big
# gang's members are not let go while the rest are still placed one by one. 0.1 s is some
# seven times the time a member took on the slowest tier (tuned Coscheduling bound 60,000
# pods in 852 s at 10,000 nodes, 14 ms a pod: gang-scheduling-xl-backlog-mixed-gangs.md).
COSCHEDULING_TUNED_TIMEOUT_PER_MEMBER = 0.1


def tuned_schedule_timeout(size: int) -> int:
    """The tuned Coscheduling's scheduleTimeoutSeconds for a gang of ``size`` members."""
    return max(
        COSCHEDULING_TUNED_SCHEDULE_TIMEOUT_SECONDS,
        math.ceil(size * COSCHEDULING_TUNED_TIMEOUT_PER_MEMBER),
    )


OUR_PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups"
UPSTREAM_PODGROUPS = "/apis/{version}/namespaces/{namespace}/podgroups"


def upstream_version(release: tuple[int, int]) -> str:
    """The version of the upstream PodGroup a kube-scheduler of ``release`` reads: v1beta1
    from 1.37, v1alpha2 in 1.36."""
    return "scheduling.k8s.io/v1beta1" if release >= (1, 37) else "scheduling.k8s.io/v1alpha2"


class PeerMissing(local_cluster.ClusterError):
    """A peer's binary is not built; the message says how to build it."""


@dataclass(frozen=True)
class ClientLimits:
    """What every scheduler's API client may do: client-go's QPS and burst, and how many
    bindings ours keeps in flight (kube-scheduler binds each pod in a goroutine of its own)."""

    qps: float
    burst: int
    bind_concurrency: int


@dataclass(frozen=True)
class Contender:
    """One scheduler of the bench: how to start it and how its gangs are written."""

    key: str
    label: str
    scheduler_name: str
    version: str
    argv: tuple[str, ...]
    # "ours": scheduling.x-k8s.io/v1alpha1 PodGroups (us, Coscheduling);
    # "upstream": scheduling.k8s.io PodGroups (kube-scheduler's gang scheduling), at
    # ``upstream_api`` (the version its release reads).
    gang_api: str
    upstream_api: str = "scheduling.k8s.io/v1alpha2"
    settings: dict = field(default_factory=dict)
    # Whether our PodGroups state minResources (the members' requests summed over the
    # gang) and a scheduleTimeoutSeconds grown with the gang (``tuned_schedule_timeout``):
    # the tuned Coscheduling's.
    min_resources: bool = False
    timeout_by_size: bool = False
    # Where it serves Prometheus metrics the bench reads (ours: passes, Events dropped).
    metrics_port: int | None = None
    # Where it runs from (an earlier checkout of ours, for an A/B run); None: here.
    cwd: Path | None = None
    # Where a Go peer serves pprof (``bench.run --pprof``); None: it does not.
    pprof_port: int | None = None

    def profiled(self, port: int) -> Contender:
        """This peer serving pprof on ``port`` if it is a kube-scheduler (its secure port is
        off in the bench); ours as it is (``measure_lag`` and py-spy profile ours)."""
        if "--secure-port=0" not in self.argv:
            return self
        settings = {**self.settings, "pprof": "secure port on loopback, pprof served (--pprof)"}
        return replace(self, argv=pprof_argv(self.argv, port), pprof_port=port, settings=settings)

    def podgroup(
        self, *, namespace: str, name: str, size: int, requests: dict[str, str] | None = None
    ) -> tuple[str, dict]:
        """The POST path and body of the PodGroup for a gang of ``size`` members, each
        asking ``requests``."""
        if self.gang_api == "upstream":
            return UPSTREAM_PODGROUPS.format(version=self.upstream_api, namespace=namespace), {
                "apiVersion": self.upstream_api,
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
            }
        spec: dict = {"minMember": size}
        if self.timeout_by_size:
            spec["scheduleTimeoutSeconds"] = tuned_schedule_timeout(size)
        if self.min_resources and requests:
            spec["minResources"] = {
                resource: f"{quantity(resource, amount) * size}{'m' if resource == CPU else ''}"
                for resource, amount in requests.items()
            }
        return OUR_PODGROUPS.format(namespace=namespace), {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        }

    def pod(self, name: str, *, gang: str | None, requests: dict[str, str]) -> dict:
        """A pod for this scheduler, joined to ``gang`` (a PodGroup) the way it reads them."""
        labels: dict[str, str] = {}
        spec: dict = {
            "schedulerName": self.scheduler_name,
            "containers": [{"name": "main", "image": "busybox", "resources": _resources(requests)}],
        }
        if gang is not None and self.gang_api == "upstream":
            spec["schedulingGroup"] = {"podGroupName": gang}
        elif gang is not None:
            labels[names.POD_GROUP_LABEL] = gang
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }

    def start(self, log: Path) -> subprocess.Popen[bytes]:
        env = None
        if self.cwd is not None:  # its own package first, whatever this interpreter has
            env = {**os.environ, "PYTHONPATH": str(self.cwd)}
        with log.open("ab") as out:
            return subprocess.Popen(
                list(self.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env=env,
            )

    def describe(self) -> dict:
        return {"label": self.label, "version": self.version, **self.settings}


def _resources(requests: dict[str, str]) -> dict:
    """Extended resources (GPUs) cannot be overcommitted: their limit must equal the request."""
    limits = {k: v for k, v in requests.items() if k not in {"cpu", "memory"}}
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def coscheduling_binary(*, build: bool) -> Path:
    """The Coscheduling peer's binary, from bench/peers/coscheduling/build.sh's cache.

    With ``build`` False nothing is built: a missing binary raises PeerMissing, which says
    how to build it (the bench smoke test must fail, not wait out a cold build)."""
    if not build:
        result = subprocess.run(
            ["bash", str(COSCHEDULING_BUILD), "--path"],
            stdout=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
    else:
        result = subprocess.run(
            ["bash", str(COSCHEDULING_BUILD)], stdout=subprocess.PIPE, text=True, check=False
        )
    path = Path(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    if result.returncode != 0 or path is None or not path.is_file():
        raise PeerMissing(
            "the Coscheduling peer (kube-scheduler with scheduler-plugins' Coscheduling) is not "
            f"built{f' (no {path})' if path else ''}: build it with `make binaries` or "
            f"`bash {COSCHEDULING_BUILD.relative_to(REPO)}` (needs Go; about 7 minutes cold)"
        )
    return path


def skewed_control_plane() -> Path:
    """A folder with kube-apiserver and kube-controller-manager of the Coscheduling peer's
    Kubernetes release (v1.34.7), built (or found in the cache) by its build.sh: the bench's
    --skew runs it within its version skew."""
    result = subprocess.run(
        ["bash", str(COSCHEDULING_BUILD), "--control-plane"],
        stdout=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    path = Path(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    if result.returncode != 0 or path is None or not (path / "kube-apiserver").is_file():
        raise PeerMissing(
            "the v1.34 control plane for --skew did not build (the reason is printed above): "
            f"`bash {COSCHEDULING_BUILD.relative_to(REPO)} --control-plane` (needs Go)"
        )
    return path


def kube_scheduler_binary() -> Path:
    binary = local_cluster.resolve_binaries().kube_scheduler
    if binary is None or not binary.is_file():
        raise PeerMissing(
            "kube-scheduler is not built: `make binaries` (e2e/controlplane/build.sh) builds it"
        )
    return binary


def _kube_scheduler_config(
    path: Path, *, kubeconfig: Path, limits: ClientLimits, profile: dict
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False},
                "clientConnection": {
                    "kubeconfig": str(kubeconfig),
                    "qps": limits.qps,
                    "burst": limits.burst,
                },
                "profiles": [profile],
            },
            sort_keys=False,
        )
    )
    return path


def compile_bytecode(checkout: Path = REPO) -> None:
    """The checkout's scheduler modules compiled to bytecode, as ``pip install`` leaves an
    installed package (the image's Dockerfile installs it so). Run from a source tree with
    PYTHONDONTWRITEBYTECODE=1 in the environment (this machine sets it), every start of the
    scheduler compiled its 55 modules again before its first bind."""
    if not compileall.compile_dir(checkout / "scheduler", quiet=1):
        raise RuntimeError(f"could not compile {checkout / 'scheduler'}: see the output above")


def _ours(*, kubeconfig: Path, workdir: Path, limits: ClientLimits, build: bool) -> Contender:
    return _ours_from(REPO, kubeconfig=kubeconfig, limits=limits)


# An earlier checkout of ours, run beside this one for an A/B run (``--only
# gang_scheduler_base``): the same interpreter and dependencies, its own package.
BASE_CHECKOUT = "GANG_SCHEDULER_BASE"


def _ours_base(*, kubeconfig: Path, workdir: Path, limits: ClientLimits, build: bool) -> Contender:
    base = os.environ.get(BASE_CHECKOUT, "")
    if not base or not (Path(base) / "scheduler" / "__init__.py").is_file():
        raise PeerMissing(
            f"set {BASE_CHECKOUT} to a checkout of gang-scheduler (git worktree add DIR COMMIT) "
            "to run its scheduler beside this one"
        )
    return _ours_from(Path(base).resolve(), kubeconfig=kubeconfig, limits=limits)


def commit_of(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def _ours_from(checkout: Path, *, kubeconfig: Path, limits: ClientLimits) -> Contender:
    compile_bytecode(checkout)
    metrics_port = local_cluster.free_port()
    here = checkout == REPO
    return Contender(
        key="gang_scheduler" if here else "gang_scheduler_base",
        label="gang-scheduler" if here else f"gang-scheduler at {commit_of(checkout)}",
        cwd=None if here else checkout,
        scheduler_name="gang-scheduler",
        version=__version__ if here else commit_of(checkout),
        argv=(
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--bind-concurrency",
            str(limits.bind_concurrency),
            "--kube-api-qps",
            str(limits.qps),
            "--kube-api-burst",
            str(limits.burst),
            "--metrics-port",
            str(metrics_port),
        ),
        gang_api="ours",
        metrics_port=metrics_port,
        settings={
            "gangs": "scheduling.x-k8s.io/v1alpha1 PodGroup",
            "qps": limits.qps,
            "burst": limits.burst,
            "bind_concurrency": limits.bind_concurrency,
        },
    )


def _kube_scheduler(
    *, kubeconfig: Path, workdir: Path, limits: ClientLimits, build: bool
) -> Contender:
    kube_config = _kube_scheduler_config(
        workdir / "kube-scheduler-gang.yaml",
        kubeconfig=kubeconfig,
        limits=limits,
        profile={"schedulerName": "kube-scheduler-gang"},
    )
    release = local_cluster.binary_release(kube_scheduler_binary())
    gates = local_cluster.scheduler_gates(release)
    api = upstream_version(release)
    return Contender(
        key="kube_scheduler",
        label="kube-scheduler (GangScheduling)",
        scheduler_name="kube-scheduler-gang",
        version=f"kube-scheduler {version_of(kube_scheduler_binary())}",
        argv=(
            str(kube_scheduler_binary()),
            f"--config={kube_config}",
            f"--feature-gates={gates}",
            "--secure-port=0",
            "-v=1",
        ),
        gang_api="upstream",
        upstream_api=api,
        settings={
            "gangs": f"{api} PodGroup (gang policy, minCount)",
            "feature_gates": gates,
            "qps": limits.qps,
            "burst": limits.burst,
            "profile": "default plugins",
        },
    )


def _coscheduling(
    *, kubeconfig: Path, workdir: Path, limits: ClientLimits, build: bool, tuned: bool = False
) -> Contender:
    args: dict = {"permitWaitingTimeSeconds": COSCHEDULING_PERMIT_WAITING_SECONDS}
    if tuned:
        args["podGroupBackoffSeconds"] = COSCHEDULING_TUNED_BACKOFF_SECONDS
    name = "coscheduling-tuned" if tuned else "coscheduling"
    cos_config = _kube_scheduler_config(
        workdir / f"{name}.yaml",
        kubeconfig=kubeconfig,
        limits=limits,
        profile={
            # scheduler-plugins' manifests/coscheduling/scheduler-config.yaml at v0.34.7:
            # Coscheduling at every extension point it implements, and the only queue sort.
            "schedulerName": name,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{"name": "Coscheduling", "args": args}],
        },
    )
    settings: dict = {
        "gangs": "scheduling.x-k8s.io/v1alpha1 PodGroup (the same objects as ours)",
        "plugins": "Coscheduling at multiPoint and the only queueSort (the example config)",
        "permit_waiting_time_seconds": COSCHEDULING_PERMIT_WAITING_SECONDS,
    }
    if tuned:
        settings |= {
            "pod_group_backoff_seconds": COSCHEDULING_TUNED_BACKOFF_SECONDS,
            "podgroups": "minResources (the members' requests summed), scheduleTimeoutSeconds "
            f"{COSCHEDULING_TUNED_SCHEDULE_TIMEOUT_SECONDS}, or "
            f"{COSCHEDULING_TUNED_TIMEOUT_PER_MEMBER:g} s a member for a bigger gang",
        }
    return Contender(
        key="coscheduling_tuned" if tuned else "coscheduling",
        label="Coscheduling (tuned)" if tuned else "Coscheduling",
        scheduler_name=name,
        version="kube-scheduler v1.34.7 + scheduler-plugins Coscheduling v0.34.7",
        argv=(
            str(coscheduling_binary(build=build)),
            f"--config={cos_config}",
            "--secure-port=0",
            "-v=1",
        ),
        gang_api="ours",
        settings={**settings, "qps": limits.qps, "burst": limits.burst},
        min_resources=tuned,
        timeout_by_size=tuned,
    )


def _coscheduling_tuned(
    *, kubeconfig: Path, workdir: Path, limits: ClientLimits, build: bool
) -> Contender:
    return _coscheduling(
        kubeconfig=kubeconfig, workdir=workdir, limits=limits, build=build, tuned=True
    )


BUILDERS = {
    "gang_scheduler": _ours,
    "gang_scheduler_base": _ours_base,
    "kube_scheduler": _kube_scheduler,
    "coscheduling": _coscheduling,
    "coscheduling_tuned": _coscheduling_tuned,
}


def contenders(
    *,
    kubeconfig: Path,
    workdir: Path,
    limits: ClientLimits,
    build: bool = True,
    only: frozenset[str] | None = None,
) -> list[Contender]:
    """Us, then kube-scheduler's gang scheduling, then Coscheduling as scheduler-plugins'
    example and as tuned for contention (or ``only`` those named);
    a peer whose binary is missing raises PeerMissing, never silently left out. With
    ``build`` False, a missing Coscheduling binary is not built (the smoke test fails fast)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return [
        make(kubeconfig=kubeconfig, workdir=workdir, limits=limits, build=build)
        for key, make in BUILDERS.items()
        if (key in only if only is not None else key not in ASKED_FOR)
    ]


# Schedulers a run has only when named (``--only``).
ASKED_FOR = frozenset({"gang_scheduler_base"})


def version_of(binary: Path) -> str:
    """A Kubernetes binary's version, as its ``--version`` says it ("v1.37.2"): the build
    the bench runs, whichever release KUBE_BIN_DIR points at."""
    said = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    found = re.search(r"v\d+\.\d+\.\d+\S*", said)
    return found.group(0) if found else "(version unknown)"


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)
