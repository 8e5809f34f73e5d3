"""Web search: SearXNG, Brave and Tavily against servers of the suite's own on 127.0.0.1 that speak
each service's wire (its path, its parameters, its headers, its answer's shape), DuckDuckGo at the
``ddgs`` boundary, the fallback chain, the ``[search]`` section, and the command line's agents
answering ``web_search`` from a configured backend.

Each fake service answers from a script (the last answer repeats) and keeps every request it got,
so a test sees what was sent, how often, and when.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pytest_asyncio
from aiohttp import web
from pydantic import SecretStr

from agentfsm.browser.engines import (
    BraveSearch,
    DuckDuckGo,
    SearchChain,
    SearchSettings,
    SearXNG,
    Tavily,
    build_search,
)
from agentfsm.browser.search import NO_SEARCH, SearchResult
from agentfsm.cli.building import build_agent
from agentfsm.cli.config import Settings
from agentfsm.errors import ConfigError, MissingExtraError, SearchError
from agentfsm.model.retry import RetryPolicy
from agentfsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.http

KEY = "secret-token-4f9a0c"
"""The key the keyed services are given: it must reach them, and nothing else."""


def fast(max_attempts: int = 3, backoff_max: float = 10.0) -> RetryPolicy:
    """The search policy with short waits (a 429's Retry-After is still honoured up to `backoff_max`)."""
    return RetryPolicy(max_attempts=max_attempts, backoff_base=0.01, backoff_max=backoff_max)


# -- the fake services -------------------------------------------------------------------------


@dataclass
class Seen:
    """One request a fake service got."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    """JSON to send, or a `str` sent as it is (a page that is not JSON)."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


Script = Callable[[Seen], Answer]


@dataclass
class Service:
    """A search service on 127.0.0.1: its route answered by `answers` in turn (the last repeats)."""

    method: str
    path: str
    answers: list[Answer | Script]
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen = Seen(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=json.loads(raw) if raw else None,
            at=time.monotonic(),
        )
        self.seen.append(seen)
        planned = self.answers[min(len(self.seen), len(self.answers)) - 1]
        answer = planned(seen) if callable(planned) else planned
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if isinstance(answer.body, str):
            return web.Response(status=answer.status, text=answer.body, headers=answer.headers)
        return web.json_response(answer.body, status=answer.status, headers=answer.headers)


Serve = Callable[..., Awaitable[Service]]


@pytest_asyncio.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts fake services (``await serve("GET", "/search", Answer(...))``); stops them at the end."""
    runners: list[web.AppRunner] = []

    async def start(method: str, path: str, *answers: Answer | Script, extra: Any = None) -> Service:
        service = Service(method, path, list(answers))
        app = web.Application()
        app.router.add_route(method, path, service.handle)
        if extra is not None:
            extra(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        service.port = runner.addresses[0][1]
        return service

    yield start
    for runner in runners:
        await runner.cleanup()


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


HITS = [
    (f"https://docs.example.org/page{n}", f"Page {n}", f"What page {n} says about the query.")
    for n in range(1, 9)
]


def searxng_body(query: str, hits: list[tuple[str, str, str]] = HITS) -> dict[str, Any]:
    """A SearXNG instance's answer to ``/search?format=json`` (its fields, as it sends them)."""
    return {
        "query": query,
        "number_of_results": 0,
        "results": [
            {
                "url": url,
                "title": title,
                "content": content,
                "engine": "duckduckgo",
                "parsed_url": ["https", url.split("/")[2], "/" + url.split("/", 3)[3], "", "", ""],
                "template": "default.html",
                "engines": ["duckduckgo", "brave"],
                "positions": [n],
                "score": 2.0 / n,
                "category": "general",
            }
            for n, (url, title, content) in enumerate(hits, 1)
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": [],
    }


def brave_body(query: str, hits: list[tuple[str, str, str]] = HITS) -> dict[str, Any]:
    """The Brave Search API's answer (``web.results``; the matched words in ``<strong>``)."""
    return {
        "type": "search",
        "query": {"original": query, "show_strict_warning": False, "more_results_available": True},
        "mixed": {"type": "mixed", "main": [{"type": "web", "index": n} for n in range(len(hits))]},
        "web": {
            "type": "search",
            "results": [
                {
                    "type": "search_result",
                    "title": title.replace("Page", "<strong>Page</strong>"),
                    "url": url,
                    "description": f"{content} &amp; <strong>more</strong>",
                    "is_source_local": False,
                    "is_source_both": False,
                    "language": "en",
                    "family_friendly": True,
                    "meta_url": {
                        "scheme": "https",
                        "netloc": url.split("/")[2],
                        "path": url.split("/", 3)[3],
                    },
                }
                for url, title, content in hits
            ],
            "family_friendly": True,
        },
    }


def tavily_body(query: str, hits: list[tuple[str, str, str]] = HITS) -> dict[str, Any]:
    """Tavily's answer to ``POST /search``."""
    return {
        "query": query,
        "follow_up_questions": None,
        "answer": None,
        "images": [],
        "results": [
            {"url": url, "title": title, "content": content, "score": 0.9, "raw_content": None}
            for url, title, content in hits
        ],
        "response_time": 0.42,
        "request_id": "123e4567-e89b-12d3-a456-426614174111",
    }


def brave_counting(seen: Seen) -> Answer:
    """Brave gives `count` hits, as the service does."""
    return Answer(body=brave_body(seen.query["q"], HITS[: int(seen.query["count"])]))


def tavily_counting(seen: Seen) -> Answer:
    return Answer(body=tavily_body(seen.body["query"], HITS[: seen.body["max_results"]]))


EXPECTED = [SearchResult(url=url, title=title, description=content) for url, title, content in HITS]


async def searxng(serve: Serve, *answers: Answer | Script, **kwargs: Any) -> tuple[Service, SearXNG]:
    service = await serve("GET", "/search", *answers)
    return service, SearXNG(url=service.url, policy=kwargs.pop("policy", fast()), **kwargs)


async def brave(serve: Serve, *answers: Answer | Script, **kwargs: Any) -> tuple[Service, BraveSearch]:
    service = await serve("GET", "/res/v1/web/search", *answers)
    return service, BraveSearch(api_key=KEY, url=service.url, policy=kwargs.pop("policy", fast()), **kwargs)


async def tavily(serve: Serve, *answers: Answer | Script, **kwargs: Any) -> tuple[Service, Tavily]:
    service = await serve("POST", "/search", *answers)
    return service, Tavily(api_key=KEY, url=service.url, policy=kwargs.pop("policy", fast()), **kwargs)


MAKERS = {"searxng": searxng, "brave": brave, "tavily": tavily}
BODIES = {"searxng": searxng_body, "brave": brave_body, "tavily": tavily_body}


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


# -- each service's wire -----------------------------------------------------------------------


async def test_searxng_asks_its_json_api_and_keeps_num_results(serve: Serve) -> None:
    service, backend = await searxng(serve, Answer(body=searxng_body("python release")))
    found = await backend.search("python release", num_results=3)
    assert found == EXPECTED[:3]  # the instance takes no count: the first three of its eight are kept
    (seen,) = service.seen
    assert (seen.method, seen.path, seen.query) == (
        "GET",
        "/search",
        {"q": "python release", "format": "json"},
    )
    assert "X-Subscription-Token" not in seen.headers and "Authorization" not in seen.headers


async def test_a_searxng_without_the_json_format_is_said_with_how_to_enable_it(serve: Serve) -> None:
    # What SearXNG answers a format its settings.yml does not list.
    forbidden = Answer(status=403, body="<html><title>403 Forbidden</title></html>")
    service, backend = await searxng(serve, forbidden)
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    message = one_line(raised.value)
    assert message.startswith(f"searxng: HTTP 403 from {service.url}/search: <html>")
    assert "(after 1 attempt); let the instance answer JSON: list json under `search: formats:`" in message
    assert len(service.seen) == 1


async def test_brave_sends_its_token_and_count_and_reads_web_results(serve: Serve) -> None:
    service, backend = await brave(serve, brave_counting)
    found = await backend.search("python release", num_results=3)
    assert [r.url for r in found] == [url for url, _, _ in HITS[:3]]
    assert found[0] == SearchResult(
        url=HITS[0][0], title="Page 1", description="What page 1 says about the query. & more"
    )  # Brave's <strong> marks and entities are gone
    (seen,) = service.seen
    assert (seen.method, seen.path, seen.query) == (
        "GET",
        "/res/v1/web/search",
        {"q": "python release", "count": "3"},
    )
    assert seen.headers["X-Subscription-Token"] == KEY and seen.headers["Accept"] == "application/json"
    assert "Authorization" not in seen.headers


async def test_brave_asks_for_at_most_twenty(serve: Serve) -> None:
    service, backend = await brave(serve, Answer(body=brave_body("q")))
    await backend.search("q", num_results=50)
    assert service.seen[0].query["count"] == "20"


async def test_a_brave_answer_without_web_results_found_nothing(serve: Serve) -> None:
    nothing = {"type": "search", "query": {"original": "zxqv"}, "mixed": {"type": "mixed", "main": []}}
    service, backend = await brave(serve, Answer(body=nothing))
    assert await backend.search("zxqv", num_results=5) == []
    assert len(service.seen) == 1


async def test_tavily_posts_its_query_with_the_bearer_key(serve: Serve) -> None:
    service, backend = await tavily(serve, tavily_counting)
    found = await backend.search("python release", num_results=4)
    assert found == EXPECTED[:4]
    (seen,) = service.seen
    assert (seen.method, seen.path) == ("POST", "/search")
    assert seen.body == {"query": "python release", "max_results": 4}
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.headers["Content-Type"].startswith("application/json")
    assert KEY not in json.dumps(seen.body) and not seen.query  # the key travels in the header only


@pytest.mark.parametrize("name", ["brave", "tavily"])
async def test_a_refused_key_is_not_retried_and_never_shown(
    serve: Serve, name: str, agentfsm_events: Any
) -> None:
    echoed = Answer(status=401, body={"error": {"detail": f"The token {KEY} is not valid."}})
    service, backend = await MAKERS[name](serve, echoed)
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    message = one_line(raised.value)
    assert f"{name}: HTTP 401 from {service.url}" in message and "<hidden>" in message
    what, variable = {"brave": ("subscription token", "BRAVE_API_KEY"), "tavily": ("key", "TAVILY_API_KEY")}[
        name
    ]
    assert message.endswith(f"(after 1 attempt); check the {what}: [search.{name}] api_key, or {variable}")
    assert len(service.seen) == 1
    assert KEY not in message and KEY not in repr(backend) and KEY not in repr(vars(backend))
    assert KEY not in repr(agentfsm_events.events)


# -- faults ------------------------------------------------------------------------------------


async def test_a_429_waits_its_retry_after_then_succeeds(serve: Serve, agentfsm_events: Any) -> None:
    error = {"type": "ErrorResponse", "error": {"code": "RATE_LIMITED"}}
    limited = Answer(status=429, body=error, headers={"Retry-After": "1"})
    service, backend = await brave(serve, limited, Answer(body=brave_body("q")))
    found = await backend.search("q", num_results=2)
    assert found == [SearchResult(url=u, title=t, description=f"{c} & more") for u, t, c in HITS[:2]]
    first, second = service.seen
    assert second.at - first.at >= 0.95  # the second try waited the second it was asked to
    (retry,) = agentfsm_events.named("search_retry")
    assert (retry["backend"], retry["attempt"], retry["wait_s"], retry["retry_after_s"]) == (
        "brave",
        1,
        1.0,
        1.0,
    )
    assert "HTTP 429" in str(retry["error"])
    assert KEY not in repr(agentfsm_events.events)


async def test_a_retry_after_beyond_backoff_max_is_cut_to_it(serve: Serve) -> None:
    limited = Answer(status=429, body={"detail": "slow down"}, headers={"Retry-After": "120"})
    service, backend = await tavily(serve, limited, tavily_counting, policy=fast(backoff_max=0.2))
    started = time.monotonic()
    assert len(await backend.search("q", num_results=1)) == 1
    assert time.monotonic() - started < 5
    assert 0.18 <= service.seen[1].at - service.seen[0].at < 2


async def test_a_rate_limit_to_the_last_attempt_says_so_with_the_fix(serve: Serve) -> None:
    limited = Answer(status=429, body={"detail": "slow down"}, headers={"Retry-After": "0"})
    service, backend = await tavily(serve, limited, policy=fast(max_attempts=2))
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=1)
    message = one_line(raised.value)
    assert message.startswith(f"tavily: HTTP 429 from {service.url}/search")
    assert "(after 2 attempts); the service's rate limit: wait, raise [search] backoff_max" in message
    assert raised.value.status_code == 429 and len(service.seen) == 2


@pytest.mark.parametrize("name", ["searxng", "brave", "tavily"])
async def test_server_errors_are_retried_until_one_succeeds(serve: Serve, name: str) -> None:
    failing = [Answer(status=503, body="<h1>Service Unavailable</h1>"), Answer(status=502, body={"e": 1})]
    service, backend = await MAKERS[name](serve, *failing, Answer(body=BODIES[name]("q")))
    found = await backend.search("q", num_results=2)
    assert [r.url for r in found] == [HITS[0][0], HITS[1][0]]
    assert len(service.seen) == 3


async def test_server_errors_to_the_last_attempt_end_in_one_line_with_the_fix(serve: Serve) -> None:
    service, backend = await searxng(serve, Answer(status=500, body="Internal Server Error"))
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    assert one_line(raised.value) == (
        f"searxng: HTTP 500 from {service.url}/search: Internal Server Error (after 3 attempts); "
        "the service is failing: try later, or list another backend after it in [search] backends"
    )
    assert len(service.seen) == 3


@pytest.mark.parametrize(
    ("name", "body", "said"),
    [
        ("searxng", "<!DOCTYPE html><html>a proxy's page</html>", "is not JSON: <!DOCTYPE html>"),
        ("searxng", {"query": "q", "answers": []}, "the answer has no list at `results` (found NoneType)"),
        (
            "brave",
            {"type": "search", "web": {"type": "search", "results": "none"}},
            "no list at `web.results`",
        ),
        ("tavily", ["not", "an", "object"], "the answer has no list at `results`"),
    ],
)
async def test_a_malformed_answer_is_not_retried(serve: Serve, name: str, body: Any, said: str) -> None:
    service, backend = await MAKERS[name](serve, Answer(body=body))
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    message = one_line(raised.value)
    assert message.startswith(f"{name}: ") and said in message
    assert message.endswith(f"(after 1 attempt); check [search.{name}] url: it must be the service's address")
    assert len(service.seen) == 1


@pytest.mark.parametrize(("status", "fix"), [(400, "refused the query as sent"), (404, "no search at that")])
async def test_a_4xx_other_than_429_is_not_retried(serve: Serve, status: int, fix: str) -> None:
    service, backend = await tavily(serve, Answer(status=status, body={"detail": {"error": "bad query"}}))
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    message = one_line(raised.value)
    assert f"HTTP {status} from {service.url}/search" in message and "(after 1 attempt)" in message
    assert fix in message and raised.value.status_code == status
    assert len(service.seen) == 1


async def test_a_refused_connection_is_tried_twice_and_names_the_address() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    backend = SearXNG(url=url, policy=fast(max_attempts=5))
    started = time.monotonic()
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    assert time.monotonic() - started < 5
    message = one_line(raised.value)
    assert message.startswith(
        f"searxng: cannot connect to {url}/search (connection refused) (after 2 attempts"
    )
    assert message.endswith("; check [search.searxng] url and that the service is running")


async def test_a_service_that_does_not_answer_in_time_is_cut_at_its_timeout(serve: Serve) -> None:
    service, backend = await searxng(
        serve, Answer(body=searxng_body("q"), delay=2), timeout=0.2, policy=fast(max_attempts=2)
    )
    started = time.monotonic()
    with pytest.raises(SearchError) as raised:
        await backend.search("q", num_results=5)
    assert time.monotonic() - started < 1.5
    message = one_line(raised.value)
    assert message.startswith(f"searxng: no answer from {service.url}/search within 0.2 s (after 2 attempts)")
    assert message.endswith("check [search.searxng] url, or raise [search.searxng] timeout")
    assert len(service.seen) == 2


# -- the chain ---------------------------------------------------------------------------------


async def test_empty_results_hand_the_query_to_the_next_backend(serve: Serve) -> None:
    empty, first = await searxng(serve, Answer(body=searxng_body("q", [])))
    service, second = await brave(serve, brave_counting)
    chain = SearchChain([first, second])
    assert chain.names == ["searxng", "brave"]
    found = await chain.search("q", num_results=2)
    assert [r.url for r in found] == [HITS[0][0], HITS[1][0]]
    assert (len(empty.seen), len(service.seen)) == (1, 1) and empty.seen[0].at <= service.seen[0].at


async def test_a_failing_backend_hands_over_and_is_logged(serve: Serve, agentfsm_events: Any) -> None:
    _, first = await searxng(serve, Answer(status=500, body="down"), policy=fast(max_attempts=1))
    _, second = await tavily(serve, tavily_counting)
    found = await SearchChain([first, second]).search("q", num_results=1)
    assert found == EXPECTED[:1]
    (handed,) = agentfsm_events.named("search_fallback")
    assert handed["backend"] == "searxng" and "HTTP 500" in str(handed["error"])


async def test_when_none_answers_the_last_failure_is_said_in_one_line(serve: Serve) -> None:
    refused = SearXNG(url=f"http://127.0.0.1:{closed_port()}", policy=fast())
    _, empty = await brave(serve, Answer(body=brave_body("q", [])))
    service, last = await tavily(serve, Answer(status=401, body={"detail": {"error": "Unauthorized"}}))
    with pytest.raises(SearchError) as raised:
        await SearchChain([refused, empty, last]).search("q", num_results=3)
    assert one_line(raised.value) == (
        f'tavily: HTTP 401 from {service.url}/search: {{"detail": {{"error": "Unauthorized"}}}} '
        "(after 1 attempt); check the key: [search.tavily] api_key, or TAVILY_API_KEY "
        "(also asked: searxng failed, brave found nothing)"
    )
    assert raised.value.backend == "tavily"


async def test_nothing_found_by_any_backend_is_no_results(serve: Serve) -> None:
    _, first = await searxng(serve, Answer(body=searxng_body("q", [])))
    _, second = await tavily(serve, Answer(body=tavily_body("q", [])))
    assert await SearchChain([first, second]).search("q", num_results=3) == []


# -- DuckDuckGo, at the ddgs boundary ----------------------------------------------------------
#
# ddgs reads DuckDuckGo's own pages, at addresses of its own: it cannot be pointed at a server of
# the suite's. These tests replace its `DDGS` class with a fake that answers as ddgs 9 does (a
# list of {"href", "title", "body"}, or its exceptions), and check what the backend asks it.


class FakeDDGS:
    """`ddgs.DDGS` as the backend uses it: `DDGS(timeout=...).text(query, **kwargs)`."""

    calls: ClassVar[list[dict[str, Any]]] = []
    outcomes: ClassVar[list[Any]] = []
    """What each call does in turn (the last repeats): a list of hits returned, or an exception raised."""

    def __init__(self, timeout: int | None = 5) -> None:
        self.timeout = timeout

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        on_main = threading.current_thread() is threading.main_thread()
        FakeDDGS.calls.append({"query": query, "timeout": self.timeout, "main": on_main, **kwargs})
        outcome = FakeDDGS.outcomes.pop(0) if len(FakeDDGS.outcomes) > 1 else FakeDDGS.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return list(outcome)


@pytest.fixture
def fake_ddgs(monkeypatch: pytest.MonkeyPatch) -> type[FakeDDGS]:
    import ddgs

    FakeDDGS.calls, FakeDDGS.outcomes = [], []
    monkeypatch.setattr(ddgs, "DDGS", FakeDDGS)
    return FakeDDGS


DDG_HITS = [{"title": title, "href": url, "body": content} for url, title, content in HITS]


async def test_duckduckgo_asks_ddgs_off_the_event_loop(fake_ddgs: type[FakeDDGS]) -> None:
    fake_ddgs.outcomes = [DDG_HITS[:3]]
    backend = DuckDuckGo(region="de-de", safesearch="off", timeout=2.5, policy=fast())
    assert await backend.search("python release", num_results=3) == EXPECTED[:3]
    assert fake_ddgs.calls == [
        {
            "query": "python release",
            "timeout": 3,
            "main": False,
            "max_results": 3,
            "region": "de-de",
            "safesearch": "off",
            "backend": "duckduckgo",
        }
    ]


async def test_ddgs_finding_nothing_is_no_results_and_its_rate_limit_is_retried(
    fake_ddgs: type[FakeDDGS],
) -> None:
    from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

    fake_ddgs.outcomes = [DDGSException("No results found.")]
    assert await DuckDuckGo(policy=fast()).search("zxqv", num_results=5) == []

    fake_ddgs.calls, fake_ddgs.outcomes = (
        [],
        [RatelimitException("202 Ratelimit"), TimeoutException("t"), DDG_HITS],
    )
    assert await DuckDuckGo(policy=fast()).search("q", num_results=1) == EXPECTED[:1]
    assert len(fake_ddgs.calls) == 3

    fake_ddgs.calls, fake_ddgs.outcomes = (
        [],
        [DDGSException("https://html.duckduckgo.com/html 403 Forbidden")],
    )
    with pytest.raises(SearchError) as raised:
        await DuckDuckGo(policy=fast()).search("q", num_results=1)
    assert one_line(raised.value) == (
        "duckduckgo: ddgs failed: https://html.duckduckgo.com/html 403 Forbidden (after 1 attempt); "
        "DuckDuckGo's pages could not be read: try later, or list another backend after it in "
        "[search] backends"
    )
    assert len(fake_ddgs.calls) == 1


async def test_without_ddgs_duckduckgo_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ddgs", None)  # as if it were not installed
    with pytest.raises(MissingExtraError) as raised:
        build_search(SearchSettings(backends=("duckduckgo",)))
    assert one_line(raised.value) == (
        "[search] backends names 'duckduckgo': DuckDuckGo needs the ddgs package: "
        "pip install 'agentfsm[search]'"
    )
    with pytest.raises(MissingExtraError, match="pip install 'agentfsm"):
        await DuckDuckGo(policy=fast()).search("q", num_results=1)


# -- the [search] section ----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.usefixtures("clean_env")
def test_search_is_read_from_the_configuration_file(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agentfsm.toml",
        f"""
[search]
backends = ["searxng", "brave", "tavily", "duckduckgo"]
max_attempts = 4
backoff_max = 2.5

[search.searxng]
url = "http://127.0.0.1:8888/"
timeout = 3

[search.brave]
api_key = "{KEY}"
url = "http://127.0.0.1:9001"

[search.tavily]
api_key = "tvly-{KEY}"

[search.duckduckgo]
region = "uk-en"
""",
    )
    settings = Settings.load(config)
    search = settings.search
    assert search.backends == ("searxng", "brave", "tavily", "duckduckgo")
    assert (search.max_attempts, search.backoff_max) == (4, 2.5)
    assert (search.searxng.url, search.searxng.timeout) == ("http://127.0.0.1:8888", 3.0)
    assert search.brave.url == "http://127.0.0.1:9001" and search.tavily.url == "https://api.tavily.com"
    assert search.brave.api_key == SecretStr(KEY) and search.duckduckgo.region == "uk-en"
    for shown in (repr(settings), settings.model_dump_json(), repr(settings.model_dump(mode="json"))):
        assert KEY not in shown
    chain = build_search(search, environ={})
    assert isinstance(chain, SearchChain) and chain.names == list(search.backends)
    made = chain.backends
    assert isinstance(made[0], SearXNG) and made[0].timeout == 3.0 and made[0].policy.max_attempts == 4
    assert isinstance(made[1], BraveSearch) and made[1].url == "http://127.0.0.1:9001"
    assert made[1].policy is not made[0].policy and made[1].policy.backoff_max == 2.5
    assert isinstance(made[2], Tavily) and made[2].api_key.get_secret_value() == f"tvly-{KEY}"
    assert isinstance(made[3], DuckDuckGo) and made[3].region == "uk-en"
    assert KEY not in repr(chain) and KEY not in repr([vars(b) for b in made])


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[search]\nbackends = ["searxng", "google"]',
            "[search] backends = ['searxng', 'google'] (in {config}): Value error, unknown search backend "
            "'google': choose from searxng, brave, tavily, duckduckgo",
        ),
        ('[search]\nbackends = ["brave", "brave"]', "brave named twice: name each backend once"),
        (
            "[search.brave]\ntoken = 'x'",
            "unknown key 'token' in [search.brave] (in {config}); allowed: timeout, url",
        ),
        ("[search]\nengine = 'Google'", "unknown key 'engine' in [search] (in {config}); allowed: backends"),
        ("[search.searxng]\nurl = 'localhost:8888'", "is not a service's address: give its http(s) base URL"),
        (
            "[search.tavily]\ntimeout = 0",
            "[search.tavily] timeout = 0 (in {config}): Input should be greater",
        ),
        ("[search.brave]\napi_key = [1]", "[search.brave] api_key = <hidden>"),
        ("[search]\nmax_attempts = 0", "[search] max_attempts = 0"),
    ],
)
def test_a_wrong_search_setting_is_refused_in_one_line(tmp_path: Path, toml: str, expected: str) -> None:
    config = write(tmp_path / "bad.toml", toml)
    with pytest.raises(ConfigError) as raised:
        Settings.load(config)
    assert expected.format(config=config) in one_line(raised.value)


def test_a_key_comes_from_the_table_the_services_variable_or_agentfsms(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = SearchSettings(backends=("tavily", "brave"))
    with pytest.raises(ConfigError) as raised:
        build_search(wanted, environ={})
    assert one_line(raised.value) == (
        "[search] backends names 'tavily', which needs an API key: set [search.tavily] api_key, "
        "TAVILY_API_KEY, or AGENTFSM_SEARCH__TAVILY__API_KEY"
    )
    chain = build_search(wanted, environ={"TAVILY_API_KEY": "from-tavily", "BRAVE_API_KEY": "from-brave"})
    assert chain is not None
    assert [b.api_key.get_secret_value() for b in chain.backends] == ["from-tavily", "from-brave"]  # type: ignore[attr-defined]

    monkeypatch.setenv("AGENTFSM_SEARCH__BACKENDS", '["brave"]')
    monkeypatch.setenv("AGENTFSM_SEARCH__BRAVE__API_KEY", "from-agentfsm")
    monkeypatch.setenv("BRAVE_API_KEY", "from-brave")
    loaded = build_search(Settings.load().search)
    assert loaded is not None
    (only,) = loaded.backends
    assert only.api_key.get_secret_value() == "from-agentfsm"  # type: ignore[attr-defined]


async def test_nothing_is_contacted_when_no_backend_is_configured(clean_env: Path, serve: Serve) -> None:
    service = await serve("GET", "/search", Answer(body=searxng_body("q")))
    write(clean_env / "agentfsm.toml", f'[search.searxng]\nurl = "{service.url}"\n')  # a table, no backends
    settings = Settings.load()
    assert settings.search.backends == () and build_search(settings.search) is None
    agent = build_agent("browser", settings, ScriptedLLM([]), {}, terminal=False)
    try:
        assert agent.browser_tool.search is None
        searched = await agent.browser_tool(action="web_search", query="anything")
        assert searched.error == NO_SEARCH
    finally:
        await agent.aclose()
    assert service.seen == [] and agent.browser.workdir is None


# -- the command line's agents -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["browser", "manus"])
async def test_the_command_lines_agents_search_the_configured_backend(
    clean_env: Path, serve: Serve, name: str
) -> None:
    """`build_agent` (what `agentfsm run` calls) gives Manus and the browser agent the configured
    chain; its web_search answers from the local SearXNG. The hits are on hosts the browser may not
    reach, so the results are listed and the first is not opened: no browser starts."""
    down = f"http://127.0.0.1:{closed_port()}"
    service = await serve("GET", "/search", Answer(body=searxng_body("python release")))
    write(
        clean_env / "agentfsm.toml",
        f"""
[sandbox]
mode = "local"

[search]
backends = ["brave", "searxng"]

[search.brave]
url = "{down}"
api_key = "{KEY}"

[search.searxng]
url = "{service.url}"
""",
    )
    agent = build_agent(name, Settings.load(), ScriptedLLM([]), {}, terminal=False)
    try:
        result = await agent.browser_tool(action="web_search", query="python release")
    finally:
        await agent.aclose()
    assert not result.error, result.error
    output = str(result.output)
    assert output.startswith(
        "Results for 'python release':\n"
        "1. Page 1 - https://docs.example.org/page1\n   What page 1 says about the query.\n"
        "2. Page 2 - https://docs.example.org/page2\n"
    )
    assert "5. Page 5" in output and "6. Page 6" not in output  # the tool asks for five
    assert output.endswith(
        "\nThe first was not opened: refused 'https://docs.example.org/page1': its host 'docs.example.org' "
        "is not in [browser] allowed_hosts (127.0.0.1, localhost); add it there to allow it"
    )
    assert len(service.seen) == 1 and agent.browser.workdir is None and result.base64_image is None


async def test_the_durable_workers_agents_search_the_configured_backends(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentfsm worker`'s built-in agents are built with the same chain; a backend without its key
    stops the worker as it starts, not at its first run."""
    from agentfsm.cli.durable import _configured
    from agentfsm.runs.spec import AgentSpec

    llm = '[llm]\nmodel = "openai/m"\napi_base = "http://127.0.0.1:9/v1"\napi_key = "k"\n\n'
    write(clean_env / "agentfsm.toml", llm + '[search]\nbackends = ["searxng", "tavily"]\n')
    with pytest.raises(ConfigError, match=r"^\[search\] backends names 'tavily', which needs an API key"):
        _configured("manus", None)
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    for name in ("browser", "manus"):
        agent: Any = _configured(name, None)(AgentSpec(agent=name))
        try:
            chain = agent.browser_tool.search
            assert isinstance(chain, SearchChain) and chain.names == ["searxng", "tavily"]
        finally:
            await agent.aclose()


async def test_a_browser_agents_run_answers_from_a_local_searxng(clean_env: Path, serve: Serve) -> None:
    """A whole run in the system's Chromium: the model searches, the tool lists the hits and opens the
    first (a page of the same local server), and the model's next request carries both."""
    from browser_support import require_chromium

    require_chromium()

    async def page(request: web.Request) -> web.Response:
        text = "<html><title>Release</title><h1>Python 3.99 is out</h1></html>"
        return web.Response(text=text, content_type="text/html")

    def hit(seen: Seen) -> Answer:
        base = f"http://127.0.0.1:{service.port}"
        return Answer(body=searxng_body(seen.query["q"], [(f"{base}/page", "Python 3.99", "It is out.")]))

    service = await serve("GET", "/search", hit, extra=lambda app: app.router.add_get("/page", page))
    write(
        clean_env / "agentfsm.toml",
        f'[search]\nbackends = ["searxng"]\n\n[search.searxng]\nurl = "{service.url}"\n',
    )
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("browser_use", {"action": "web_search", "query": "latest python"})]),
            reply("Python 3.99 is out.", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with build_agent("browser", Settings.load(), llm, {}, terminal=False) as agent:
        result = await agent.run("What is the latest Python?")
    assert result.stop_reason == "terminated", result.error
    (observation,) = [m.content for m in llm.requests[1].messages if m.role == "tool"]
    assert observation == (
        "Observed output of cmd `browser_use` executed:\n"
        f"Results for 'latest python':\n1. Python 3.99 - {service.url}/page\n   It is out.\n"
        f"Navigated to the first: {service.url}/page"
    )
    assert service.seen[0].query == {"q": "latest python", "format": "json"}
    # the page it opened is in the state the next request carries
    system = "\n".join(str(m.content) for m in llm.requests[1].system_msgs)
    assert 'heading "Python 3.99 is out"' in system


def test_the_configuration_loads_no_backend_nor_its_client() -> None:
    """The command line reads `[search]` on every start: only the settings are imported with it."""
    import subprocess

    heavy = ("agentfsm.browser.engines.request", "agentfsm.browser.engines.chain", "aiohttp", "ddgs")
    code = f"import sys, agentfsm.cli.config; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        (
            '[search]\nbackends = ["brave"]\n',
            "agentfsm: error: [search] backends names 'brave', which needs an API key: set [search.brave] "
            "api_key, BRAVE_API_KEY, or AGENTFSM_SEARCH__BRAVE__API_KEY\n",
        ),
        (
            '[search]\nbackends = ["bing"]\n',
            "unknown search backend 'bing': choose from searxng, brave, tavily",
        ),
    ],
)
def test_a_search_the_command_line_cannot_make_stops_it_in_one_line(
    clean_env: Path, toml: str, said: str
) -> None:
    import os
    import subprocess

    write(clean_env / "agentfsm.toml", toml)
    env = {k: v for k, v in os.environ.items() if k not in ("BRAVE_API_KEY", "TAVILY_API_KEY")}
    command = [sys.executable, "-m", "agentfsm", "run", "find it", "--agent", "browser"]
    model = ["--model", "openai/m", "--api-base", f"http://127.0.0.1:{closed_port()}/v1", "--api-key", "k"]
    done = subprocess.run([*command, *model], capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert (
        done.stderr.count("\n") == 1 and done.stderr.startswith("agentfsm: error: ") and said in done.stderr
    )
