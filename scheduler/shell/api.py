"""A small asynchronous client for the few API calls the scheduler makes.

Binding, patching and event posting are the hot path of a scheduler; aiohttp (already under
kopf) does them concurrently on one connection pool. Credentials of a pod (in-cluster) and
of a kubeconfig that names only files, inline data and a static token are read here; any
other kubeconfig (exec plugins, auth providers, several files merged) by the kubernetes
library's own loader, so every way a kubeconfig can authenticate works as for kubectl.
Importing that library costs about a fifth of a second, before the first LIST: it is
imported only when it is needed.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import json
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import tenacity
import yaml

from scheduler import __version__

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_CA = IN_CLUSTER_TOKEN.with_name("ca.crt")
_MAX_BACKOFF = 5.0
# 0.2 s doubling up to 5 s, with jitter so that retries of many writes do not march in step.
_BACKOFF = tenacity.wait_exponential(multiplier=0.2, max=_MAX_BACKOFF) + tenacity.wait_random(
    0, 0.2
)


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    # Where a token that changes comes from: the in-cluster token file (rotated by the
    # kubelet) or the kubeconfig loader (exec plugins and other expiring tokens).
    token_source: Callable[[], str | None] | None = None
    verify: bool = True

    def bearer(self) -> str | None:
        return self.token_source() if self.token_source else self.token


def _token_of(cfg: Any) -> str | None:
    """The bearer token of a kubernetes ``Configuration``, refreshed when it has expired."""
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)  # re-authenticates only once the token has expired
    value = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization")
    return value.removeprefix("Bearer ").strip() if value else None


def load_credentials(kubeconfig: str | None) -> Credentials:
    """From ``kubeconfig`` if given (or $KUBECONFIG / ~/.kube/config), else in-cluster."""
    if kubeconfig or not IN_CLUSTER_TOKEN.exists():
        return _plain_kubeconfig(kubeconfig) or _library_kubeconfig(kubeconfig)
    return _in_cluster() or _library_in_cluster()


def _in_cluster() -> Credentials | None:
    """A pod's own: the service's address from the environment, the service account's CA
    and token (a token the kubelet rotates, so it is read afresh)."""
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port or not IN_CLUSTER_CA.exists():
        return None  # the library's loader says what is missing
    host = f"[{host}]" if ":" in host else host
    return Credentials(
        server=f"https://{host}:{port}",
        ca_file=str(IN_CLUSTER_CA),
        token_source=lambda: IN_CLUSTER_TOKEN.read_text().strip(),
    )


# What a kubeconfig's cluster and user may say for ``_plain_kubeconfig`` to read it.
_PLAIN_CLUSTER = {"server", "certificate-authority", "certificate-authority-data"}
_PLAIN_USER = {"client-certificate", "client-certificate-data", "client-key", "client-key-data"}


def _plain_kubeconfig(kubeconfig: str | None) -> Credentials | None:
    """A kubeconfig of one file whose current context's cluster and user say nothing but
    the server, certificates and keys (as files or inline), a static token and whether
    to skip TLS verification, as the library reads it (relative paths from the file's
    folder). None for anything else, left to the library."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if os.pathsep in path:
        return None  # several files, merged
    path = os.path.expanduser(path)
    try:
        with open(path, "rb") as file:
            config = yaml.load(file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        context = _named(config, "contexts", name=config["current-context"])["context"]
        cluster = _named(config, "clusters", name=context["cluster"])["cluster"]
        user = _named(config, "users", name=context["user"])["user"] or {}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, StopIteration):
        return None  # the library's loader says what is wrong
    insecure = cluster.get("insecure-skip-tls-verify", False)
    token = user.get("token")
    if (
        set(cluster) - _PLAIN_CLUSTER - {"insecure-skip-tls-verify"}
        or set(user) - _PLAIN_USER - {"token"}
        or not isinstance(cluster.get("server"), str)
        or not isinstance(token, str | None)
        or not isinstance(insecure, bool)
    ):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    try:
        return Credentials(
            server=cluster["server"].rstrip("/"),
            ca_file=None if insecure else _file(cluster, "certificate-authority", folder=folder),
            cert_file=_file(user, "client-certificate", folder=folder),
            key_file=_file(user, "client-key", folder=folder),
            token=token or None,
            verify=not insecure,
        )
    except (ValueError, TypeError):  # inline data that is not base64
        return None


def _named(config: dict, section: str, *, name: str) -> dict:
    return next(item for item in config[section] if item["name"] == name)


def _file(entry: dict, key: str, *, folder: str) -> str | None:
    """The file that ``key`` names (relative to ``folder``), or one holding ``key``-data."""
    if entry.get(f"{key}-data"):
        data = base64.standard_b64decode(entry[f"{key}-data"])
        with tempfile.NamedTemporaryFile(delete=False, prefix="gang-scheduler-") as file:
            file.write(data)
        atexit.register(_remove, file.name)
        return file.name
    if entry.get(key):
        return os.path.join(folder, entry[key])
    return None


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(name)


def _library_kubeconfig(kubeconfig: str | None) -> Credentials:
    from kubernetes import client, config  # noqa: PLC0415 (costly; rarely needed)

    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    source = (lambda: _token_of(cfg)) if _token_of(cfg) else None
    return _of_configuration(cfg, source)


def _library_in_cluster() -> Credentials:
    from kubernetes import client, config  # noqa: PLC0415 (costly; rarely needed)

    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return _of_configuration(cfg, lambda: IN_CLUSTER_TOKEN.read_text().strip())


def _of_configuration(cfg: Any, source: Callable[[], str | None] | None) -> Credentials:
    return Credentials(
        server=cfg.host.rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        token_source=source,
        verify=bool(cfg.verify_ssl),
    )


class ApiError(Exception):
    """Any failed API call, whatever failed: the server's answer (``status`` >= 400), or no
    answer at all (``status`` 0: refused, reset, disconnected, a payload cut short, a
    timeout). Callers handle one type, so no failure can slip past them."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Worth trying again as it is: no answer, too many requests, a server error."""
        return self.status in {0, 429} or self.status >= 500

    @property
    def unsure(self) -> bool:
        """The request may have been carried out although it failed (no answer, or the
        server gave up waiting for etcd): a write must be checked, not assumed lost."""
        return self.status == 0 or self.status >= 500


def _unreachable(error: BaseException) -> ApiError:
    return ApiError(0, "Unavailable", f"{type(error).__name__}: {error}")


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None


class Reachability:
    """Whether the API server answers: since when every call has failed (None while the
    last call got an answer). /healthz fails once that lasts too long."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.failing_since: float | None = None

    def answered(self) -> None:
        self.failing_since = None

    def failed(self) -> None:
        if self.failing_since is None:
            self.failing_since = self._clock()

    def unreachable_for(self) -> float:
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since


class RateLimiter:
    """client-go's token bucket: at most ``burst`` requests at once, refilled at ``qps`` a
    second. kube-scheduler's clients are limited this way (KubeSchedulerConfiguration's
    clientConnection qps and burst); the same limit on ours is what makes a comparison
    with it fair in ``make bench``. A caller that finds the bucket empty reserves the next
    token and sleeps until it is due, so callers go through in the order they came."""

    def __init__(
        self, *, qps: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be positive and burst at least 1, not {qps} and {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 if one was there)."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return max(-self._tokens / self.qps, 0.0)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay:
            await asyncio.sleep(delay)


# As client-go names its clients (binary/version): the API server's audit log and metrics
# tell our requests from other clients' by it (make bench counts each scheduler's so).
USER_AGENT = f"gang-scheduler/{__version__}"


class ApiClient:
    """JSON over HTTPS to one API server, with a bounded connection pool and, if given, a
    client-side rate limit on every request (a watch counts once, when it is opened)."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        connections: int = 64,
        clock: Callable[[], float] = time.monotonic,
        rate_limit: RateLimiter | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._credentials = credentials
        self._user_agent = user_agent
        self._rate_limit = rate_limit
        context: ssl.SSLContext | bool
        if credentials.verify:
            context = ssl.create_default_context(cafile=credentials.ca_file)
        else:
            context = False
        if credentials.cert_file and isinstance(context, ssl.SSLContext):
            context.load_cert_chain(credentials.cert_file, credentials.key_file)
        self._session = aiohttp.ClientSession(
            base_url=credentials.server,
            connector=aiohttp.TCPConnector(limit=connections, ssl=context),
            timeout=aiohttp.ClientTimeout(total=30),
            json_serialize=json.dumps,
        )
        self.health = Reachability(clock=clock)

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        retries: int = 0,
    ) -> dict[str, Any]:
        """One call; with ``retries``, transient failures are tried again after a jittered
        exponential backoff (longer if the server says Retry-After). Only for calls that
        are safe to repeat. Raises ApiError and nothing else."""
        # The first attempt goes alone: tenacity's loop is a knot of reference cycles (about
        # 30 objects a call, its Future, Condition and closures) that only the collector
        # frees, and a backlog's thousands of binds made a young collection of ~50,000 of
        # them every few seconds, 0.1-0.2 s with the GIL held. Only a transient failure
        # enters the loop, which sees it as its first attempt.
        try:
            return await self._once(method, path, body, content_type=content_type, accept=accept)
        except ApiError as error:
            if not retries or not error.transient:
                raise
            failed: ApiError | None = error

        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            backoff = _BACKOFF(state)
            if isinstance(error, ApiError) and error.retry_after is not None:
                return max(backoff, min(error.retry_after, _MAX_BACKOFF))
            return backoff

        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(retries + 1),
            wait=wait,
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, ApiError) and e.transient),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if failed is not None:  # the first attempt, made above
                    first, failed = failed, None
                    raise first
                return await self._once(
                    method, path, body, content_type=content_type, accept=accept
                )
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _once(
        self, method: str, path: str, body: object, *, content_type: str, accept: str
    ) -> dict[str, Any]:
        if self._rate_limit is not None:
            await self._rate_limit.acquire()
        headers = self._headers(content_type)
        headers["Accept"] = accept
        data = None if body is None else json.dumps(body)
        try:
            async with self._session.request(method, path, data=data, headers=headers) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError) as error:
            self.health.failed()
            raise _unreachable(error) from error
        if response.status >= 500:
            self.health.failed()
        else:
            self.health.answered()
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError:
            payload = {"message": text}
        if not isinstance(payload, dict):
            payload = {"message": text}
        if response.status >= 400:
            raise ApiError(
                response.status,
                str(payload.get("reason") or response.reason),
                str(payload.get("message") or text),
                retry_after=_retry_after(response.headers.get("Retry-After")),
            )
        return payload

    def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {
            "Content-Type": content_type,
            "Accept": "application/json",
            "User-Agent": self._user_agent,
        }
        bearer = self._credentials.bearer()
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        return headers

    async def stream(self, path: str) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a watch, one per line, until the server ends it. Raises
        ApiError (a line that is not JSON included) and nothing else."""
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        if self._rate_limit is not None:
            await self._rate_limit.acquire()
        try:
            async with self._session.get(
                path, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status >= 400:
                    raise ApiError(response.status, response.reason or "", await response.text())
                self.health.answered()
                # Split by hand: aiohttp's line iterator refuses a line over 128 KiB, and a
                # pod may be bigger (annotations up to 256 KiB); refusing it would re-list
                # and meet it again, forever.
                pending = b""
                async for chunk in response.content.iter_any():
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield json.loads(line)
                if pending.strip():
                    yield json.loads(pending)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
            self.health.failed()
            raise _unreachable(error) from error

    async def post(self, path: str, body: object, *, retries: int = 0) -> dict[str, Any]:
        return await self.request("POST", path, body=body, retries=retries)

    async def merge_patch(self, path: str, body: object, *, retries: int = 0) -> dict[str, Any]:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json", retries=retries
        )

    async def strategic_patch(self, path: str, body: object, *, retries: int = 0) -> dict[str, Any]:
        """A strategic merge patch (built-in kinds only): lists with a merge key, such as a
        pod's status.conditions, are merged by it instead of replaced whole."""
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/strategic-merge-patch+json",
            retries=retries,
        )
