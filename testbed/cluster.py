"""Starts, checks and stops the local control plane: etcd, kube-apiserver, a
kube-controller-manager that runs Jobs, and KWOK.

The binaries are real, built from Go modules by ``e2e/controlplane/build.sh`` and cached
outside the work tree. Each cluster lives in one folder (``.cluster/`` for ``make demo``,
``.cluster-test/`` for the test suite): certificates, etcd data, ``kubeconfig``,
``bin/kubectl``, ``logs/`` and ``state.json``, which records exactly which processes were
started so that ``down`` stops those and nothing else.

    python -m testbed.cluster up [--dir .cluster]
    python -m testbed.cluster status [--dir .cluster]
    python -m testbed.cluster down [--dir .cluster]
    python -m testbed.cluster scheduler [--dir .cluster]   # gang-scheduler run, stopped by down
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from testbed.pki import Pki, write_pki

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "e2e" / "controlplane" / "build.sh"
CRDS = REPO / "crds"
DEFAULT_DIR = REPO / ".cluster"
# KWOK manages only nodes carrying this annotation; testbed.nodes puts it on every fake node.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# Stages of our own beside KWOK's fast ones: pods that complete after a delay they name.
KWOK_EXTRA_STAGES = Path(__file__).resolve().parent / "kwok-complete-after.yaml"
SERVICE_CIDR = "10.96.0.0/12"


class ClusterError(Exception):
    """The control plane could not be started or stopped; the message says what to do."""


class AlreadyRunning(ClusterError):
    """``up`` was asked for a folder whose control plane is still running."""

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(
            f"a control plane is already running from {plane.directory} ({plane.server}); "
            f"use it (KUBECONFIG={plane.kubeconfig}) or stop it first with "
            f"`python -m testbed.cluster down --dir {plane.directory}` (make cluster-down)"
        )
        self.plane = plane


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_controller_manager: Path
    etcd: Path
    kubectl: Path
    kwok: Path
    kwok_stages: Path
    kube_scheduler: Path | None = None  # the oracle of e2e/test_oracle.py


@dataclass(frozen=True)
class Process:
    """A process the control plane started: its name, pid and executable."""

    name: str
    pid: int
    exe: str

    def alive(self) -> bool:
        """True while the pid still runs our executable (not a zombie, not a reused pid)."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            exe = os.readlink(f"/proc/{self.pid}/exe")
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            return False
        return state != "Z" and exe.removesuffix(" (deleted)") == self.exe


@dataclass(frozen=True)
class ControlPlane:
    """A running (or once running) control plane, as recorded in its ``state.json``."""

    directory: Path
    server: str
    processes: tuple[Process, ...]

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def kubectl(self) -> Path:
        return self.directory / "bin" / "kubectl"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def running(self) -> list[Process]:
        return [p for p in self.processes if p.alive()]


# The upstream Workload API: scheduling.k8s.io PodGroups and the pods' spec.schedulingGroup.
# A gang source we read (#13), and what kube-scheduler's own gang scheduling, a peer in make
# bench, needs on the API server: v1alpha2 behind GenericWorkload and GangScheduling in 1.36;
# v1beta1 behind GenericWorkload alone in 1.37, which refuses the GangScheduling gate; and
# 1.37's alpha CompositePodGroups at v1alpha3 (their gate needs TopologyAwareWorkloadScheduling,
# which serves the PodGroups' schedulingConstraints) and Jobs' spec.scheduling (WorkloadWithJob:
# the Job controller makes the Job's Workload and PodGroup, and the kube-controller-manager
# needs the gate too) and PodGroups' resourceClaims (DRAWorkloadResourceClaims: the
# ResourceClaim controller makes a group's claims from their templates) and their
# preemptionPolicy (PodGroupPreemptionPolicy).
WORKLOAD_API_FLAGS = (
    "--feature-gates=GenericWorkload=true,GangScheduling=true",
    "--runtime-config=scheduling.k8s.io/v1alpha2=true",
)
WORKLOAD_API_FLAGS_1_37 = (
    "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
    "CompositePodGroup=true,WorkloadWithJob=true,DRAWorkloadResourceClaims=true,"
    "PodGroupPreemptionPolicy=true",
    "--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
)


def release_of(version: str) -> tuple[int, int]:
    """(major, minor) of a ``--version`` line ("Kubernetes v1.37.2"); (0, 0) if unreadable."""
    found = re.search(r"v(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def apiserver_flags(release: tuple[int, int], *, workload_api: bool) -> tuple[str, ...]:
    """What the local API server needs beyond the common flags, by its release. From 1.37 it
    refuses a loopback --advertise-address with the default endpoint reconciler (the
    kubernetes Service's endpoints would point at a loopback address): none is run, as
    nothing here needs that Service."""
    newer = release >= (1, 37)
    flags: tuple[str, ...] = ("--advertise-address=127.0.0.1",)
    if newer:
        flags += ("--endpoint-reconciler-type=none",)
    if workload_api:
        flags += WORKLOAD_API_FLAGS_1_37 if newer else WORKLOAD_API_FLAGS
    return flags


def controller_manager_flags(release: tuple[int, int], *, workload_api: bool) -> tuple[str, ...]:
    """What the local kube-controller-manager needs beyond the common flags: from 1.37, the
    gates under which its Job controller makes a Workload and a PodGroup for a Job that asks
    for gang scheduling (spec.scheduling), and its ResourceClaim controller makes a
    PodGroup's claims from their templates."""
    if workload_api and release >= (1, 37):
        return (
            "--feature-gates=GenericWorkload=true,WorkloadWithJob=true,"
            "DRAWorkloadResourceClaims=true",
        )
    return ()


def scheduler_gates(release: tuple[int, int]) -> str:
    """kube-scheduler's feature gates for its own gang scheduling, by its release."""
    return (
        "GenericWorkload=true" if release >= (1, 37) else "GenericWorkload=true,GangScheduling=true"
    )


def binary_release(binary: Path) -> tuple[int, int]:
    """The release of a Kubernetes binary, from its ``--version``."""
    try:
        said = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    return release_of(said)


# Set by e2e/run-tests.sh (make test) to the folder where its background builds say how they
# ended (e2e/awaiting_builds.py): while it is set, the tests find binaries and never build.
BACKGROUND_BUILDS = "GANG_SCHEDULER_BUILDS"


def resolve_binaries(*, bin_dir: Path | None = None) -> Binaries:
    """Build (or find in the cache) the binaries; the entries of ``bin_dir`` (else of
    ``KUBE_BIN_DIR``) win per binary. Under make test, whose background build builds them
    (``BACKGROUND_BUILDS``), they are only looked for: a second build beside it would
    compete with it, within a test's time."""
    if shutil.which("bash") is None:
        raise ClusterError("bash is needed to run e2e/controlplane/build.sh; install bash")
    background = bool(os.environ.get(BACKGROUND_BUILDS))
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *(["--path"] if background else [])],
        stdout=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise ClusterError(
            "make test's background build of the control plane did not build it (its log is "
            "shown at the end of the run)"
            if background
            else "building the control plane binaries failed (the reason is printed above); "
            "see e2e/controlplane/build.sh"
        )
    built = Path(result.stdout.strip().splitlines()[-1])
    override = bin_dir or os.environ.get("KUBE_BIN_DIR")

    def pick(name: str) -> Path:
        if override and (Path(override) / name).is_file():
            return (Path(override) / name).resolve()
        return built / name

    return Binaries(
        kube_apiserver=pick("kube-apiserver"),
        kube_controller_manager=pick("kube-controller-manager"),
        etcd=pick("etcd"),
        kubectl=pick("kubectl"),
        kwok=pick("kwok"),
        kwok_stages=built / "kwok-stages.yaml",
        kube_scheduler=pick("kube-scheduler"),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unverified_tls() -> ssl.SSLContext:
    """TLS for a component's own secure port on loopback: it serves a certificate it made for
    itself at start, so there is nothing to verify it against."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def read_state(directory: Path) -> ControlPlane | None:
    try:
        raw = json.loads((directory / "state.json").read_text())
    except FileNotFoundError:
        return None
    return ControlPlane(
        directory=directory,
        server=raw["server"],
        processes=tuple(Process(**p) for p in raw["processes"]),
    )


def _write_state(plane: ControlPlane) -> None:
    tmp = plane.directory / "state.json.tmp"
    tmp.write_text(
        json.dumps(
            {"server": plane.server, "processes": [asdict(p) for p in plane.processes]},
            indent=2,
        )
    )
    tmp.replace(plane.directory / "state.json")


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _wait_until(
    check: Callable[[], bool], *, what: str, timeout: float, process: Process, log: Path
) -> None:
    """Poll ``check`` until it is true; fail early with the log if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise ClusterError(
                f"{process.name} exited while {what}; its log ends:\n{_log_tail(log)}"
            )
        if check():
            return
        time.sleep(0.25)
    raise ClusterError(
        f"timed out after {timeout:.0f}s {what}; {process.name}'s log ends:\n{_log_tail(log)}"
    )


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def _start(name: str, exe: Path, args: Sequence[str], logs: Path) -> Process:
    if not exe.is_file():
        raise ClusterError(f"{name} binary {exe} is missing; rerun e2e/controlplane/build.sh")
    with (logs / f"{name}.log").open("ab") as log:
        child = subprocess.Popen(
            [str(exe), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: Ctrl-C in the shell that ran `make cluster-up` leaves it be.
            start_new_session=True,
        )
    return Process(name=name, pid=child.pid, exe=str(exe.resolve()))


def write_kubeconfig(path: Path, *, server: str, pki: Pki) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gang-scheduler-local",
                "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki.admin_cert),
                    "client-key": str(pki.admin_key),
                },
            }
        ],
        "contexts": [
            {
                "name": "gang-scheduler-local",
                "context": {"cluster": "gang-scheduler-local", "user": "admin"},
            }
        ],
        "current-context": "gang-scheduler-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def kubectl(plane: ControlPlane, *args: str, timeout: float = 60) -> str:
    """Run our kubectl against ``plane``; raise with its stderr if it fails."""
    result = subprocess.run(
        [str(plane.kubectl), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def install_crds(plane: ControlPlane, crds: Path = CRDS) -> None:
    """Apply ``crds/`` and wait until the API server serves them."""
    kubectl(plane, "apply", "-f", str(crds))
    kubectl(
        plane, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90
    )
    # Established comes a moment before the storage serves lists ("storage is initializing").
    deadline = time.monotonic() + 30
    while True:
        try:
            # In full: plain "podgroups" is the built-in scheduling.k8s.io kind, served at once.
            kubectl(plane, "get", "podgroups.scheduling.x-k8s.io", "--all-namespaces")
            return
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _client_flags(client: tuple[float, int] | None) -> tuple[str, ...]:
    """A Kubernetes component's client QPS and burst as its flags (None: none, its defaults)."""
    if client is None:
        return ()
    qps, burst = client
    return (f"--kube-api-qps={qps:g}", f"--kube-api-burst={burst}")


def up(
    directory: Path = DEFAULT_DIR,
    *,
    timeout: float = 120.0,
    audit_policy: str | None = None,
    bin_dir: Path | None = None,
    workload_api: bool = True,
    controller_client: tuple[float, int] | None = None,
) -> ControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager (Jobs only) and KWOK in
    ``directory``, install the CRDs. With ``audit_policy`` (an audit Policy as YAML) the API
    server writes its audit log to ``logs/audit.log`` (make bench counts each scheduler's
    requests from it). ``bin_dir``: binaries that replace the built ones (an older API
    server, say; ``resolve_binaries``); ``workload_api`` False leaves out the v1.36 feature
    gates and API group of the upstream Workload API, which an older API server refuses.
    ``controller_client``: the controller-manager's client QPS and burst (None: its own
    defaults, 20 and 30); make bench's backlog with volumes waits on its PV controller,
    which at 20 QPS would bind a few claims a second whatever the scheduler.

    Raises AlreadyRunning if that folder's control plane still runs. A folder left by a
    control plane that died is cleaned first. On any failure, whatever was started is stopped.
    """
    directory = directory.resolve()
    existing = read_state(directory)
    if existing is not None:
        if existing.running():
            raise AlreadyRunning(existing)
        down(directory)

    binaries = resolve_binaries(bin_dir=bin_dir)
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (directory / "bin").mkdir(exist_ok=True)
    kubectl_link = directory / "bin" / "kubectl"
    kubectl_link.unlink(missing_ok=True)
    kubectl_link.symlink_to(binaries.kubectl)

    pki = write_pki(directory / "pki")
    etcd_port, peer_port, api_port, kwok_port, kcm_port = (free_port() for _ in range(5))
    server = f"https://127.0.0.1:{api_port}"
    plane = ControlPlane(directory=directory, server=server, processes=())
    write_kubeconfig(plane.kubeconfig, server=server, pki=pki)

    def started(process: Process) -> None:
        nonlocal plane
        plane = ControlPlane(
            directory=directory, server=server, processes=(*plane.processes, process)
        )
        _write_state(plane)

    try:
        etcd = _start(
            "etcd",
            binaries.etcd,
            [
                "--name=default",
                f"--data-dir={directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                # A throwaway cluster: durability is not worth an fsync per write.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            logs,
        )
        started(etcd)
        _wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"),
            what="waiting for etcd to be healthy",
            timeout=30,
            process=etcd,
            log=logs / "etcd.log",
        )

        apiserver = _start(
            "kube-apiserver",
            binaries.kube_apiserver,
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={directory / 'pki'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # No controller-manager runs here. Without it, ServiceAccount admission would
                # reject every pod (no "default" ServiceAccount is ever created), and the
                # not-ready taint TaintNodesByCondition puts on new nodes would never be lifted.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--allow-privileged=true",
                "--profiling=false",
                *apiserver_flags(
                    binary_release(binaries.kube_apiserver), workload_api=workload_api
                ),
                *_audit_flags(directory, audit_policy),
            ],
            logs,
        )
        started(apiserver)
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        _wait_until(
            lambda: _http_ok(f"{server}/readyz", context),
            what=f"waiting for kube-apiserver {server}/readyz",
            timeout=timeout,
            process=apiserver,
            log=logs / "kube-apiserver.log",
        )

        # The Job controller and the garbage collector: Jobs make pods (seed 004's groups
        # are Jobs), and pods owned by a deleted Job go; the disruption controller keeps
        # PodDisruptionBudgets' status; the StatefulSet controller makes LeaderWorkerSets'
        # pods (e2e/test_clients.py); the ResourceClaim controller makes claims from
        # ResourceClaimTemplates and clears reservations (and allocations) of pods that are
        # gone (dynamic resource allocation, e2e/test_dra.py); the PV controller binds claims
        # to volumes, those the scheduler chose or had made (e2e/test_gang_volumes.py), and
        # the ephemeral volume controller makes the claims of pods' generic ephemeral
        # volumes. The node-lifecycle controller stays off: KWOK's fast stages send no
        # heartbeats, it would mark every node NotReady.
        kcm = _start(
            "kube-controller-manager",
            binaries.kube_controller_manager,
            [
                f"--kubeconfig={plane.kubeconfig}",
                f"--authentication-kubeconfig={plane.kubeconfig}",
                f"--authorization-kubeconfig={plane.kubeconfig}",
                "--controllers=job,garbagecollector,disruption,statefulset,"
                "resourceclaim-controller,persistentvolume-binder-controller,"
                "ephemeral-volume-controller",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={directory / 'pki' / 'kube-controller-manager'}",
                *_client_flags(controller_client),
                *controller_manager_flags(
                    binary_release(binaries.kube_controller_manager), workload_api=workload_api
                ),
            ],
            logs,
        )
        started(kcm)
        _wait_until(
            lambda: _http_ok(f"https://127.0.0.1:{kcm_port}/healthz", unverified_tls()),
            what="waiting for kube-controller-manager to be healthy",
            timeout=60,
            process=kcm,
            log=logs / "kube-controller-manager.log",
        )

        kwok = _start(
            "kwok",
            binaries.kwok,
            [
                f"--kubeconfig={plane.kubeconfig}",
                f"--config={binaries.kwok_stages}",
                f"--config={KWOK_EXTRA_STAGES}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=" + "=".join(KWOK_NODE_ANNOTATION),
                f"--server-address=127.0.0.1:{kwok_port}",
                "--node-ip=10.0.0.1",
            ],
            logs,
        )
        started(kwok)
        _wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{kwok_port}/healthz"),
            what="waiting for kwok to be healthy",
            timeout=30,
            process=kwok,
            log=logs / "kwok.log",
        )
        install_crds(plane)
    except BaseException:
        down(directory)
        raise
    return plane


def _audit_flags(directory: Path, policy: str | None) -> list[str]:
    """The API server's audit log, in ``logs/audit.log``, if a policy is given: written as
    each request completes (the default blocking mode), not rotated in any run's size."""
    if policy is None:
        return []
    path = directory / "audit-policy.yaml"
    path.write_text(policy)
    return [
        f"--audit-policy-file={path}",
        f"--audit-log-path={directory / 'logs' / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=1000000",  # MB: lumberjack reads 0 as its default, 100
    ]


def start_scheduler(directory: Path = DEFAULT_DIR, *extra: str) -> Process:
    """Run ``gang-scheduler run`` against this control plane, detached, and record it in
    ``state.json`` so that ``down`` stops it with the rest."""
    directory = directory.resolve()
    plane = read_state(directory)
    if plane is None or not plane.running():
        raise ClusterError(f"no control plane is running from {directory}; make cluster-up first")
    for process in plane.running():
        if process.name == "gang-scheduler":
            raise AlreadyRunning(plane)
    log = plane.logs / "scheduler.log"
    with log.open("ab") as out:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--kubeconfig",
                str(plane.kubeconfig),
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )
    process = Process(name="gang-scheduler", pid=child.pid, exe=os.path.realpath(sys.executable))
    _write_state(
        ControlPlane(
            directory=directory, server=plane.server, processes=(*plane.processes, process)
        )
    )
    return process


def _stop(process: Process, *, grace: float) -> None:
    if not process.alive():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while process.alive() and time.monotonic() < deadline:
        _reap(process.pid)
        time.sleep(0.1)
    if process.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        while process.alive():
            _reap(process.pid)
            time.sleep(0.05)
    _reap(process.pid)


def restart(
    directory: Path,
    name: str,
    *,
    sig: int = signal.SIGKILL,
    down_seconds: float = 0.0,
    timeout: float = 60.0,
) -> Process:
    """Kill one process of the control plane (SIGKILL by default: a crash, not a shutdown),
    wait ``down_seconds``, start it again with the very same command line, and wait until
    it is healthy again if it has a health endpoint we know. For fault tests."""
    directory = directory.resolve()
    plane = read_state(directory)
    if plane is None:
        raise ClusterError(f"no control plane recorded in {directory}")
    old = next((p for p in plane.processes if p.name == name and p.alive()), None)
    if old is None:
        raise ClusterError(f"{name} is not running in {directory}")
    argv = Path(f"/proc/{old.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    args = [a.decode() for a in argv[1:]]
    with contextlib.suppress(ProcessLookupError):
        os.kill(old.pid, sig)
    deadline = time.monotonic() + 30
    while old.alive() and time.monotonic() < deadline:
        _reap(old.pid)
        time.sleep(0.05)
    _reap(old.pid)
    if old.alive():
        raise ClusterError(f"{name} (pid {old.pid}) did not die of signal {sig}")
    time.sleep(down_seconds)
    new = _start(name, Path(old.exe), args, plane.logs)
    # The dead process's port may be held a moment longer: start again until it binds.
    for _ in range(40):
        time.sleep(0.25)
        if new.alive():
            break
        _reap(new.pid)
        if "address already in use" not in _log_tail(plane.logs / f"{name}.log", lines=3):
            break
        new = _start(name, Path(old.exe), args, plane.logs)
    _write_state(
        ControlPlane(
            directory=directory,
            server=plane.server,
            processes=tuple(new if p is old else p for p in plane.processes),
        )
    )
    if name == "kube-apiserver":
        pki = directory / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        _wait_until(
            lambda: _http_ok(f"{plane.server}/readyz", context),
            what=f"waiting for the restarted kube-apiserver {plane.server}/readyz",
            timeout=timeout,
            process=new,
            log=plane.logs / "kube-apiserver.log",
        )
    elif name == "etcd":
        url = next(a for a in args if a.startswith("--listen-client-urls="))
        health = url.split("=", 1)[1].split(",")[0] + "/health"
        _wait_until(
            lambda: _http_ok(health),
            what="waiting for the restarted etcd to be healthy",
            timeout=timeout,
            process=new,
            log=plane.logs / "etcd.log",
        )
    return new


def compact_etcd(directory: Path) -> int:
    """Compact etcd's history up to now, as the API server does every 5 minutes: a watch
    resumed from an older resourceVersion then gets 410 Gone and must re-list. Returns the
    revision compacted to."""
    plane = read_state(directory.resolve())
    if plane is None:
        raise ClusterError(f"no control plane recorded in {directory}")
    etcd = next((p for p in plane.processes if p.name == "etcd" and p.alive()), None)
    if etcd is None:
        raise ClusterError(f"etcd is not running in {directory}")
    argv = Path(f"/proc/{etcd.pid}/cmdline").read_bytes().split(b"\0")
    url = next(a.decode() for a in argv if a.startswith(b"--listen-client-urls="))
    base = url.split("=", 1)[1].split(",")[0]

    def call(path: str, body: dict) -> dict:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    # The current revision, from any range request's header ("AA==" is the key "\0").
    revision = int(call("/v3/kv/range", {"key": "AA==", "count_only": True})["header"]["revision"])
    call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our own child (the test fixture's case)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def down(directory: Path = DEFAULT_DIR, *, grace: float = 15.0) -> list[str]:
    """Stop the processes ``directory``'s state names, newest first; remove all but logs.

    Returns the names of the processes that were still running.
    """
    directory = directory.resolve()
    plane = read_state(directory)
    stopped: list[str] = []
    if plane is not None:
        for process in reversed(plane.processes):
            if process.alive():
                stopped.append(process.name)
                _stop(process, grace=grace)
    if directory.is_dir():
        for entry in directory.iterdir():
            if entry.name == "logs":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return stopped


def _print_usage(plane: ControlPlane) -> None:
    try:
        shown = plane.directory.relative_to(Path.cwd())
    except ValueError:
        shown = plane.directory
    print(
        f"control plane up at {plane.server} (logs in {shown}/logs)\n"
        f"use it with:\n"
        f"  export KUBECONFIG=$PWD/{shown}/kubeconfig PATH=$PWD/{shown}/bin:$PATH\n"
        f"  kubectl get nodes,podgroups.scheduling.x-k8s.io   # or pg\n"
        f"stop it with: make cluster-down"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["up", "down", "status", "scheduler"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the cluster's folder")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for kube-apiserver /readyz"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            plane = up(args.dir, timeout=args.timeout)
            _print_usage(plane)
        elif args.command == "scheduler":
            process = start_scheduler(args.dir)
            print(
                f"gang-scheduler running (pid {process.pid}), log in {args.dir}/logs/scheduler.log"
            )
        elif args.command == "down":
            stopped = down(args.dir)
            print(f"stopped {', '.join(stopped)}" if stopped else "no control plane was running")
        else:
            plane = read_state(args.dir.resolve())
            if plane is None or not plane.running():
                print(f"no control plane is running from {args.dir}")
                return 1
            names = ", ".join(f"{p.name} (pid {p.pid})" for p in plane.running())
            print(f"running at {plane.server}: {names}")
    except AlreadyRunning as already:
        print(already)
        return 0
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
