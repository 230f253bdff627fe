"""A pod's generic ephemeral volume is the claim <pod>-<volume> that the ephemeral volume
controller made for it: until it exists the pod waits, in kube-scheduler's words; a claim of
that name the pod does not control is never its volume; a lost claim is said by name."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.volumes import claim_from_dict
from scheduler.core.scheduling import schedule
from scheduler.core.volume_binding import pod_claims
from scheduler.model.config import Config
from scheduler.model.volumes import WAIT_FOR_FIRST_CONSUMER, Claim, StorageClass
from tests.unit.builders import T0, node, pod, snapshot

MADE = StorageClass("made", WAIT_FOR_FIRST_CONSUMER, "example.com/provisioner")
CLASSES = {"made": MADE}
TEMPLATE = {"volumeClaimTemplate": {"spec": {"storageClassName": "made"}}}


def _scratch_pod(name: str = "w-0", **extra):
    return pod(name, spec={"volumes": [{"name": "scratch", "ephemeral": TEMPLATE}]}, **extra)


def _made_for(owner, **fields) -> Claim:
    return Claim(
        "default",
        f"{owner.ref.name}-scratch",
        storage_class="made",
        uid="c",
        controller_uid=owner.ref.uid,
        **fields,
    )


def test_an_ephemeral_volume_names_its_claim_after_the_pod_and_the_volume() -> None:
    p = _scratch_pod("w-0")
    named = pod("n", spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]})
    assert (p.claims, p.ephemeral_claims) == (("w-0-scratch",), frozenset({"w-0-scratch"}))
    assert (named.claims, named.ephemeral_claims) == (("d",), frozenset())


def test_a_claim_is_read_with_its_controller_and_whether_it_is_lost() -> None:
    raw = {
        "metadata": {
            "name": "w-0-scratch",
            "namespace": "default",
            "ownerReferences": [
                {"kind": "Job", "uid": "job-uid"},
                {"kind": "Pod", "uid": "pod-uid", "controller": True},
            ],
        },
        "spec": {"volumeName": "pv-1"},
        "status": {"phase": "Lost"},
    }
    claim = claim_from_dict(raw)
    assert (claim.controller_uid, claim.lost) == ("pod-uid", True)
    plain = claim_from_dict({"metadata": {"name": "c", "ownerReferences": "hostile"}})
    assert (plain.controller_uid, plain.lost) == ("", False)


def test_a_pod_waits_for_the_ephemeral_volume_controller_to_make_its_claim() -> None:
    assert pod_claims(_scratch_pod(), claims={}, classes=CLASSES) == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "w-0-scratch"'
    )


def test_a_claim_of_that_name_made_for_another_pod_is_not_its_volume() -> None:
    p = _scratch_pod()
    foreign = replace(_made_for(p), controller_uid="uid-of-an-earlier-w-0")
    assert pod_claims(p, claims={foreign.key: foreign}, classes=CLASSES) == (
        "PVC default/w-0-scratch was not created for pod default/w-0 (pod is not owner)"
    )
    by_hand = replace(_made_for(p), controller_uid="")
    assert "(pod is not owner)" in str(
        pod_claims(p, claims={by_hand.key: by_hand}, classes=CLASSES)
    )


def test_the_claim_made_for_the_pod_is_its_volume() -> None:
    p = _scratch_pod()
    own = _made_for(p)
    assert not isinstance(pod_claims(p, claims={own.key: own}, classes=CLASSES), str)


def test_a_lost_claim_is_said_with_its_volume() -> None:
    p = pod("p", spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]})
    lost = Claim("default", "d", volume="pv-gone", lost=True)
    assert pod_claims(p, claims={lost.key: lost}, classes=CLASSES) == (
        'persistentvolumeclaim "d" bound to non-existent persistentvolume "pv-gone"'
    )


def test_a_gang_whose_member_has_a_claim_it_does_not_own_binds_nothing_and_says_why() -> None:
    members = [_scratch_pod(f"w-{i}", gang="w", min_available=2) for i in range(2)]
    own = _made_for(members[0])
    foreign = replace(_made_for(members[1]), controller_uid="someone-else")
    shot = replace(
        snapshot([node("n0", cpu="4")], members),
        claims={own.key: own, foreign.key: foreign},
        storage_classes=CLASSES,
    )
    result = schedule(shot, now=T0, config=Config(bind_volumes=True))
    assert [b for g in result.bindings for b in g.bindings] == []
    said = " ".join(e.message for e in result.events)
    assert "PVC default/w-1-scratch was not created for pod default/w-1 (pod is not owner)" in said
