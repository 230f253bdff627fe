"""Pure scheduling decisions: a snapshot and a time in, decisions out.

Queue order, filters, topology placement, gang allocation, preemption and ranks live here.
No I/O and no clock: ``now`` is an argument, so every decision is reproducible in a test.
"""
