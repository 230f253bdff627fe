"""A short run of bench/pass.py (the full one is in `make bench`): the pure core, pass
after pass on the real cache, binds every arriving gang whole and no waiting gang, and after
the first pass leaves the parked gangs alone."""

from __future__ import annotations

import importlib

bench_pass = importlib.import_module("bench.pass")  # "pass" is a keyword: no plain import


def test_short_bench_binds_every_arriving_gang_and_tries_no_parked_gang_again() -> None:
    figures = bench_pass.run(nodes=200, bound=2000, waiting=40, arriving=10, passes=10)
    assert figures["gangs_bound"] == 10
    assert figures["members_bound"] == 80
    assert figures["first_pass_gangs_tried"] == 40
    # Later passes try the arriving gangs only (one or two a pass), never the 40 parked ones.
    assert figures["later_passes_gangs_tried_max"] <= 2
