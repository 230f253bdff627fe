"""``bench.run --pprof``: a kube-scheduler peer is started serving pprof on a port of its own;
ours is started as it is (its event loop is measured by measure_lag, its CPU by py-spy)."""

from __future__ import annotations

from bench.schedulers import Contender


def contender(*argv: str) -> Contender:
    return Contender(
        key="peer", label="peer", scheduler_name="peer", version="v0", argv=argv, gang_api="ours"
    )


def test_a_kube_scheduler_peer_serves_pprof_on_loopback_at_the_port_given() -> None:
    peer = contender("kube-scheduler", "--config=c.yaml", "--secure-port=0", "-v=1")
    profiled = peer.profiled(10259)
    assert profiled.pprof_port == 10259
    assert "--secure-port=0" not in profiled.argv
    assert profiled.argv[:2] == ("kube-scheduler", "--config=c.yaml")
    assert "-v=1" in profiled.argv
    assert {"--secure-port=10259", "--bind-address=127.0.0.1", "--profiling=true"} <= set(
        profiled.argv
    )
    (allowed,) = [a for a in profiled.argv if a.startswith("--authorization-always-allow-paths=")]
    assert {"/debug/pprof/*", "/metrics", "/healthz"} <= set(allowed.split("=", 1)[1].split(","))
    assert "pprof" in profiled.describe()


def test_ours_is_started_as_it_is() -> None:
    ours = contender("python", "-m", "scheduler", "--metrics-port=9000")
    assert ours.profiled(10259) is ours
