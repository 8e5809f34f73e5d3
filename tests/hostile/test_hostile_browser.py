"""A page on an allowed host that tries to reach addresses outside the list by ways other than a request.

Each test serves its hostile page on 127.0.0.1 (allowed) and puts a listener where the page aims:
UDP sockets on 127.0.0.2 and ::1 for WebRTC (any packet is a failure), and a server behind
`BLOCKED_HOST` for redirects. That name resolves to its server through the session's own
`resolve`, so Chromium's resolver would let the request through: only the route check stands
between the page and the secret the server holds, and the server must see no connection.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio
from browser_support import BLOCKED_HOST, Counter, Pages, listeners, require_chromium

from agentfsm.browser import BrowserSession, BrowserUseTool

pytestmark = [pytest.mark.http, pytest.mark.asyncio(loop_scope="module")]

SECRET = "the-secret-only-the-blocked-server-knows"
_LISTEN = 3.0
"""Seconds the UDP listeners wait for a packet after the page has loaded (ICE retries within 1 s)."""


@pytest.fixture(scope="module")
def secret() -> Iterator[Counter]:
    require_chromium()
    with Counter(f"<title>Secret</title><p>{SECRET}</p>".encode()).serving() as served:
        yield served


@pytest.fixture(scope="module")
def bare() -> Iterator[Counter]:
    """A blocked server on a bare loopback address no name leads to (no resolver rule applies)."""
    with Counter(host="127.0.0.2").serving() as served:
        yield served


@pytest.fixture(scope="module")
def site() -> Iterator[Pages]:
    with Pages().serving() as served:
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(secret: Counter, site: Pages) -> AsyncIterator[BrowserSession]:
    async with BrowserSession(resolve={BLOCKED_HOST: "127.0.0.1"}) as opened:
        yield opened


@pytest.fixture
def tool(session: BrowserSession) -> BrowserUseTool:
    return BrowserUseTool(session)


@pytest.fixture(autouse=True)
def _the_blocked_servers_are_never_reached(secret: Counter, bare: Counter) -> Iterator[None]:
    for server in (secret, bare):  # each test counts its own (a failed one's count stays its own)
        server.connections, server.requests = 0, []
    yield
    assert (secret.connections, secret.requests) == (0, [])
    assert (bare.connections, bare.requests) == (0, [])


async def _no_packets(tool: BrowserUseTool, site: Pages, path: str, page: Callable[[int, int], str]) -> None:
    """Serve `page(v4_port, v6_port)` at `path`, load it, and check that UDP listeners on 127.0.0.2
    and ::1 receive nothing while it runs."""
    with listeners("127.0.0.2", "::1") as (v4, v6):
        site.pages[path] = page(v4.port, v6.port)
        result = await tool(action="go_to_url", url=site.url(path))
        assert result.error is None, result.error
        await asyncio.sleep(_LISTEN)
        assert (v4.packets, v6.packets) == (0, 0)


async def test_webrtc_ice_servers_on_loopback_get_no_packet(tool: BrowserUseTool, site: Pages) -> None:
    await _no_packets(
        tool,
        site,
        "/stun",
        lambda v4, v6: (
            "<title>Call</title><script>"
            "const pc = new RTCPeerConnection({iceServers: ["
            f"{{urls: 'stun:127.0.0.2:{v4}'}},"
            f"{{urls: 'turn:[::1]:{v6}', username: 'u', credential: 'p'}}]}});"
            "pc.createDataChannel('d'); pc.createOffer().then(o => pc.setLocalDescription(o));"
            "</script>"
        ),
    )


async def test_webrtc_remote_candidates_on_loopback_get_no_connectivity_check(
    tool: BrowserUseTool, site: Pages
) -> None:
    """No ICE server at all: the page hands its connection a made-up answer whose candidates are
    the loopback addresses, and ICE would send its connectivity checks there."""
    await _no_packets(
        tool,
        site,
        "/candidates",
        lambda v4, v6: (
            "<title>Peer</title><script>(async () => {"
            "const pc = new RTCPeerConnection(); pc.createDataChannel('d');"
            "const offer = await pc.createOffer(); await pc.setLocalDescription(offer);"
            "await pc.setRemoteDescription({type: 'answer',"
            " sdp: offer.sdp.replace('a=setup:actpass', 'a=setup:active')});"
            f"for (const [n, address, port] of [[1, '127.0.0.2', {v4}], [2, '::1', {v6}]])"
            "  await pc.addIceCandidate({sdpMid: '0', candidate:"
            "    `candidate:${n} 1 udp 2122260223 ${address} ${port} typ host`});"
            "})().catch(() => {});</script>"
        ),
    )


def _blocked(secret: Counter, path: str = "/secret") -> str:
    return f"http://{BLOCKED_HOST}:{secret.port}{path}"


async def _refused_navigation(tool: BrowserUseTool, url: str) -> str:
    result = await tool(action="go_to_url", url=url)
    assert result.error is not None and "is not in [browser] allowed_hosts" in result.error, result
    assert SECRET not in (result.output or "") + result.error
    text = await tool.session.text()
    assert SECRET not in text
    assert SECRET not in await tool.state_prompt()
    return result.error


async def test_the_second_hop_of_a_redirect_is_checked(
    tool: BrowserUseTool, site: Pages, secret: Counter
) -> None:
    site.redirects["/one"] = "/two"
    site.redirects["/two"] = _blocked(secret)
    error = await _refused_navigation(tool, site.url("/one"))
    assert f"refused '{_blocked(secret)}'" in error


async def test_a_location_chromium_reads_as_another_host_is_checked_as_that_host(
    tool: BrowserUseTool, site: Pages, secret: Counter
) -> None:
    site.redirects["/backslash"] = f"/\\{BLOCKED_HOST}:{secret.port}/secret"
    error = await _refused_navigation(tool, site.url("/backslash"))
    assert f"refused '{_blocked(secret)}'" in error
    site.redirects["/slashes"] = f"///{BLOCKED_HOST}:{secret.port}/secret"  # also an authority to Chromium
    await _refused_navigation(tool, site.url("/slashes"))
    site.redirects["/tabbed"] = f" /\t/{BLOCKED_HOST}:{secret.port}/secret"  # Chromium drops spaces and tabs
    await _refused_navigation(tool, site.url("/tabbed"))


async def test_a_scripts_fetch_through_a_redirect_chain_is_checked_at_every_hop(
    tool: BrowserUseTool, site: Pages, secret: Counter
) -> None:
    """Not a navigation: a fetch from the page, whose answer the page would read and show."""
    site.redirects["/api"] = "/api-2"
    site.redirects["/api-2"] = f"/\\{BLOCKED_HOST}:{secret.port}/secret"
    site.pages["/reader"] = (
        "<title>Reader</title><p id=out>waiting</p><script>fetch('/api').then(r => r.text())"
        ".then(t => { document.getElementById('out').textContent = 'got ' + t; })"
        ".catch(e => { document.getElementById('out').textContent = 'failed'; });</script>"
    )
    result = await tool(action="go_to_url", url=site.url("/reader"))
    assert result.error is None, result.error
    for _ in range(50):
        text = await tool.session.text()
        if "waiting" not in text:
            break
        await asyncio.sleep(0.1)
    assert text == "failed"


async def test_an_allowed_redirect_chain_is_followed_to_its_end(tool: BrowserUseTool, site: Pages) -> None:
    site.pages["/end"] = "<title>End</title><p>the end of the chain</p>"
    site.redirects["/start-1"] = "/start-2"
    site.redirects["/start-2"] = "\\end"
    result = await tool(action="go_to_url", url=site.url("/start-1"))
    assert result.output == f"Navigated to {site.url('/end')}"
    assert await tool.session.text() == "the end of the chain"


async def test_a_shared_workers_requests_never_leave(
    tool: BrowserUseTool, site: Pages, secret: Counter
) -> None:
    """A shared worker is not routed: Chromium gives pages none, so its fetch cannot be made."""
    script = f"fetch('{_blocked(secret)}').catch(() => {{}});"
    site.pages["/shared"] = (
        "<title>Shared</title><p id=out>none</p><script>try {"
        f"new SharedWorker(URL.createObjectURL(new Blob([{script!r}]))); out.textContent = 'started';"
        "} catch (e) { out.textContent = 'no shared worker'; }</script>"
    )
    await tool(action="go_to_url", url=site.url("/shared"))
    await asyncio.sleep(1.5)
    assert await tool.session.text() == "no shared worker"


# -- sockets a script opens: routed in the page, not in a worker (Chromium's policy holds both) --------

_PROBE = (
    "const probe = (urls) => Promise.all(urls.map(u => new Promise(done => {"
    " setTimeout(() => done('timeout'), 3000);"
    " try { const s = new WebSocket(u); s.onmessage = e => done('said ' + e.data);"
    " s.onerror = () => done('error'); s.onclose = () => done('closed'); }"
    " catch (e) { done('refused'); } })))"
    ".then(r => r.join(' '));"
)
"""`probe(urls)`: a WebSocket to each of `urls`; what each did, in one line."""


_SPAWN = (
    "const spawn = (url, tell) => { try { const w = new Worker(url);"
    " w.onmessage = e => tell(e.data); w.onerror = () => tell('worker refused'); }"
    " catch (e) { tell('worker refused'); } };"
)
"""`spawn(url, tell)`: a worker from `url`, whose one message (or refusal) goes to `tell`."""


def _worker_script(urls: list[str]) -> str:
    return f"{_PROBE} probe({urls!r}).then(r => postMessage(r));"


def _blob(script: str) -> str:
    """A JavaScript expression: a ``blob:`` URL holding `script`."""
    return f"URL.createObjectURL(new Blob([{script!r}]))"


def _reporting(opener: str) -> str:
    """A page that runs `opener` (which must call `report(text)` once) and shows what it reported."""
    return (
        "<title>Sockets</title><p id=out>waiting</p><script>"
        "const report = (t) => { document.getElementById('out').textContent = 'done ' + t; };"
        f"{_PROBE}{_SPAWN}{opener}</script>"
    )


def _places(urls: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    """Each place a script can open a socket from: its page (and the headers it is served with)."""
    script = _worker_script(urls)
    # A worker a blob worker starts from a URL: its script is not routed, so it would run without
    # the route's policy.
    outer = f"{_SPAWN} spawn(ORIGIN + '/probe.js', postMessage);"
    data = f"'data:text/javascript,' + encodeURIComponent({script!r})"
    srcdoc = f"<script>{_SPAWN} spawn({data}, t => parent.postMessage(t, '*'));</script>"
    return {
        "page": (_reporting(f"probe({urls!r}).then(report);"), {}),
        "worker": (_reporting("spawn('/probe.js', report);"), {}),
        "nested-worker": (_reporting("spawn('/outer.js', report);"), {}),
        "worker-blob-worker": (_reporting("spawn('/blob-outer.js', report);"), {}),
        "blob-worker": (_reporting(f"spawn({_blob(script)}, report);"), {}),
        "blob-worker-nesting": (
            _reporting(
                f"spawn(URL.createObjectURL(new Blob([{outer!r}.replace('ORIGIN', "
                "JSON.stringify(location.origin))])), report);"
            ),
            {},
        ),
        "data-worker": (
            _reporting(f"spawn({data}, report);"),
            {},
        ),
        "iframe-srcdoc": (
            _reporting("onmessage = e => report(e.data);")
            + f"<iframe srcdoc='{html.escape(srcdoc, quote=True)}'></iframe>",
            {},
        ),
        "own-policy": (
            _reporting("spawn('/wide.js', report);"),
            {"content-security-policy": "connect-src *; worker-src * blob: data:"},
        ),
        "forged-meta": (
            '<meta http-equiv="Content-Security-Policy" content="connect-src *; worker-src * blob: data:">'
            + _reporting(f"spawn({data}, report);"),
            {},
        ),
    }


async def _reported(tool: BrowserUseTool, site: Pages, path: str) -> str:
    result = await tool(action="go_to_url", url=site.url(path))
    assert result.error is None, result.error
    for _ in range(100):
        text = await tool.session.text()
        if text.startswith("done"):
            return text
        await asyncio.sleep(0.1)
    raise AssertionError(f"the page at {path} never reported: {text!r}")


def _serve_places(site: Pages, urls: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    places = _places(urls)
    site.pages["/probe.js"] = _worker_script(urls)
    site.pages["/outer.js"] = f"{_SPAWN} spawn('/probe.js', postMessage);"
    site.pages["/blob-outer.js"] = f"{_SPAWN} spawn({_blob(_worker_script(urls))}, postMessage);"
    site.pages["/wide.js"] = _worker_script(urls)
    site.headers["/wide.js"] = {"content-security-policy": "connect-src *; worker-src * blob: data:"}
    return places


_PLACES = list(_places([]))


@pytest.mark.parametrize("place", _PLACES)
async def test_a_websocket_to_a_blocked_host_never_connects(
    tool: BrowserUseTool, site: Pages, secret: Counter, bare: Counter, place: str
) -> None:
    """To the blocked name (which `resolve` maps, so Chromium's resolver would let it through) and
    to a bare loopback address: whatever opens the socket, the blocked servers see no connection."""
    urls = [f"ws://{BLOCKED_HOST}:{secret.port}/secret", f"ws://127.0.0.2:{bare.port}/secret"]
    page, headers = _serve_places(site, urls)[place]
    site.pages[f"/{place}"], site.headers[f"/{place}"] = page, headers
    text = await _reported(tool, site, f"/{place}")
    assert "said" not in text and "timeout" not in text, text


@pytest.mark.parametrize("place", ["page", "worker", "worker-blob-worker", "data-worker", "own-policy"])
async def test_a_websocket_to_an_allowed_host_still_works(
    tool: BrowserUseTool, site: Pages, place: str
) -> None:
    urls = [f"ws://127.0.0.1:{site.port}/socket"]
    page, headers = _serve_places(site, urls)[place]
    site.pages[f"/ok-{place}"], site.headers[f"/ok-{place}"] = page, headers
    assert await _reported(tool, site, f"/ok-{place}") == "done said hello"


async def test_webtransport_to_a_blocked_host_sends_no_packet(tool: BrowserUseTool, site: Pages) -> None:
    """WebTransport is QUIC over UDP, which no route sees: from the page and from a worker, to the
    blocked name (mapped to 127.0.0.1) and to bare loopback addresses, not one packet is sent."""
    with listeners("127.0.0.1", "127.0.0.2", "::1") as (mapped, v4, v6):
        targets = [f"https://{BLOCKED_HOST}:{mapped.port}/", f"https://127.0.0.2:{v4.port}/"]
        targets.append(f"https://[::1]:{v6.port}/")
        opener = (
            f"const tried = {targets!r}.map(u => {{ try {{ return new WebTransport(u).ready"
            ".then(() => 'open', () => 'refused'); } catch (e) { return 'refused'; } });"
            "Promise.all(tried).then(r => tell(r.join(' ')));"
        )
        site.pages["/transport.js"] = f"const tell = postMessage; {opener}"
        site.pages["/transport"] = _reporting(
            f"const tell = (t) => spawn('/transport.js', w => report(t + ' ' + w)); {opener}"
        )
        assert await _reported(tool, site, "/transport") == "done " + " ".join(["refused"] * 6)
        await asyncio.sleep(1.0)  # QUIC would retry its first packet within a second
        assert (mapped.packets, v4.packets, v6.packets) == (0, 0, 0)
