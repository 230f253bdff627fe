"""``bench.run --pprof``: a kube-scheduler peer is started serving pprof on a port of its own;
ours is started as it is (its event loop is measured by measure_lag, its CPU by py-spy)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from pathlib import Path

from bench.pprof import Profiling
from bench.schedulers import Contender
from testbed.cluster import free_port


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


def test_a_peer_not_serving_leaves_no_profile_and_fails_nothing(tmp_path: Path) -> None:
    """Refused (the peer is gone or not yet up): the run it was to explain goes on, and the
    log says what was not taken."""

    async def run() -> Profiling:
        profiling = Profiling(port=free_port(), folder=tmp_path, prefix="peer", every=1).start()
        await asyncio.sleep(1.5)  # its first CPU profile is asked for after 1 s
        await profiling.stop()
        return profiling

    profiling = asyncio.run(run())
    assert profiling.taken == []
    assert list(tmp_path.iterdir()) == []
    asked = [failure.split(":", 1)[0].split("?")[0] for failure in profiling.failures]
    # One CPU profile asked for in 1.5 s: a refusal is not asked again at once.
    assert asked == ["/debug/pprof/profile", "/debug/pprof/goroutine", "/metrics"]


def test_a_peer_hanging_up_mid_handshake_leaves_no_profile_and_fails_nothing(
    tmp_path: Path,
) -> None:
    """A port that accepts and closes at once (a peer dying as it is asked): no TLS, no
    answer; nothing is written and stop() returns."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def hang_up() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                client.close()

    threading.Thread(target=hang_up, daemon=True).start()
    try:

        async def run() -> Profiling:
            profiling = Profiling(port=port, folder=tmp_path, prefix="peer").start()
            await profiling.stop()
            return profiling

        profiling = asyncio.run(run())
    finally:
        listener.close()
    assert profiling.taken == []
    assert len(profiling.failures) == 2  # goroutines and metrics; no CPU profile asked yet
