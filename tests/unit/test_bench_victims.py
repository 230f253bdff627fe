"""The victims bench's trace and its comparison: cases that never overcommit a node, the
same for a seed, and a case-by-case count that says fewer, as many or more."""

from __future__ import annotations

from collections import Counter

from bench.victims import case, compare, decide
from bench.victims_gpus import NODE_GPUS
from bench.victims_gpus import case as gpu_case
from bench.victims_gpus import decide as gpu_decide
from scheduler.codecs.cel import Selectors


def test_a_case_fills_its_nodes_without_overcommitting_any_and_is_the_same_for_its_seed() -> None:
    for seed in range(1, 30):
        made = case(seed)
        assert made == case(seed)
        used: Counter[str] = Counter()
        for p in made["pods"]:
            node = p["spec"].get("nodeName")
            if node:
                used[node] += int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"])
        assert max(used.values()) <= 32
        assert sum(used.values()) >= 0.95 * 32 * len(made["nodes"]) - 32 * 2
        waiting = [p for p in made["pods"] if "nodeName" not in p["spec"]]
        assert waiting
        assert {p["spec"]["priority"] for p in waiting} == {10}


def test_one_pass_over_a_case_says_what_it_evicted_and_bound() -> None:
    [decided] = decide([case(2)])
    assert decided["seed"] == 2
    assert decided["victims"] or decided["bound"], decided


def test_the_comparison_counts_case_by_case() -> None:
    cases = [{"seed": s, "asked": 4} for s in range(4)]

    def d(seed: int, victims: int, bound: int = 0) -> dict:
        return {"seed": seed, "victims": victims, "victim_cpu": victims, "gangs_touched": 1,
                "nominated": 1, "bound": bound}  # fmt: skip

    this = [d(0, 2), d(1, 3), d(2, 1), d(3, 0, bound=1)]
    base = [d(0, 3), d(1, 3), d(2, 0), d(3, 0, bound=1)]
    figures = compare(this, base, cases)
    assert (figures["fewer"], figures["same"], figures["more"]) == (1, 1, 0)
    assert figures["victims_where_both"] == [5, 6]
    assert (figures["served_only_here"], figures["served_only_there"]) == (1, 0)
    assert figures["this"]["bound_without_victims"] == 1
    assert figures["base"]["neither"] == 1


def test_a_gpu_case_never_gives_a_device_twice_and_both_encodings_preempt_for_it() -> None:
    """The GPU bench (bench/victims_gpus.py): each running pod holds devices of its own node,
    none held twice; decided as DRA and as extended resources, the cases find victims in
    both encodings."""
    for seed in range(1, 20):
        made = gpu_case(seed)
        assert made == gpu_case(seed)
        held = [(p["node"], d) for p in made["pods"] for d in p["devices"]]
        assert len(held) == len(set(held)), "a device held twice"
        assert all(0 <= d < NODE_GPUS for _, d in held)
        assert all(len(p["devices"]) == p["gpus"] for p in made["pods"] if p["node"])
    selectors = Selectors()
    served = [
        (gpu_decide(gpu_case(s), extended=False, selectors=selectors),
         gpu_decide(gpu_case(s), extended=True, selectors=selectors))
        for s in (1, 2, 3)
    ]  # fmt: skip
    assert any(dra["victims"] and ext["victims"] for dra, ext in served), served
