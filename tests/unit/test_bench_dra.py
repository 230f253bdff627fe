"""A short run of bench/dra.py (the full one is in `make bench`): the same gangs bind with
GPUs as DRA devices as with GPUs as an extended resource, no device is given twice, and the
gang that cannot fit binds nothing in either."""

from __future__ import annotations

from bench import dra


def test_short_dra_bench_binds_the_same_gangs_as_the_extended_resource() -> None:
    figures = dra.run(nodes=40, bound=200, gangs=2, unfit=41, rounds=1)
    assert figures["members"] == 8 + 16
    assert figures["dra_s"]["median"] > 0
    assert figures["extended_s"]["median"] > 0
    assert figures["ratio"] == figures["dra_s"]["median"] / figures["extended_s"]["median"]
