"""Which version of a kind the API server serves, for kinds that Kubernetes releases serve at
different versions (the Workload API's PodGroups: v1alpha2 in 1.36, v1beta1 and v1alpha3 in
1.37, one object at both). Asked of the discovery endpoints, which every authenticated
client may read, before each LIST: a cluster upgraded under a running scheduler is followed
at its next re-list.

Only one version is ever listed and watched: the objects of two versions of one group are
the same objects."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.codecs.shapes import obj, objs, text
from scheduler.shell.api import ApiClient, ApiError


def _split(path: str) -> tuple[str, str]:
    """("/apis/GROUP/VERSION/RESOURCE") -> ("GROUP", "RESOURCE")."""
    parts = path.strip("/").split("/")
    return parts[1], parts[-1]


async def served_path(api: ApiClient, path: str, versions: Sequence[str]) -> str:
    """``path`` (``/apis/GROUP/VERSION/RESOURCE``) at the first of ``versions`` (group
    versions, most wanted first) whose resources the API server says include RESOURCE;
    ``path`` itself when none does (its LIST then says 404, as for any kind not served).
    Raises ApiError when discovery fails otherwise (the API server starting, say): guessing
    then would list a version that is not served and take the kind for absent."""
    group, resource = _split(path)
    try:
        listed = await api.request("GET", f"/apis/{group}")
    except ApiError as error:
        if error.status == 404:
            return path
        raise
    offered = {text(v.get("groupVersion")) for v in objs(obj(listed).get("versions"))}
    for version in versions:
        if version not in offered:
            continue
        try:
            resources = await api.request("GET", f"/apis/{version}")
        except ApiError as error:
            if error.status == 404:
                continue
            raise
        if any(text(r.get("name")) == resource for r in objs(obj(resources).get("resources"))):
            return f"/apis/{version}/{resource}"
    return path


def group_version(path: str) -> str:
    """``/apis/GROUP/VERSION/...`` -> ``GROUP/VERSION``."""
    parts = path.strip("/").split("/")
    return f"{parts[1]}/{parts[2]}"
