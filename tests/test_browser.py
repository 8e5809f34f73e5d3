"""The browser tool against the suite's pages on 127.0.0.1, in the system's Chromium.

One browser serves the module (a start costs about half a second); the tests that kill it, close
it or cancel its start make their own. `BLOCKED_HOST` resolves to the counting server through the
session's own `resolve`, so only the allowlist stands between the page and it: that server must
see no connection at all.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from browser_support import BLOCKED_HOST, Counter, Site, browser_leftovers, chromium_pid, require_chromium

from agentfsm import ToolResult
from agentfsm.browser import BrowserSession, BrowserSettings, BrowserUseTool, SearchResult
from agentfsm.browser.search import NO_SEARCH
from agentfsm.testing import ScriptedLLM, reply

pytestmark = [pytest.mark.http, pytest.mark.asyncio(loop_scope="module")]

RESOLVE = {BLOCKED_HOST: "127.0.0.1"}


@pytest.fixture(scope="module")
def counter() -> Iterator[Counter]:
    require_chromium()
    with Counter().serving() as served:
        yield served


@pytest.fixture(scope="module")
def site(counter: Counter) -> Iterator[Site]:
    with Site(counter.port).serving() as served:
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(site: Site) -> AsyncIterator[BrowserSession]:
    async with BrowserSession(resolve=RESOLVE) as opened:
        yield opened
    assert opened.workdir is None


@pytest.fixture
def tool(session: BrowserSession) -> BrowserUseTool:
    return BrowserUseTool(session)


@pytest.fixture(autouse=True)
def _nothing_reaches_the_blocked_host(counter: Counter) -> Iterator[None]:
    yield
    assert (counter.connections, counter.requests) == (0, [])


async def act(tool: BrowserUseTool, **arguments: Any) -> ToolResult:
    result = await tool(**arguments)
    assert not result.error, result.error
    return result


async def ref_of(tool: BrowserUseTool, text: str) -> str:
    """The ref of the one snapshot line that mentions `text` (through the `find` action)."""
    found = await act(tool, action="find", text=text)
    lines = str(found.output).splitlines()[1:]
    assert len(lines) == 1, lines
    return lines[0].split("[ref=")[1].split("]")[0]


# -- actions ---------------------------------------------------------------------------


async def test_go_to_url_reports_where_it_landed_with_a_jpeg_of_it(tool: BrowserUseTool, site: Site) -> None:
    result = await act(tool, action="go_to_url", url=site.url("/"))
    assert result.output == f"Navigated to {site.url('/')}"
    assert result.base64_image is not None
    assert base64.b64decode(result.base64_image)[:3] == b"\xff\xd8\xff"  # a JPEG


async def test_a_link_a_form_and_a_dropdown(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/"))
    await act(tool, action="click_element", ref=await ref_of(tool, 'link "The form"'))
    state = await tool.session.state()
    assert (state.url, state.title) == (site.url("/form"), "Form")
    name, colour = await ref_of(tool, 'textbox "Name"'), await ref_of(tool, 'combobox "Colour"')
    typed = await act(tool, action="input_text", ref=name, text="Ada")
    assert typed.output == f"Input 'Ada' into element {name}"
    options = await act(tool, action="get_dropdown_options", ref=colour)
    assert options.output == f"Options of {colour}:\n0: 'Red' (selected)\n1: 'Green'\n2: 'Blue'"
    assert options.base64_image is None  # a read: nothing changed to show
    chosen = await act(tool, action="select_dropdown_option", ref=colour, text="Green")
    assert chosen.output == f"Selected option 'Green' of {colour}"
    await act(tool, action="click_element", ref=await ref_of(tool, 'button "Send"'))
    found = await act(tool, action="find", text="Hello")
    assert "Hello Ada, you chose Green" in str(found.output)
    back = await act(tool, action="go_back")
    assert back.output == f"Navigated back to {site.url('/form')}"


async def test_refs_stay_valid_across_state_reads_and_a_fill(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/form"))
    first = await tool.session.state()
    again = await tool.session.state()
    assert first.refs == again.refs and first.snapshot == again.snapshot
    name = await ref_of(tool, 'textbox "Name"')
    await act(tool, action="input_text", ref=name, text="Grace")
    after = await tool.session.state()
    assert name in after.refs and f'textbox "Name" [active] [ref={name}]: Grace' in after.snapshot
    await act(tool, action="input_text", ref=name, text="Hopper")  # the ref of the first read still acts
    assert "Hopper" in (await tool.session.state()).snapshot


async def test_the_state_prompt_marks_the_refs_new_on_the_page(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/form"))
    first = await tool.state_prompt()
    assert first.startswith(f"Current URL: {site.url('/form')}\nTitle: Form\n[Start of page]")
    assert "* " not in first  # a new page: nothing to compare with
    await tool.session.run(
        lambda page: page.evaluate("document.body.insertAdjacentHTML('beforeend', '<button>Added</button>')")
    )
    second = await tool.state_prompt()
    assert '* button "Added"' in second and '- button "Send"' in second


async def test_scrolling_a_long_page(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/long"))
    top = await tool.session.state()
    assert top.pixels_above == 0 and top.pixels_below > 2000
    down = await act(tool, action="scroll_down", scroll_amount=500)
    assert down.output == "Scrolled down by 500; 500 pixels from the top"
    assert (await tool.session.state()).pixels_above == 500
    await act(tool, action="scroll_down")  # one screen
    assert (await tool.session.state()).pixels_above == 500 + 720
    await act(tool, action="scroll_up", scroll_amount=200)
    assert (await tool.session.state()).pixels_above == 1020
    await act(tool, action="scroll_to_text", text="Bottom marker")
    bottom = await tool.session.state()
    assert bottom.pixels_below == 0 and bottom.pixels_above > 2000
    text = await tool.state_prompt()
    assert text.endswith("[End of page]") and f"[{bottom.pixels_above} pixels above" in text
    assert "lines not shown; use the `find` action" in text  # 200 paragraphs are over 8,000 characters
    missing = await tool(action="scroll_to_text", text="No such words")
    assert (
        missing.error
        == "scroll_to_text failed: no text 'No such words' on this page: check the page state, or use `find`"
    )


async def test_a_key_press_that_navigates_is_waited_for(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/keys"))
    pressed = await act(tool, action="send_keys", keys="Enter")
    assert pressed.output == "Sent keys: Enter"
    state = await tool.session.state()
    assert (state.url, state.title) == (site.url("/arrived"), "Arrived")
    assert 'heading "You arrived"' in state.snapshot


async def test_tabs_a_link_opening_one_and_the_actions_on_them(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/tabs"))
    await act(tool, action="click_element", ref=await ref_of(tool, "Form in a new tab"))
    state = await tool.session.state()
    assert [t.url for t in state.tabs] == [site.url("/tabs"), site.url("/form")]
    assert state.current_tab == 1 and state.url == site.url("/form")  # the new tab is the current one
    switched = await act(tool, action="switch_tab", tab_id=0)
    assert switched.output == f"Switched to tab 0: {site.url('/tabs')}"
    opened = await act(tool, action="open_tab", url=site.url("/"))
    assert opened.output == f"Opened new tab with {site.url('/')}"
    state = await tool.session.state()
    assert (len(state.tabs), state.current_tab, state.title) == (3, 2, "Index")
    assert "  [2] (current) Index - " in state.render(previous_refs=frozenset(), max_chars=8000)
    await act(tool, action="close_tab", tab_id=2)
    await act(tool, action="close_tab", tab_id=1)
    assert [t.url for t in (await tool.session.state()).tabs] == [site.url("/tabs")]
    wrong = await tool(action="switch_tab", tab_id=5)
    assert wrong.error == "switch_tab failed: no tab 5: the tabs are 0 to 0; the page state lists them"


async def test_a_7_mb_page_is_cut_and_read_with_a_note_saying_so(tool: BrowserUseTool, site: Site) -> None:
    size = len(site.pages()["/huge"])
    assert size > 7_000_000
    await act(tool, action="go_to_url", url=site.url("/huge"))
    note = (
        f"Page cut: the browser was given the first 1000000 of its {size} bytes ([browser] max_page_bytes); "
        "what lies past them is not on the page"
    )
    prompt = await tool.state_prompt()
    assert note in prompt and 'heading "Top of the huge page"' in prompt
    text = await tool.session.text()
    assert text.startswith("Top of the huge page\n") and text.endswith(f"\n... [{note}]")
    assert "Line 10000 of the huge page." in text and "Line 199999" not in text


async def test_wait_find_and_web_search_without_a_backend(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/"))
    waited = await act(tool, action="wait", seconds=0)
    assert waited.output == "Waited for 0 seconds"
    found = await act(tool, action="find", text="a long")
    assert str(found.output).startswith('1 matching lines:\n- link "A long page" [ref=')
    none = await act(tool, action="find", text="zebra")
    assert none.output == "No element of the page mentions 'zebra'"
    searched = await tool(action="web_search", query="agentfsm")
    assert searched.error == NO_SEARCH


async def test_web_search_asks_its_backend_and_opens_the_first_result(
    session: BrowserSession, site: Site
) -> None:
    asked: list[tuple[str, int]] = []

    class Local:
        async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
            asked.append((query, num_results))
            return [SearchResult(url=site.url("/form"), title="The form", description="An order form")]

    result = await act(BrowserUseTool(session, search=Local()), action="web_search", query="order form")
    assert asked == [("order form", 5)]
    assert result.output == (
        f"Results for 'order form':\n1. The form - {site.url('/form')}\n   An order form\n"
        f"Navigated to the first: {site.url('/form')}"
    )


async def test_extract_content_sends_the_page_text_and_the_goal_to_the_model(
    session: BrowserSession, site: Site
) -> None:
    model = ScriptedLLM([reply('{"heading": "Order"}')])
    tool = BrowserUseTool(session, llm=model)
    await act(tool, action="go_to_url", url=site.url("/form"))
    result = await act(tool, action="extract_content", goal="the page's heading")
    assert result.output == 'Extracted from page:\n{"heading": "Order"}'
    assert result.usage is not None and result.usage.llm_calls == 1  # the run counts what it spent
    assert result.usage.total_tokens > 0
    (request,) = model.requests
    prompt = request.messages[0].content or ""
    assert "Extraction goal: the page's heading" in prompt and "Order\nName" in prompt
    assert request.tools == ()
    without = await BrowserUseTool(session)(action="extract_content", goal="x")
    assert without.error == "extract_content needs a model: give BrowserUseTool an `llm`"


async def test_every_failure_is_an_observation(tool: BrowserUseTool, site: Site) -> None:
    await act(tool, action="go_to_url", url=site.url("/form"))
    cases = {
        (
            "click_element",
            "e999",
        ): "click_element failed: no element 'e999' on this page: use a ref of the last",
        ("get_dropdown_options", None): "get_dropdown_options failed: element",
        (
            "go_to_url",
            "file:///etc/passwd",
        ): "go_to_url failed: 'file:///etc/passwd' is not an http(s) address",
        ("go_to_url", "example.com"): "go_to_url failed: 'example.com' is not an http(s) address",
        ("input_text", None): "action 'input_text' needs 'ref' and 'text'",
    }
    textbox = await ref_of(tool, 'textbox "Name"')
    for (action, value), expected in cases.items():
        arguments: dict[str, Any] = {"action": action}
        if action == "click_element":
            arguments["ref"] = value
        elif action == "get_dropdown_options":
            arguments["ref"] = textbox
        elif action == "go_to_url":
            arguments["url"] = value
        result = await tool(**arguments)
        assert result.error is not None and result.error.startswith(expected), result.error
    colour = await ref_of(tool, 'combobox "Colour"')
    wrong = await tool(action="select_dropdown_option", ref=colour, text="Purple")
    assert (
        wrong.error == f"select_dropdown_option failed: dropdown {colour!r} has no option 'Purple'; "
        "its options are 'Red', 'Green', 'Blue'"
    )


# -- the allowlist --------------------------------------------------------------------------


async def test_subresources_from_a_host_outside_the_list_are_never_requested(
    tool: BrowserUseTool, site: Site, counter: Counter
) -> None:
    await act(tool, action="go_to_url", url=site.url("/outside"))
    await tool.session.run(lambda page: page.wait_for_timeout(300))  # the script's fetch and beacon
    state = await tool.session.state()
    assert state.title == "Outside things"
    refused = {url.rsplit("/", 1)[1] for url in state.blocked}
    assert refused == {"pixel.png", "style.css", "api", "beacon", "socket"}
    assert f"ws://{BLOCKED_HOST}:{counter.port}/socket" in state.blocked
    assert "Refused (host outside [browser] allowed_hosts): http://blocked.test:" in state.render(
        previous_refs=frozenset(), max_chars=8000
    )
    assert counter.connections == 0


async def test_a_redirect_to_a_host_outside_the_list_is_refused(tool: BrowserUseTool, site: Site) -> None:
    result = await tool(action="go_to_url", url=site.url("/redirect-out"))
    assert result.error == (
        f"go_to_url failed: refused '{site.blocked}/landing': its host '{BLOCKED_HOST}' is not in "
        "[browser] allowed_hosts (127.0.0.1, localhost); add it there to allow it"
    )
    assert "/redirect-out" in site.requests
    followed = await act(tool, action="go_to_url", url=site.url("/redirect-in"))  # an allowed one is followed
    assert followed.output == f"Navigated to {site.url('/form')}"


async def test_going_to_a_host_outside_the_list_is_refused_before_any_request(
    tool: BrowserUseTool, site: Site
) -> None:
    result = await tool(action="go_to_url", url=f"{site.blocked}/")
    assert (
        result.error is not None
        and f"its host '{BLOCKED_HOST}' is not in [browser] allowed_hosts" in result.error
    )
    opened = await tool(action="open_tab", url=f"{site.blocked}/")
    assert opened.error is not None and "is not in [browser] allowed_hosts" in opened.error
    script = f"location.href = '{site.blocked}/by-script'"
    await act(tool, action="go_to_url", url=site.url("/"))
    await tool.session.run(lambda page: page.evaluate(script), settle=False)
    await tool.session.run(lambda page: page.wait_for_url("**/by-script"), settle=False)
    assert (await tool.session.state()).title == "Refused"  # the refusal's page, not the host's


async def test_an_allowed_name_mapped_with_resolve_loads_and_is_kept_to_the_list(site: Site) -> None:
    """The documented use of `resolve`: a development server with a name of its own."""
    settings = BrowserSettings(allowed_hosts=["app.test"])
    async with BrowserSession(settings, resolve={"app.test": "127.0.0.1", **RESOLVE}) as session:
        tool = BrowserUseTool(session)
        app = f"http://app.test:{site.port}"
        loaded = await act(tool, action="go_to_url", url=f"{app}/form")
        assert loaded.output == f"Navigated to {app}/form"
        await act(tool, action="input_text", ref=await ref_of(tool, 'textbox "Name"'), text="Ada")
        await act(tool, action="click_element", ref=await ref_of(tool, 'button "Send"'))
        state = await session.state()
        assert (state.url, state.title) == (f"{app}/result?name=Ada&colour=r", "Result")
        followed = await act(tool, action="go_to_url", url=f"{app}/redirect-in")
        assert followed.output == f"Navigated to {app}/form"
        out = await tool(action="go_to_url", url=f"{app}/redirect-out")
        assert out.error is not None and f"its host '{BLOCKED_HOST}' is not in" in out.error
        direct = await tool(
            action="go_to_url", url=site.url("/form")
        )  # its address is not a name on the list
        assert direct.error is not None and "its host '127.0.0.1' is not in" in direct.error


# -- lifetime ---------------------------------------------------------------------------


async def test_a_killed_browser_is_an_observation_and_the_next_call_starts_another(site: Site) -> None:
    before = set(browser_leftovers())  # the module's browser
    async with BrowserSession() as session:
        tool = BrowserUseTool(session)
        assert not session.active  # nothing starts before the first action
        await act(tool, action="go_to_url", url=site.url("/form"))
        workdir = session.workdir
        assert workdir is not None and workdir.is_dir()
        os.kill(chromium_pid(workdir), signal.SIGKILL)
        lost = await tool(action="go_to_url", url=site.url("/"))  # at once: the call finds it gone
        assert lost.error == (
            "go_to_url failed: the browser closed unexpectedly (it crashed or was killed); "
            "it was discarded, and the next browser_use call starts a new one"
        )
        assert not workdir.exists() and not session.active
        again = await act(tool, action="go_to_url", url=site.url("/"))
        assert again.output == f"Navigated to {site.url('/')}"
        assert session.workdir is not None and session.workdir != workdir
    assert set(browser_leftovers()) == before


async def test_a_start_cancelled_half_way_leaves_nothing(site: Site) -> None:
    before = set(browser_leftovers())
    session = BrowserSession()
    task = asyncio.ensure_future(BrowserUseTool(session)(action="go_to_url", url=site.url("/")))
    await asyncio.sleep(0.15)  # the driver has started, the browser not yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not session.active and session.workdir is None
    assert set(browser_leftovers()) == before


async def test_a_missing_chromium_is_named_with_the_fix() -> None:
    before = set(browser_leftovers())
    session = BrowserSession(BrowserSettings(executable_path="/nonexistent/chromium"))
    result = await BrowserUseTool(session)(action="go_to_url", url="http://127.0.0.1:9/")
    assert result.error == (
        "go_to_url failed: no Chromium at '/nonexistent/chromium': install it (apt-get install chromium) "
        "or set [browser] executable_path"
    )
    assert not session.active and set(browser_leftovers()) == before


async def test_close_removes_the_work_directory_and_every_process(site: Site) -> None:
    before = set(browser_leftovers())
    session = BrowserSession()
    await act(BrowserUseTool(session), action="go_to_url", url=site.url("/"))
    workdir = session.workdir
    assert workdir is not None
    started = set(browser_leftovers()) - before
    assert any("Playwright driver" in item for item in started)
    assert sum(item.startswith("process ") for item in started) >= 2  # Chromium and its helpers
    assert f"directory {workdir}" in started
    await session.close()
    await session.close()  # idempotent
    assert not workdir.exists() and not session.active
    assert set(browser_leftovers()) == before
