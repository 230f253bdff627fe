"""The chart's Grafana dashboard and alerts against running schedulers: two replicas with
leader election schedule a gang, their /metrics are scraped, and every metric the dashboard
or the alerts name must be exported by the leader. The signals the alerts stand on hold too:
every replica exports gang_scheduler_pending_gangs (GangSchedulerDown), and only the leader
a gang_scheduler_queue_gangs series (GangSchedulerNoLeader, the dashboard's "Leader").

What "exported" means: the series name the PromQL reads belongs to a family the scrape
declares (its # TYPE line) as the type the name implies (a counter as ..._total, a histogram
as ..._bucket/_sum/_count, a gauge by its name); and when that family has samples, the name
is among them. A labelled family no event has touched yet (preemption victims by priority,
say) is declared with no samples at all, and that counts: its series appear with the first
event, under the name checked here. tests/unit/test_dashboard.py holds the same names
against the registry."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.monitoring import all_queries
from scheduler.model import names
from testbed import cluster as local_cluster

pytestmark = pytest.mark.cluster
LEASE_SECONDS = 4
SERIES_SUFFIX_KIND = {"_total": "counter", "_bucket": "histogram", "_sum": "histogram",
                      "_count": "histogram"}  # fmt: skip


class Scrape:
    """One /metrics page: its families by name, their types and their samples' names."""

    def __init__(self, text: str) -> None:
        self.kinds: dict[str, str] = {}
        self.samples: dict[str, set[str]] = {}
        self.values: dict[str, float] = {}  # an unlabelled series' value
        for family in text_string_to_metric_families(text):
            # The text parser names a counter's family without _total, as the registry does.
            self.kinds[family.name] = family.type
            self.samples[family.name] = {sample.name for sample in family.samples}
            for sample in family.samples:
                if not sample.labels:
                    self.values[sample.name] = sample.value

    def family_of(self, series: str) -> str | None:
        """The declared family a series name belongs to, if the type fits the name."""
        for suffix, kind in SERIES_SUFFIX_KIND.items():
            stem = series.removesuffix(suffix)
            if stem != series and self.kinds.get(stem) == kind:
                return stem
        return series if self.kinds.get(series) == "gauge" else None

    def exported(self, series: str) -> bool:
        family = self.family_of(series)
        if family is None:
            return False
        return not self.samples[family] or series in self.samples[family]

    def has_samples(self, family: str) -> bool:
        return bool(self.samples.get(family))

    def value(self, series: str) -> float | None:
        return self.values.get(series)


def _scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return Scrape(response.read().decode())


def test_the_leader_exports_every_metric_the_dashboard_and_the_alerts_name(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(1, gpu=8)
    flags = ("--leader-elect", "--leader-elect-namespace", cluster.namespace,
             "--lease-duration", str(LEASE_SECONDS))  # fmt: skip
    ports: dict[int, int] = {}
    replicas: list[SchedulerProcess] = []
    for _ in range(2):
        port = local_cluster.free_port()
        replica = private_scheduler.start(*flags, "--metrics-port", str(port))
        assert replica.process is not None
        ports[replica.process.pid] = port
        replicas.append(replica)
    holder = wait_for(
        lambda: cluster.lease_holder(private_scheduler.name), timeout=30, what="a leader"
    )
    pid = int(str(holder).rsplit("_", 1)[1])
    leader_port = ports[pid]
    (standby_port,) = [port for other, port in ports.items() if other != pid]

    gang = {names.KOORD_NAME: "dash", names.KOORD_MIN_AVAILABLE: "2"}
    members = cluster.gang(
        "dash", 2, scheduler=private_scheduler.name, annotations=gang,
        requests={"nvidia.com/gpu": "2"},
    )  # fmt: skip
    wait_for(lambda: members <= cluster.bound(), timeout=30, what="the gang bound")

    # The leader's Queue gauges come every 2 s, the gang's latency once its last bind lands.
    def settled() -> Scrape | None:
        scrape = _scrape(leader_port)
        ready = scrape.has_samples("gang_scheduler_queue_gangs") and scrape.has_samples(
            "gang_scheduler_gang_attempts"
        )
        return scrape if ready else None

    leader = wait_for(settled, timeout=20, what="the leader's queue gauges and gang attempts")
    assert isinstance(leader, Scrape)
    queries = all_queries()
    missing = [
        f"{query.where}: {name}"
        for query in queries
        for name in sorted(query.names)
        if not leader.exported(name)
    ]
    assert missing == [], "not exported by the running scheduler:\n" + "\n".join(missing)
    read = {name for query in queries for name in query.names}
    assert len(read) >= 20
    # What only an event would bring is declared; what the alerts count on is there.
    for family in ("gang_scheduler_pending_gangs", "gang_scheduler_queue_depth",
                   "gang_scheduler_api_unreachable_seconds", "gang_scheduler_pass_duration_seconds",
                   "gang_scheduler_event_loop_lag_seconds", "gang_scheduler_bind_duration_seconds",
                   "gang_scheduler_gang_complete_to_bound_seconds",
                   "gang_scheduler_stale_gang_victims"):  # fmt: skip
        assert leader.has_samples(family), family

    # The standby: up (GangSchedulerDown counts it), not leader, so that
    # GangSchedulerNoLeader and the "Leader" panel count one leader, not two.
    standby = _scrape(standby_port)
    assert standby.has_samples("gang_scheduler_pending_gangs")
    assert leader.value("gang_scheduler_leader") == 1.0
    assert standby.value("gang_scheduler_leader") == 0.0
    for replica in replicas:
        replica.assert_alive()
    # The standby first: stopped first, the leader would hand it the Lease to take up.
    for replica in sorted(replicas, key=lambda r: r.process is not None and r.process.pid == pid):
        replica.stop()
