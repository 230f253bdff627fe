"""The pod codec's bench (bench/decode.py): its pods are the shapes it names, and it times
every part of every shape."""

from __future__ import annotations

from bench import decode
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.pods import GangSource


def test_each_shape_decodes_as_the_gang_it_is_named_for() -> None:
    shapes = decode.shapes(16)
    sources = {
        shape: {pod_from_dict(p).gang.source if pod_from_dict(p).gang else None for p in pods}
        for shape, pods in shapes.items()
    }
    assert sources == {
        "Koordinator's annotations": {GangSource.KOORDINATOR},
        "scheduler-plugins' label": {GangSource.POD_GROUP},
        "a Job's pod": {GangSource.OWNER},
        "no gang": {None},
    }
    koord = [pod_from_dict(p) for p in shapes["Koordinator's annotations"]]
    assert {p.gang.key.name for p in koord if p.gang} == {"g0", "g1"}  # gangs of 8
    # The admission's two tolerations, the requests as the API server defaults them.
    assert len(koord[0].tolerations) == 2
    assert dict(koord[0].requests) == {"cpu": 500, "memory": 1 << 30, "pods": 1}


def test_a_run_times_every_part_of_every_shape() -> None:
    results = decode.run(pods=8, repeat=2)
    figures = results["figures_us_per_pod"]
    assert set(figures) == set(decode.shapes(1))
    assert all(set(row) == set(decode.PARTS) for row in figures.values())
    assert all(0 < us < 1e5 for row in figures.values() for us in row.values())
    assert "| no gang |" in decode.markdown(results)
