"""The API server's audit log, read by ``make bench``: which requests each scheduler made,
by verb and resource, and when its last write of a workload landed.

The API server's metrics count requests but not who made them; its audit log (level
Metadata, written by the bench's control plane:
``testbed.cluster.up(audit_policy=POLICY)``) names each request's user agent. Every client
of the bench's control plane but the scheduler under test is known (the bench itself, KWOK,
kube-controller-manager, the API server's own loopback), and only one scheduler runs at a
time: what is left is that scheduler's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scheduler.shell.api import USER_AGENT

BENCH_USER_AGENT = f"gang-scheduler-bench/{USER_AGENT.split('/')[1]}"
# The clients of the control plane that are not the scheduler under test (client-go names
# its user agent after the binary: "kube-controller-manager/v1.36.3 (linux/amd64) ...").
INFRASTRUCTURE = frozenset(
    {"gang-scheduler-bench", "kwok", "kube-controller-manager", "kube-apiserver"}
)
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})

# Level Metadata for every request, once it completed (a watch: when it ended); leases
# (KWOK's node heartbeats, leader election) and health checks are left out.
POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: None
    resources: [{group: coordination.k8s.io, resources: [leases]}]
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/metrics", "/version"]
  - level: Metadata
"""


@dataclass(frozen=True)
class Request:
    """One audited request: when the API server received it (seconds since the epoch), by
    whom (the user agent's product: ``kube-scheduler``), and what (``patch pods/status``)."""

    received: float
    agent: str
    verb: str
    what: str

    @property
    def write(self) -> bool:
        return self.verb in WRITES


def parse_stamp(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# The fields read, found in each line's JSON without decoding it: the bench reads the log
# while a scheduler is timed, and every client's requests are in it (KWOK's most of all).
_AGENT = re.compile(rb'"userAgent":"([^"/]*)')
_VERB = re.compile(rb'"verb":"([a-z]+)"')
_STAMP = re.compile(rb'"requestReceivedTimestamp":"([^"]+)"')
_REF = re.compile(rb'"objectRef":\{([^}]*)\}')
_RESOURCE = re.compile(rb'"resource":"([^"]+)"')
_SUBRESOURCE = re.compile(rb'"subresource":"([^"]+)"')
_SKIPPED = tuple(f'"userAgent":"{a}/'.encode() for a in INFRASTRUCTURE)


def parse(line: bytes) -> Request | None:
    """One audit log line; None for one that is not a request for a resource (or not whole:
    a line the API server was still writing)."""
    agent, verb, stamp = _AGENT.search(line), _VERB.search(line), _STAMP.search(line)
    ref = _REF.search(line)
    resource = _RESOURCE.search(ref[1]) if ref else None
    if not (agent and verb and stamp and resource) or not line.rstrip().endswith(b"}"):
        return None
    sub = _SUBRESOURCE.search(ref[1])
    what = resource[1] + (b"/" + sub[1] if sub else b"")
    return Request(
        received=parse_stamp(stamp[1].decode()),
        agent=agent[1].decode(),
        verb=verb[1].decode(),
        what=what.decode(),
    )


class AuditLog:
    """The audit log file, read as it grows: ``read()`` returns the requests of the
    scheduler under test (every client but the known ones) logged since the last call; a
    line still being written waits for the next call, and the others' lines are skipped
    before they are parsed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = path.stat().st_size if path.exists() else 0
        self._rest = b""

    def read(self) -> list[Request]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        found = (parse(x) for x in lines if x and not any(a in x for a in _SKIPPED))
        return [r for r in found if r is not None]


def by_verb_and_resource(requests: list[Request], *, since: float, until: float) -> dict:
    """How many of ``requests`` the API server received in [since, until], by verb and
    resource (``create pods/binding``), most first; and the user agents that made them."""
    counts: dict[str, int] = {}
    agents: set[str] = set()
    for r in requests:
        if since <= r.received <= until:
            key = f"{r.verb} {r.what}"
            counts[key] = counts.get(key, 0) + 1
            agents.add(r.agent)
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "total": sum(counts.values()),
        "by_verb_and_resource": ordered,
        "agents": sorted(agents),
    }
