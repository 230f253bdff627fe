"""The queue-order bench's count (bench/queue_order.py): identical gangs started in the
reverse of the order they were posted in."""

from __future__ import annotations

from bench.queue_order import inversions
from scheduler.sim.traces import Job


def test_only_identical_gangs_started_out_of_order_count() -> None:
    jobs = [
        Job(at=0.0, name="a", members=1, gpu=1),
        Job(at=1.0, name="b", members=1, gpu=1),
        Job(at=2.0, name="c", members=1, gpu=2),
        Job(at=3.0, name="d", members=1, gpu=1),
    ]
    started = {"a": 10.0, "b": 5.0, "c": 1.0, "d": 10.2}
    # b before a: one; c is of another size; d started with a (the same pass); never started
    # gangs are not counted.
    assert inversions(jobs, started) == 1
    assert inversions(jobs, {"a": 10.0}) == 0
