"""A small asynchronous client for the few API calls the scheduler makes.

Binding, patching and event posting are the hot path of a scheduler; aiohttp (already under
kopf) does them concurrently on one connection pool. Credentials come from the kubernetes
library's own kubeconfig and in-cluster loaders, so every way a kubeconfig can authenticate
(client certificates, tokens, exec plugins) works the same as for kubectl.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


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


def _token_of(cfg: k8s_client.Configuration) -> str | None:
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)  # re-authenticates only once the token has expired
    value = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization")
    return value.removeprefix("Bearer ").strip() if value else None


def load_credentials(kubeconfig: str | None) -> Credentials:
    """From ``kubeconfig`` if given (or $KUBECONFIG / ~/.kube/config), else in-cluster."""
    cfg = k8s_client.Configuration()
    if kubeconfig or not IN_CLUSTER_TOKEN.exists():
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        source = (lambda: _token_of(cfg)) if _token_of(cfg) else None
    else:
        k8s_config.load_incluster_config(client_configuration=cfg)
        source = lambda: IN_CLUSTER_TOKEN.read_text().strip()  # noqa: E731
    return Credentials(
        server=cfg.host.rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        token_source=source,
        verify=bool(cfg.verify_ssl),
    )


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ApiClient:
    """JSON over HTTPS to one API server, with a bounded connection pool."""

    def __init__(self, credentials: Credentials, *, connections: int = 64) -> None:
        self._credentials = credentials
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
    ) -> dict[str, Any]:
        headers = self._headers(content_type)
        headers["Accept"] = accept
        data = None if body is None else json.dumps(body)
        async with self._session.request(method, path, data=data, headers=headers) as response:
            text = await response.text()
            try:
                payload = json.loads(text) if text else {}
            except json.JSONDecodeError:
                payload = {"message": text}
            if response.status >= 400:
                raise ApiError(
                    response.status,
                    str(payload.get("reason") or response.reason),
                    str(payload.get("message") or text),
                )
            return payload

    def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        bearer = self._credentials.bearer()
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        return headers

    async def stream(self, path: str) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a watch, one per line, until the server ends it."""
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.get(path, headers=self._headers(), timeout=timeout) as response:
            if response.status >= 400:
                raise ApiError(response.status, response.reason or "", await response.text())
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)

    async def post(self, path: str, body: object) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, body: object) -> dict[str, Any]:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )
