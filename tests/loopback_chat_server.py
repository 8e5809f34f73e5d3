"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1, for the test model servers.

Each test server (`slow_model_server`, `staggered_model_server`, `app_model_server`) says how it
answers (`_reply`); this base serves it at ``/v1/chat/completions`` on a free port of the loopback
address, and stops it.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["LoopbackChatServer"]


class LoopbackChatServer:
    """Serves `_reply` on 127.0.0.1; `start()` gives the base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._reply)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}/v1"
        return self.base

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _reply(self, request: web.Request) -> web.Response:
        raise NotImplementedError
