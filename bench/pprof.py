"""Profiles of a Go peer while it runs a workload (``bench.run --pprof DIR``).

kube-scheduler serves Go's pprof handlers on its secure port, which the bench otherwise turns
off (``--secure-port=0``). With ``--pprof`` a Go peer is started with that port on loopback,
pprof let through without credentials (``--authorization-always-allow-paths``; anonymous
requests are authenticated as system:anonymous, and nothing else is allowed to them), and
``Profiling`` takes a CPU profile of ``seconds`` every ``every`` seconds while it runs, and the
goroutines' stacks and its metrics (``scheduler_pending_pods`` by queue among them) when it
stops. ``go tool pprof -top FILE`` reads the profiles.

This answers a question the timings cannot: where a peer spends its CPU when it binds little
or nothing (kube-scheduler's gang scheduling on the scale tier's backlog binds none of 30,000
pods in 600 s with a core busy)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testbed.cluster import unverified_tls

# The paths served to anyone: pprof's, its metrics, and the health checks kube-scheduler
# allows by default.
ALWAYS_ALLOWED = "/healthz,/readyz,/livez,/metrics,/debug/pprof,/debug/pprof/*"


def pprof_argv(argv: tuple[str, ...], port: int) -> tuple[str, ...]:
    """A kube-scheduler's ``argv`` with its secure port on ``port`` (loopback) and pprof served
    to anyone. Its ``--secure-port=0`` goes; every other argument stays."""
    kept = tuple(a for a in argv if not a.startswith(("--secure-port", "--bind-address")))
    return (
        *kept,
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--authorization-always-allow-paths={ALWAYS_ALLOWED}",
        "--profiling=true",
    )


@dataclass
class Profiling:
    """CPU profiles of the peer at https://127.0.0.1:``port`` into ``folder``, named
    ``prefix``-cpu-<seconds since start>.pb.gz, and its goroutines and metrics at the end."""

    port: int
    folder: Path
    prefix: str
    seconds: int = 30
    every: int = 60
    taken: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)
    _task: asyncio.Task | None = None

    def _get(self, path: str, *, timeout: float) -> bytes:
        url = f"https://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=timeout, context=unverified_tls()) as answer:
            return answer.read()

    async def _save(self, path: str, name: str, *, timeout: float) -> None:
        try:
            body = await asyncio.to_thread(self._get, path, timeout=timeout)
        # Not serving yet, gone, or gone mid-answer (IncompleteRead is no OSError): say so in
        # the run's log; a profile missed never fails the run it was to explain.
        except (OSError, http.client.HTTPException) as error:
            self.failures.append(f"{path}: {error}")
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{self.prefix}-{name}"
        target.write_bytes(body)
        self.taken.append(target)

    async def _profiles(self) -> None:
        await asyncio.sleep(min(self.every, 10))  # its caches are being filled at first
        while True:  # one every ``every`` s from the start of the last, answered or not
            began = time.monotonic()
            at = round(began - self._started)
            await self._save(
                f"/debug/pprof/profile?seconds={self.seconds}",
                f"cpu-{at:04d}s.pb.gz",
                timeout=self.seconds + 30,
            )
            await asyncio.sleep(max(0.0, began + self.every - time.monotonic()))

    def start(self) -> Profiling:
        self._task = asyncio.get_running_loop().create_task(self._profiles())
        return self

    async def stop(self) -> None:
        """The goroutines' stacks (grouped, with counts) and the metrics while the peer still
        runs; then the profile being taken is let go."""
        at = round(time.monotonic() - self._started)
        await self._save("/debug/pprof/goroutine?debug=1", f"goroutines-{at:04d}s.txt", timeout=30)
        await self._save("/metrics", f"metrics-{at:04d}s.txt", timeout=30)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
