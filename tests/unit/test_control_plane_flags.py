"""The local control plane's flags follow the release of its binaries: 1.36 serves the
Workload API at v1alpha2 behind two gates; 1.37 at v1beta1 behind GenericWorkload alone, and
refuses both the GangScheduling gate and a loopback advertise address with the default
endpoint reconciler (docs/design/kubernetes-1.37.md)."""

from __future__ import annotations

from testbed.cluster import (
    apiserver_flags,
    controller_manager_flags,
    release_of,
    scheduler_gates,
)


def test_a_release_is_read_from_a_version_line() -> None:
    assert release_of("Kubernetes v1.37.2") == (1, 37)
    assert release_of("Kubernetes v1.36.3-dirty") == (1, 36)
    assert release_of("no version here") == (0, 0)


def test_kubernetes_1_36_keeps_its_flags() -> None:
    assert apiserver_flags((1, 36), workload_api=True) == (
        "--advertise-address=127.0.0.1",
        "--feature-gates=GenericWorkload=true,GangScheduling=true",
        "--runtime-config=scheduling.k8s.io/v1alpha2=true",
    )
    assert apiserver_flags((1, 36), workload_api=False) == ("--advertise-address=127.0.0.1",)


def test_kubernetes_1_37_serves_v1beta1_without_the_gone_gate_or_an_endpoint_reconciler() -> None:
    flags = apiserver_flags((1, 37), workload_api=True)
    assert "--endpoint-reconciler-type=none" in flags
    gates = next(f for f in flags if f.startswith("--feature-gates="))
    assert set(gates.split("=", 1)[1].split(",")) == {
        "GenericWorkload=true",
        "TopologyAwareWorkloadScheduling=true",  # CompositePodGroup depends on it
        "CompositePodGroup=true",
        "WorkloadWithJob=true",  # Jobs' spec.scheduling
        "DRAWorkloadResourceClaims=true",  # PodGroups' resourceClaims
        "PodGroupPreemptionPolicy=true",
    }
    assert (
        "--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true" in flags
    )
    assert not any("GangScheduling" in flag or "v1alpha2" in flag for flag in flags)


def test_kube_schedulers_gates_follow_its_release() -> None:
    assert scheduler_gates((1, 36)) == "GenericWorkload=true,GangScheduling=true"
    assert scheduler_gates((1, 37)) == "GenericWorkload=true"


def test_the_controller_manager_makes_jobs_workloads_from_1_37_only() -> None:
    assert controller_manager_flags((1, 37), workload_api=True) == (
        "--feature-gates=GenericWorkload=true,WorkloadWithJob=true,DRAWorkloadResourceClaims=true",
    )
    assert controller_manager_flags((1, 36), workload_api=True) == ()
    assert controller_manager_flags((1, 37), workload_api=False) == ()
