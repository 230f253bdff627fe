"""What one scheduler process does in one workload of ``make bench``, read while it runs:
its CPU seconds and peak RSS over time (from /proc, ten times a second), and from the API
server's audit log its requests and when its last write landed.

The window a scheduler is timed in ends at its last bind, and again at its last write of
the workload: Events, PodGroup status and pod conditions may come after the binds (ours
defer Events and status while binds are in flight), and CPU and requests are compared to the
same end. The last write is known only once the scheduler has been quiet for a while
(``quiescence``): the figures are read at the last write, from the samples, not at the end
of the quiet wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench import audit

# Our metrics the bench reports, by the figure's name.
SCRAPED = {
    "gang_scheduler_pass_duration_seconds_count": "passes",
    "gang_scheduler_pass_duration_seconds_sum": "pass_seconds",
    "gang_scheduler_events_dropped_total": "events_dropped",
}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process so far (fields 14 and 15 of /proc/pid/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Quiet:
    """How a scheduler's writes ended after its last bind: ``last_write`` is its last
    (monotonic seconds; None if it was still writing past the cap), ``until`` where its
    window ends (the last write, or the cap)."""

    last_bind: float
    last_write: float | None
    until: float


@dataclass
class Meter:
    """Started with the scheduler process; ``audit_log`` is None when the control plane
    keeps none (then no requests and no last write are reported)."""

    process: subprocess.Popen[bytes]
    audit_log: Path | None
    # Where the scheduler serves Prometheus metrics (ours), or None (the peers: their
    # secure port is off in the bench).
    metrics_port: int | None = None
    started: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    requests: list[audit.Request] = field(default_factory=list)
    _wall: float = field(default_factory=lambda: time.time() - time.monotonic())
    _log: audit.AuditLog | None = None
    _last_writes: dict[str, float] = field(default_factory=dict)  # by what, epoch seconds
    _task: asyncio.Task | None = None

    def __post_init__(self) -> None:
        if self.audit_log is not None:
            self._log = audit.AuditLog(self.audit_log)

    def start(self) -> Meter:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    async def _sample(self) -> None:
        """CPU and RSS ten times a second; the audit log once a second, a little at a time
        rather than all of it at the end."""
        tick = 0
        while True:
            with contextlib.suppress(OSError, ValueError):
                pid = self.process.pid
                self.samples.append((time.monotonic(), cpu_seconds(pid), peak_rss_mib(pid)))
            if tick % 10 == 0:
                self.scan()
            tick += 1
            await asyncio.sleep(0.1)

    def scan(self) -> None:
        """Take in what the audit log gained (the scheduler's requests only), keeping the
        latest write of each kind as it goes."""
        if self._log is None:
            return
        for request in self._log.read():
            self.requests.append(request)
            if request.write and request.received > self._last_writes.get(request.what, 0.0):
                self._last_writes[request.what] = request.received

    def last(self, *, what: str | None = None) -> float | None:
        """When the scheduler's last write so far (of ``what``, e.g. ``pods/binding``, or
        of any resource) was received, monotonic."""
        self.scan()
        writes = self._last_writes
        found = writes.get(what) if what else max(writes.values(), default=None)
        return None if found is None else found - self._wall

    async def quiescence(self, *, watched_last_bind: float, quiet: float, cap: float) -> Quiet:
        """Wait until the scheduler has written nothing for ``quiet`` seconds after its last
        bind (as the API server received it; as the bench's watch saw it if there is no
        audit log), or until it is seen writing ``cap`` seconds after that bind."""
        last_bind = self.last(what="pods/binding") if self._log is not None else None
        if last_bind is None:
            last_bind = watched_last_bind
        if self._log is None:
            return Quiet(last_bind=last_bind, last_write=None, until=time.monotonic())
        while True:
            last = max(self.last() or last_bind, last_bind)
            if last > last_bind + cap:
                return Quiet(last_bind=last_bind, last_write=None, until=last_bind + cap)
            if time.monotonic() - last >= quiet:
                return Quiet(last_bind=last_bind, last_write=last, until=last)
            await asyncio.sleep(0.2)

    def at(self, moment: float) -> dict:
        """CPU seconds and peak RSS at ``moment``: the first sample taken then or later."""
        for when, cpu, rss in self.samples:
            if when >= moment:
                return {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss, 1)}
        if not self.samples:
            return {}
        _, cpu, rss = self.samples[-1]
        return {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss, 1)}

    def scrape(self) -> dict:
        """From our metrics: passes run, their seconds in all, Events dropped (the
        recorder's backlog was full). Blocking: run it in a thread."""
        if self.metrics_port is None:
            return {}
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except (OSError, http.client.HTTPException, UnicodeDecodeError):
            return {}  # the scheduler gone or cut off mid-answer: no figures, not a failure
        found = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in SCRAPED:
                with contextlib.suppress(ValueError):
                    found[SCRAPED[name]] = round(float(value), 3)
        return found

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def counted(self, *, until: float) -> dict:
        """The scheduler's requests the API server received from its start to ``until``
        (monotonic), by verb and resource. Read once the scheduler has stopped: a watch is
        logged when it ends."""
        self.scan()
        if self._log is None:
            return {}
        return audit.by_verb_and_resource(
            self.requests, since=self.started + self._wall, until=until + self._wall
        )


def usage(process: subprocess.Popen[bytes]) -> dict:
    """What the scheduler used so far; read before it is stopped."""
    if process.poll() is not None:
        raise RuntimeError(f"the scheduler exited with {process.returncode} during the workload")
    return {
        "cpu_seconds": round(cpu_seconds(process.pid), 2),
        "peak_rss_mib": round(peak_rss_mib(process.pid), 1),
    }


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def longest_loop_lag_ms(path: Path, since: int) -> dict:
    """The longest stretch gang-scheduler's event loop was held, as it logs on stopping
    (``event loop lag ... longest_milliseconds``), in the part of its log after ``since``;
    nothing for the peers, whose logs say no such thing."""
    with path.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    found = re.findall(r"longest_milliseconds\W+([0-9.]+)", text)
    cpu = re.findall(r"longest_loop_cpu_milliseconds\W+([0-9.]+)", text)
    stretch = {"longest_event_loop_stretch_ms": float(found[-1])} if found else {}
    process = re.findall(r"longest_process_cpu_milliseconds\W+([0-9.]+)", text)
    if stretch and cpu:  # the loop thread's own CPU in it: the rest waited for GIL or CPU
        stretch["longest_event_loop_stretch_cpu_ms"] = float(cpu[-1])
    if stretch and process:  # the whole process's: beyond the loop's, our other threads
        stretch["longest_event_loop_stretch_process_cpu_ms"] = float(process[-1])
    return stretch
