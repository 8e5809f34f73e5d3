"""Web search with a fallback: a SearXNG instance that refuses JSON, then the Brave API answers.

Both services are one small server started here on 127.0.0.1, shaped as theirs are: the
backends' `url` is a base address, so a server of your own can stand in for the real ones.
"""

import asyncio

from aiohttp import web

from agentfsm.browser import BrowserUseTool
from agentfsm.browser.engines import SearchSettings, build_search
from agentfsm.browser.engines.settings import BraveSettings, SearXNGSettings
from agentfsm.errors import SearchError

HITS = [
    ("https://docs.python.org/3/library/asyncio.html", "asyncio", "Asynchronous <strong>I/O</strong>"),
    ("https://peps.python.org/pep-0492/", "PEP 492", "Coroutines with async and await syntax"),
]


async def searxng_without_json(request: web.Request) -> web.Response:
    """An instance whose settings.yml does not list `json` under `search: formats:`."""
    return web.Response(status=403, text="Forbidden")


async def brave(request: web.Request) -> web.Response:
    """The Brave Search API's shape: the key in a header, the hits at `web.results`."""
    if request.headers.get("X-Subscription-Token") != "demo-key":
        return web.Response(status=401, text="bad token")
    count = int(request.query["count"])
    results = [{"url": u, "title": t, "description": d} for u, t, d in HITS[:count]]
    return web.json_response({"query": {"original": request.query["q"]}, "web": {"results": results}})


async def main() -> None:
    app = web.Application()
    app.router.add_get("/searxng/search", searxng_without_json)
    app.router.add_get("/brave/res/v1/web/search", brave)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        settings = SearchSettings(
            backends=("searxng", "brave"),  # asked in this order
            searxng=SearXNGSettings(url=f"http://127.0.0.1:{port}/searxng"),
            brave=BraveSettings(url=f"http://127.0.0.1:{port}/brave"),  # the key: BRAVE_API_KEY
        )
        chain = build_search(settings, environ={"BRAVE_API_KEY": "demo-key"})
        assert chain is not None
        print("backends:", chain.names)

        for hit in await chain.search("python asyncio", num_results=5):
            print("-", hit.title, "|", hit.url, "|", hit.description)

        alone = build_search(SearchSettings(backends=("searxng",), searxng=settings.searxng))
        assert alone is not None
        try:
            await alone.search("python asyncio", num_results=5)
        except SearchError as exc:  # the message names the address; the fix is the last word
            print(f"{exc.backend} alone: HTTP {exc.status_code}; fix: {exc.fix}")

        # The browser tool's web_search: it lists the hits, then opens the first one if the
        # browser may reach its host. Only loopback hosts are allowed by default, so it is
        # refused before any browser starts.
        browser_use = BrowserUseTool(search=chain)
        observation = await browser_use.execute(action="web_search", query="python asyncio")
        print(observation.output)
    finally:
        await runner.cleanup()


asyncio.run(main())
