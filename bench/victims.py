"""Victims per unit of room needed, this build against another, on the same seeded trace.

Each case of the trace is a cluster filled to about 95% by running gangs (1 to 16 members of
1 to 16 cpu, priorities 0 to 3, a minimum between 1 and the gang's size, spread first-fit
over the nodes in a random order, of random ages) and one waiting gang at priority 10 (1 to
16 members of 1 to 32 cpu, all of them needed) that may fit in the 5% left, or only by
preempting. One pass of
the pure core (``schedule``) decides, in each build: does the gang find victims, how many
pods and how much cpu they are, how many running gangs they touch.

    python -m bench.victims --base /tmp/base             # this tree against /tmp/base
    python -m bench.victims --base /tmp/base --cases 400 --name victims

The builds run in child processes (``PYTHONPATH`` set to each tree), fed the trace as JSON
manifests read by the build's own codecs, so the same cases are decided by each build's
own code. Figures go to ``bench/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

from bench.report import log, table, write
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
NODE_CPU = 32
SCHEDULER = "gang-scheduler"
KOORD_NAME = "gang.scheduling.koordinator.sh/name"
KOORD_MIN = "gang.scheduling.koordinator.sh/min-available"


def _pod(name: str, *, gang: str, minimum: int, cpu: int, priority: int, node: str,
         created: int) -> dict:  # fmt: skip
    body: dict = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-01-01T{created // 3600:02}:{created // 60 % 60:02}:"
            f"{created % 60:02}Z",
            "annotations": {KOORD_NAME: gang, KOORD_MIN: str(minimum)},
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "priority": priority,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def case(seed: int) -> dict:
    """One cluster, full, and a gang of higher priority waiting."""
    pick = random.Random(seed)
    count = pick.choice((16, 32, 64))
    nodes = [f"n{i:03}" for i in range(count)]
    free = dict.fromkeys(nodes, NODE_CPU)
    pods: list[dict] = []
    number = 0
    misses = 0
    while sum(free.values()) > 0.05 * NODE_CPU * count and misses < 50:
        size, cpu = pick.randint(1, 16), pick.choice((1, 1, 2, 4, 8, 16))
        order = nodes[:]
        pick.shuffle(order)
        spots: list[str] = []
        room = dict(free)
        for node in order:
            while room[node] >= cpu and len(spots) < size:
                room[node] -= cpu
                spots.append(node)
        if len(spots) < size:
            misses += 1
            continue
        free = room
        gang = f"r{number}"
        number += 1
        minimum = size if pick.random() < 0.5 else pick.randint(1, size)
        priority, created = pick.randint(0, 3), pick.randint(0, 20000)
        for i, node in enumerate(spots):
            pods.append(_pod(f"{gang}-{i}", gang=gang, minimum=minimum, cpu=cpu,
                             priority=priority, node=node, created=created + i))  # fmt: skip
    size, cpu = pick.randint(1, 16), pick.choice((1, 2, 4, 8, 16, 32))
    pods += [_pod(f"w-{i}", gang="w", minimum=size, cpu=cpu, priority=10, node="",
                  created=30000) for i in range(size)]  # fmt: skip
    node_manifests = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
            "status": {
                "allocatable": {"cpu": str(NODE_CPU), "memory": "256Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for n in nodes
    ]
    return {"seed": seed, "nodes": node_manifests, "pods": pods, "asked": size * cpu}


def decide(cases: list[dict]) -> list[dict]:
    """One pass of this process's build over each case: what it evicted."""
    out = []
    for c in cases:
        nodes = [node_from_dict(n) for n in c["nodes"]]
        pods = tuple(pod_from_dict(p) for p in c["pods"])
        snap = Snapshot(nodes={n.name: n for n in nodes}, pods=pods)
        result = schedule(snap, now=1_800_000_000.0)
        cpu = {p.ref.name: p.requests.get("cpu", 0) for p in pods}
        gone = sorted(e.pod.name for e in result.evictions)
        out.append(
            {
                "seed": c["seed"],
                "victims": len(gone),
                "victim_cpu": sum(cpu[name] for name in gone) / 1000,
                "gangs_touched": len({name.rsplit("-", 1)[0] for name in gone}),
                "nominated": len(result.nominations),
                "bound": sum(len(g.bindings) for g in result.bindings),
            }
        )
    return out


def run_build(tree: Path, cases: list[dict]) -> list[dict]:
    """``decide`` in a child process whose ``scheduler`` is ``tree``'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from importlib.util import spec_from_file_location, module_from_spec; "
        "spec = spec_from_file_location('victims_bench', sys.argv[2]); "
        "m = module_from_spec(spec); spec.loader.exec_module(m); "
        "print(json.dumps(m.decide(json.load(sys.stdin))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tree), __file__],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the build at {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def _summary(decided: list[dict], cases: list[dict]) -> dict:
    asked = {c["seed"]: c["asked"] for c in cases}
    served = [d for d in decided if d["victims"]]
    return {
        "served": len(served),
        "bound_without_victims": sum(1 for d in decided if d["bound"] and not d["victims"]),
        "neither": sum(1 for d in decided if not d["bound"] and not d["victims"]),
        "victims": sum(d["victims"] for d in served),
        "victim_cpu": sum(d["victim_cpu"] for d in served),
        "asked_cpu_served": sum(asked[d["seed"]] for d in served),
        "gangs_touched": sum(d["gangs_touched"] for d in served),
        "victim_cpu_per_cpu_asked": round(
            sum(d["victim_cpu"] for d in served) / max(sum(asked[d["seed"]] for d in served), 1),
            3,
        ),
        "median_victims": statistics.median([d["victims"] for d in served]) if served else None,
    }


def compare(this: list[dict], base: list[dict], cases: list[dict]) -> dict:
    """Case by case, where both found victims: fewer, as many, more, and the totals."""
    pairs = list(zip(this, base, strict=True))
    both = [(a, b) for a, b in pairs if a["victims"] and b["victims"]]
    return {
        "cases": len(cases),
        "this": _summary(this, cases),
        "base": _summary(base, cases),
        "served_by_both": len(both),
        "fewer": sum(1 for a, b in both if a["victims"] < b["victims"]),
        "same": sum(1 for a, b in both if a["victims"] == b["victims"]),
        "more": sum(1 for a, b in both if a["victims"] > b["victims"]),
        "victims_where_both": [
            sum(a["victims"] for a, _ in both),
            sum(b["victims"] for _, b in both),
        ],
        "served_only_here": sum(1 for a, b in pairs if a["victims"] and not b["victims"]),
        "served_only_there": sum(1 for a, b in pairs if b["victims"] and not a["victims"]),
    }


def markdown(results: dict) -> str:
    figures = results["figures"]
    this, base = figures["this"], figures["base"]
    rows = [
        [label, this[key], base[key]]
        for label, key in (
            ("cases where the gang found victims", "served"),
            ("cases where it fit without any", "bound_without_victims"),
            ("cases where it neither fit nor found victims", "neither"),
            ("victim pods, in all", "victims"),
            ("victim cpu, in all", "victim_cpu"),
            ("cpu the served gangs asked", "asked_cpu_served"),
            ("victim cpu per cpu asked", "victim_cpu_per_cpu_asked"),
            ("running gangs touched", "gangs_touched"),
            ("median victims where served", "median_victims"),
        )
    ]
    here, there = figures["victims_where_both"]
    return "\n".join(
        [
            f"# Victims per unit of room needed (`python -m bench.victims`, {results['machine']})",
            "",
            f"{figures['cases']} seeded cases (seeds {results['seeds']}): a cluster of 16 to 64 "
            "nodes of 32 cpu filled to about 95% by running gangs of priority 0 to 3, and a "
            "waiting gang at priority 10 (which may fit in what is left, or only by "
            "preempting); one pass of each "
            f"build. This build: {results['this']}; base: {results['base']}.",
            "",
            *table(["", "this build", "base"], rows),
            "",
            f"Where both found victims ({figures['served_by_both']} cases): fewer here in "
            f"{figures['fewer']}, as many in {figures['same']}, more in {figures['more']}; "
            f"{here} victim pods here against {there}. Served here only: "
            f"{figures['served_only_here']}; there only: {figures['served_only_there']}.",
            "",
        ]
    )


def _describe(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "scheduler"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return (done.stdout.strip() or str(tree)) + (" (with changes)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.victims", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--base", type=Path, required=True, help="the other build's tree")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1, help="case i uses seed SEED+i")
    parser.add_argument("--name", default="victims", help="bench/results/NAME.{json,md}")
    args = parser.parse_args(argv)
    cases = [case(args.seed + i) for i in range(args.cases)]
    log(f"{len(cases)} cases; this build")
    this = run_build(REPO, cases)
    log(f"base build at {args.base}")
    base = run_build(args.base.resolve(), cases)
    results = {
        "seeds": f"{args.seed} to {args.seed + args.cases - 1}",
        "machine": f"{os.cpu_count()} cores",
        "this": _describe(REPO),
        "base": _describe(args.base),
        "figures": compare(this, base, cases),
        "cases": [
            {"seed": a["seed"], "this": a, "base": b} for a, b in zip(this, base, strict=True)
        ],
    }
    write(args.name, results, markdown(results), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
