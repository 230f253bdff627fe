"""A real HTTP server on localhost that plays the API server's part in unit tests of the
shell, with a client for it: each test's handler answers every request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from scheduler.shell.api import ApiClient, Credentials

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def listening(handler: Handler) -> AsyncIterator[Credentials]:
    """An HTTP server on a free port answering every request with ``handler``, and the
    credentials that reach it."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Credentials(server=f"http://127.0.0.1:{port}", verify=False)
    finally:
        await runner.cleanup()


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[ApiClient]:
    """An HTTP server on a free port answering every request with ``handler``, and a
    client for it."""
    async with listening(handler) as credentials:
        api = ApiClient(credentials)
        try:
            yield api
        finally:
            await api.close()
