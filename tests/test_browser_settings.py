"""The browser's settings, its launch flags and the page state's text, without a browser."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentfsm.browser import BrowserSettings, PageState, Tab
from agentfsm.browser.policy import content_policy, with_policy
from agentfsm.browser.session import launch_args
from agentfsm.browser.state import find_lines, refs_in
from agentfsm.cli.config import Settings
from agentfsm.errors import ConfigError

SNAPSHOT = """\
- generic [ref=e1]:
  - heading "Order" [level=1] [ref=e2]
  - textbox "Name" [ref=e5]
  - button "Send" [ref=e8]"""


def test_the_defaults_are_offline_safe() -> None:
    settings = BrowserSettings()
    assert settings.executable_path == "/usr/lib/chromium/chromium"
    assert settings.headless and settings.allowed_hosts == ("127.0.0.1", "localhost")
    assert not settings.allows("https://example.com/")


@pytest.mark.parametrize(
    ("hosts", "url", "allowed"),
    [
        (["example.com"], "https://example.com/a?b", True),
        (["example.com"], "https://www.example.com/", False),
        (["example.com"], "https://example.com.evil.test/", False),
        (["*.example.com"], "https://www.example.com/", True),
        (["*.example.com"], "https://a.b.example.com:8443/", True),
        (["*.example.com"], "https://example.com/", False),
        (["*.example.com"], "https://badexample.com/", False),
        (["Example.COM"], "http://EXAMPLE.com/", True),
        (["127.0.0.1"], "http://127.0.0.1:9999/", True),
        (["::1"], "http://[::1]:8000/", True),
        (["[::1]"], "http://[::1]:8000/", True),
        (["*"], "https://anything.test/", True),
        (["*"], "file:///etc/passwd", False),
        (["*"], "ftp://example.com/", False),
        (["127.0.0.1"], "ws://127.0.0.1:1/socket", True),
        (["127.0.0.1"], "http://user@127.0.0.2/", False),
        (["127.0.0.1"], "http://[bad/", False),
    ],
)
def test_allows_reads_the_host_of_each_url(hosts: list[str], url: str, allowed: bool) -> None:
    assert BrowserSettings(allowed_hosts=tuple(hosts)).allows(url) is allowed


@pytest.mark.parametrize("entry", ["http://example.com", "example.com:8080", "example.com/path", "a b", ""])
def test_a_host_that_is_not_one_is_refused_with_the_fix(entry: str) -> None:
    with pytest.raises(ValidationError, match="is not a host: give a name"):
        BrowserSettings(allowed_hosts=(entry,))


def test_the_executable_must_be_an_absolute_path() -> None:
    with pytest.raises(ValidationError, match="not an absolute path"):
        BrowserSettings(executable_path="chromium")


def test_the_flags_resolve_only_the_allowed_names(tmp_path: Path) -> None:
    settings = BrowserSettings(allowed_hosts=("127.0.0.1", "*.example.com", "::1"))
    args = launch_args(settings, tmp_path, {"app.test": "127.0.0.1"})
    rules = next(a for a in args if a.startswith("--host-resolver-rules="))
    assert rules == (
        "--host-resolver-rules=MAP app.test 127.0.0.1, MAP * ~NOTFOUND, "
        "EXCLUDE 127.0.0.1, EXCLUDE *.example.com, EXCLUDE [::1]"
    )
    features = [a for a in args if a.startswith("--disable-features=")]
    assert len(features) == 1  # Chromium reads only the last one: Playwright's list is repeated in it
    assert {"Translate", "OptimizationHints", "MediaRouter"} <= set(features[0].split("=")[1].split(","))
    assert {"--disable-quic", "--no-pings", "--gaia-url=http://127.0.0.1:9"} <= set(args)
    assert f"--optimization-guide-manifest-override={tmp_path / 'empty'}" in args


def test_any_host_resolves_every_name(tmp_path: Path) -> None:
    args = launch_args(BrowserSettings(allowed_hosts=("*",)), tmp_path, {})
    assert not any(a.startswith("--host-resolver-rules=") for a in args)


def test_the_policy_lists_exactly_the_allowed_hosts_for_every_scheme() -> None:
    settings = BrowserSettings(allowed_hosts=["app.test", "*.example.com", "::1"])
    document = content_policy(settings, document=True)
    assert document == (
        "connect-src http://app.test:* https://app.test:* ws://app.test:* wss://app.test:*"
        " http://*.example.com:* https://*.example.com:* ws://*.example.com:* wss://*.example.com:*"
        "; worker-src http://app.test:* https://app.test:* http://*.example.com:* https://*.example.com:*"
        " data:"
    )  # CSP has no form for an IPv6 address: Chromium would ignore one and warn
    worker = content_policy(settings, document=False)
    assert worker is not None and worker.endswith("; worker-src blob: data:")
    assert content_policy(BrowserSettings(allowed_hosts=[]), document=True) == (
        "connect-src 'none'; worker-src data:"
    )
    assert content_policy(BrowserSettings(allowed_hosts=["*"]), document=True) is None


def test_a_pages_own_policy_is_kept_beside_ours_never_replaced() -> None:
    ours = "connect-src http://app.test:*"
    headers = {"Content-Type": "text/html", "Content-Security-Policy": "connect-src *"}
    assert with_policy(headers, ours) == {
        "Content-Type": "text/html",
        "content-security-policy": f"connect-src *, {ours}",  # two policies: both are enforced
    }
    assert with_policy({"Content-Security-Policy": " "}, ours) == {"content-security-policy": ours}
    assert with_policy(headers, None) == headers


def test_the_browser_section_of_the_configuration(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (clean_env / "agentfsm.toml").write_text(
        '[browser]\nallowed_hosts = ["127.0.0.1", "*.example.com"]\nheadless = false\nmax_state_chars = 500\n'
    )
    monkeypatch.setenv("AGENTFSM_BROWSER__VIEWPORT_WIDTH", "800")
    browser = Settings.load().browser
    assert browser.allowed_hosts == ("127.0.0.1", "*.example.com")
    assert (browser.headless, browser.max_state_chars, browser.viewport_width) == (False, 500, 800)
    (clean_env / "agentfsm.toml").write_text('[browser]\nallowed_host = ["x"]\n')
    with pytest.raises(ConfigError, match=r"unknown key 'allowed_host' in \[browser\].*allowed_hosts"):
        Settings.load()
    (clean_env / "agentfsm.toml").write_text('[browser]\nallowed_hosts = ["https://x.test"]\n')
    with pytest.raises(ConfigError, match=r"\[browser\] allowed_hosts.*is not a host"):
        Settings.load()


def _state(snapshot: str = SNAPSHOT, **fields: object) -> PageState:
    base: dict[str, object] = {
        "url": "http://127.0.0.1:1/form",
        "title": "Form",
        "tabs": (Tab(tab_id=0, url="http://127.0.0.1:1/form", title="Form"),),
        "current_tab": 0,
        "snapshot": snapshot,
        "pixels_above": 0,
        "pixels_below": 0,
        "refs": refs_in(snapshot),
    }
    base.update(fields)
    return PageState(**base)  # type: ignore[arg-type]


def test_the_state_says_where_the_page_is_and_what_lies_off_screen() -> None:
    text = _state(pixels_above=300, pixels_below=1200).render(previous_refs=frozenset(), max_chars=8000)
    lines = text.splitlines()
    assert lines[:2] == ["Current URL: http://127.0.0.1:1/form", "Title: Form"]
    assert "[300 pixels above - scroll up to see more]" in lines
    assert lines[-1] == "[1200 pixels below - scroll down to see more]"
    assert SNAPSHOT in text and "Tabs:" not in text  # one tab: no list
    top = _state().render(previous_refs=frozenset(), max_chars=8000)
    assert "[Start of page]" in top and top.endswith("[End of page]")


def test_refs_new_since_the_last_state_are_marked_on_the_same_page_only() -> None:
    grown = SNAPSHOT + '\n  - alert "Saved" [ref=e9]'
    text = _state(grown).render(previous_refs=refs_in(SNAPSHOT), max_chars=8000)
    assert '  * alert "Saved" [ref=e9]' in text
    assert '  - button "Send" [ref=e8]' in text
    assert "lines starting with * are new" in text
    other_page = '- heading "Elsewhere" [ref=f2e1]'  # a new document: every ref is new, none marked
    assert "* heading" not in _state(other_page).render(previous_refs=refs_in(SNAPSHOT), max_chars=8000)


def test_a_long_snapshot_is_cut_at_a_line_with_a_marker() -> None:
    snapshot = "\n".join(f"- paragraph [ref=e{n}]: line {n}" for n in range(1, 501))
    text = _state(snapshot).render(previous_refs=frozenset(), max_chars=1000)
    kept = [line for line in text.splitlines() if line.startswith("- paragraph")]
    assert 0 < len(kept) < 500 and sum(len(line) + 1 for line in kept) <= 1000
    assert f"{500 - len(kept)} of 500 lines not shown; use the `find` action" in text


def test_the_tabs_and_the_refused_requests_are_listed() -> None:
    tabs = (Tab(tab_id=0, url="http://a.test/", title="A"), Tab(tab_id=1, url="http://b.test/", title="B"))
    text = _state(tabs=tabs, current_tab=1, blocked=("http://x.test/p.png",)).render(
        previous_refs=frozenset(), max_chars=8000
    )
    assert "  [0] A - http://a.test/" in text and "  [1] (current) B - http://b.test/" in text
    assert "Refused (host outside [browser] allowed_hosts): http://x.test/p.png" in text


def test_refs_and_find_read_the_snapshot() -> None:
    assert refs_in(SNAPSHOT + "\n- link [ref=f3e12]") == {"e1", "e2", "e5", "e8", "f3e12"}
    assert find_lines(SNAPSHOT, "SEND") == ['- button "Send" [ref=e8]']
    assert find_lines(SNAPSHOT, "nothing") == []
