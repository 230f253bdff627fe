"""Prometheus metrics, on a registry of the process's own (no global state).

Names follow the Prometheus conventions with the ``gang_scheduler_`` prefix: counters end
in ``_total``, durations are histograms in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


# Buckets of the histograms of stalls: how long the event loop could not run.
STALL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry
    pending_gangs: Gauge
    queue_depth: Gauge
    attempts: Counter
    gang_bound_seconds: Histogram
    bind_seconds: Histogram
    volume_binding_seconds: Histogram
    bind_errors: Counter
    claim_writes: Counter
    claim_conflicts: Counter
    pass_seconds: Histogram
    forecast_seconds: Histogram
    events_dropped: Counter
    loop_lag_seconds: Histogram
    loop_lag_max_seconds: Gauge
    gc_pause_seconds: Histogram
    background_errors: Counter
    action_errors: Counter
    preemption_victims: Counter
    reclaim_victims: Counter
    victims_above_fewest: Histogram
    stale_gang_victims: Counter
    consolidation_moves: Counter
    preemption_bound_seconds: Histogram
    api_unreachable_seconds: Gauge
    leader: Gauge
    stranded: Gauge
    placeable_members: Gauge
    whole_gpu_nodes: Gauge
    stranded_by_topology: Gauge
    queue_allocated: Gauge
    queue_fair_share: Gauge
    queue_deserved: Gauge
    queue_gangs: Gauge

    @classmethod
    def create(cls) -> Metrics:
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            pending_gangs=Gauge(
                "gang_scheduler_pending_gangs",
                "Gangs with members still to place: not satisfied, not timed out, not finished.",
                registry=registry,
            ),
            queue_depth=Gauge(
                "gang_scheduler_queue_depth",
                "Pods of this scheduler that are not bound yet.",
                registry=registry,
            ),
            attempts=Counter(
                "gang_scheduler_gang_attempts_total",
                "Attempts to place a gang, by result (scheduled or unschedulable).",
                ["result"],
                registry=registry,
            ),
            gang_bound_seconds=Histogram(
                "gang_scheduler_gang_complete_to_bound_seconds",
                "From a gang's first attempt (all its members present) to its last bind.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            bind_seconds=Histogram(
                "gang_scheduler_bind_duration_seconds",
                "Duration of one pods/binding request.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            volume_binding_seconds=Histogram(
                "gang_scheduler_volume_binding_duration_seconds",
                "From a group's first volume write to every one of its claims bound (or the "
                "wait given up), by outcome: the wait for volumes to be bound or made before "
                "its pods are bound.",
                ["outcome"],
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            bind_errors=Counter(
                "gang_scheduler_bind_errors_total",
                "Binding requests the API server rejected or that failed.",
                registry=registry,
            ),
            claim_writes=Counter(
                "gang_scheduler_claim_allocations_total",
                "ResourceClaims allocated or reserved before a bind (dynamic resource allocation).",
                registry=registry,
            ),
            claim_conflicts=Counter(
                "gang_scheduler_claim_conflicts_total",
                "ResourceClaim writes that found the claim changed since the pass planned "
                "it (allocated elsewhere, a conflict on its resourceVersion).",
                registry=registry,
            ),
            pass_seconds=Histogram(
                "gang_scheduler_pass_duration_seconds",
                "Duration of one scheduling pass (snapshot to decisions).",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            forecast_seconds=Histogram(
                "gang_scheduler_forecast_duration_seconds",
                "Duration of one forward play (--forecast-interval): each waiting gang's "
                "expected start.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            events_dropped=Counter(
                "gang_scheduler_events_dropped_total",
                "Events not posted because the backlog was full.",
                registry=registry,
            ),
            loop_lag_seconds=Histogram(
                "gang_scheduler_event_loop_lag_seconds",
                "How late the event loop woke a 20 ms timer: time nothing else could run "
                "(watch events, binds, the Lease renewal).",
                buckets=STALL_BUCKETS,
                registry=registry,
            ),
            loop_lag_max_seconds=Gauge(
                "gang_scheduler_event_loop_lag_max_seconds",
                "The longest the event loop was blocked since the process started.",
                registry=registry,
            ),
            gc_pause_seconds=Histogram(
                "gang_scheduler_gc_pause_seconds",
                "Full garbage collections (generation 2) of the interpreter: every thread, "
                "the event loop's included, stops while one runs.",
                buckets=STALL_BUCKETS,
                registry=registry,
            ),
            background_errors=Counter(
                "gang_scheduler_background_errors_total",
                "Unexpected errors caught in a background worker (binder, patcher, event "
                "recorder, lease keeper, watch), which kept running; by worker.",
                ["worker"],
                registry=registry,
            ),
            action_errors=Counter(
                "gang_scheduler_action_errors_total",
                "Turns of an action that raised (a bug, or input nobody foresaw): that "
                "GangGroup's turn was undone and the pass went on; by action.",
                ["action"],
                registry=registry,
            ),
            preemption_victims=Counter(
                "gang_scheduler_preemption_victims_total",
                "Pods evicted so that a gang of higher priority fits, by the victim's priority.",
                ["priority"],
                registry=registry,
            ),
            stale_gang_victims=Counter(
                "gang_scheduler_stale_gang_victims_total",
                "Pods evicted because their gang ran below its minimum for longer than its "
                "grace period (--stale-gang-after).",
                registry=registry,
            ),
            consolidation_moves=Counter(
                "gang_scheduler_consolidation_moves_total",
                "Pods evicted by consolidation so that a gang fits, each found to fit on "
                "another node (the consolidate action).",
                registry=registry,
            ),
            reclaim_victims=Counter(
                "gang_scheduler_reclaim_victims_total",
                "Pods evicted so that a queue below its fair share gets room back, by "
                "the victim's queue.",
                ["queue"],
                registry=registry,
            ),
            victims_above_fewest=Histogram(
                "gang_scheduler_victims_above_fewest",
                "For each gang that evicted (preempt, reclaim): how many more victims it took "
                "than the fewest that could have made room, at most; 0 when proven the fewest.",
                ["action"],
                buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128),
                registry=registry,
            ),
            preemption_bound_seconds=Histogram(
                "gang_scheduler_preemption_to_bound_seconds",
                "From a gang's preemption to the bind of its first member.",
                buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
                registry=registry,
            ),
            api_unreachable_seconds=Gauge(
                "gang_scheduler_api_unreachable_seconds",
                "For how long every call to the API server has failed (0 while it answers).",
                registry=registry,
            ),
            stranded=Gauge(
                "gang_scheduler_stranded",
                "Fragmentation: free room, per resource, on the nodes that cannot take "
                "any waiting member (0 while nothing waits).",
                ["resource"],
                registry=registry,
            ),
            placeable_members=Gauge(
                "gang_scheduler_placeable_members",
                "Fragmentation: how many members of the smallest waiting shape the "
                "nodes could take now, node by node (0 while nothing waits).",
                registry=registry,
            ),
            whole_gpu_nodes=Gauge(
                "gang_scheduler_whole_gpu_nodes",
                "Fragmentation: nodes whose GPUs are all free: the largest gang of "
                "whole-node GPU members that could start now, in nodes.",
                registry=registry,
            ),
            stranded_by_topology=Gauge(
                "gang_scheduler_stranded_by_topology",
                "Fragmentation: free GPUs in the units of a level (racks, blocks) "
                "holding fewer than the smallest waiting gang held to one unit of that level "
                "(a hard networkTopology) needs; only levels such a gang waits on.",
                ["level"],
                registry=registry,
            ),
            leader=Gauge(
                "gang_scheduler_leader",
                "1 while this replica holds the Lease and may bind (always, without leader "
                "election), else 0: read when scraped.",
                registry=registry,
            ),
            queue_allocated=Gauge(
                "gang_scheduler_queue_allocated",
                "What a queue's gangs (its subtree's) hold, by queue and resource, in base "
                "units (cpu in millicores, memory in bytes).",
                ["queue", "resource"],
                registry=registry,
            ),
            queue_fair_share=Gauge(
                "gang_scheduler_queue_fair_share",
                "A queue's fair share of the cluster by its deserved share and weight, by "
                "queue and resource, in base units.",
                ["queue", "resource"],
                registry=registry,
            ),
            queue_deserved=Gauge(
                "gang_scheduler_queue_deserved",
                "A queue's spec.deserved, by queue and resource, in base units (only the "
                "resources it states): the share reclaim gives it back.",
                ["queue", "resource"],
                registry=registry,
            ),
            queue_gangs=Gauge(
                "gang_scheduler_queue_gangs",
                "Gangs of a queue, by state: pending (waiting) or running (a member bound).",
                ["queue", "state"],
                registry=registry,
            ),
        )

    def serve(self, port: int) -> None:
        """Serve /metrics on ``port`` from a thread of its own."""
        start_http_server(port, registry=self.registry)
