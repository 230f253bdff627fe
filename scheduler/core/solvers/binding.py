"""The gangs being bound: no victim solver may take any member of one."""

from __future__ import annotations

from scheduler.core.session import Session
from scheduler.model.pods import GangKey, gang_key_of


def gangs_being_bound(session: Session) -> set[GangKey]:
    """The gangs with a bind in flight from an earlier pass, or with members this pass
    binds. Evicting some of such a gang leaves it below its minimum, or bound in part: the
    bind of a pod deleted fails (in flight), or the members bound before go while the new
    ones stay (a running gang given the members it lacks in this pass)."""
    flying = session.snapshot.in_flight
    found = (
        {
            gang_key_of(p)
            for info in session.infos.values()
            for p in info.pods
            if p.ref.uid in flying
        }
        if flying
        else set()
    )
    found.update(g.gang for group in session.bindings for g in group.gangs)
    return found
