"""Live cluster state built from watch events, with kube-scheduler's assume/forget pairing.

``snapshot()`` hands the pure core an immutable view, so a scheduling pass never sees the
state change under it.
"""
