"""Live cluster state built from watch events, with kube-scheduler's assume/forget pairing,
split along kube-scheduler's seams: the node cache (``nodes``), the gang queue (``gangs``),
plain per-kind stores (``kinds``) and what the watches delivered (``deliveries``), folded
together by ``cluster.ClusterCache``.

``snapshot()`` hands the pure core an immutable view, so a scheduling pass never sees the
state change under it.
"""
