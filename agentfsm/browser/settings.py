"""`[browser]`: which Chromium runs the browser tool, what it may reach, and how much of a page it reads.

Every default is the offline-safe one: the Chromium of the system's packages
(never a browser Playwright downloads), headless, and only the loopback host
names allowed. Reaching the web is an explicit setting (``allowed_hosts =
["*"]``, or a list of names).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError

__all__ = ["DEFAULT_EXECUTABLE", "BrowserSettings", "host_of", "redirect_target"]

DEFAULT_EXECUTABLE = "/usr/lib/chromium/chromium"
"""Where Debian's ``chromium`` package puts the browser itself (``/usr/bin/chromium`` is a wrapper script)."""

_NAME = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def host_of(url: str) -> str:
    """The host of `url`, lower-case, without brackets around an IPv6 address ('' when it has none)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:  # a malformed port or IPv6 literal: no host anyone allowed
        return ""


_LEADING_SLASHES = re.compile(r"^/{2,}")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):(.*)$", re.DOTALL)
_CANONICAL_HOST = re.compile(r"^[a-z0-9.-]+$|^\[[0-9a-f:.]+\]$")


def redirect_target(url: str, location: str) -> str | None:
    """The address Chromium goes to when `url` answers ``Location: location`` (None: not one it would).

    Chromium reads a Location as the URL standard says, not as `urljoin` does: it drops leading
    and trailing spaces and control characters and every tab and newline, reads a backslash as a
    slash in an http(s) address, and takes any run of two or more slashes (``/\\host/``,
    ``///host/``) or ``https:host`` for an authority. The target is rewritten that way before
    it is joined, and one whose host is not plainly a name or an address (percent signs, other
    characters Chromium would decode or map) is refused rather than guessed at.
    """
    text = location.strip("".join(map(chr, range(33))))
    text = "".join(c for c in text if c not in "\t\n\r").replace("\\", "/")
    scheme = url.partition(":")[0].lower()
    match = _SCHEME.match(text)
    if match is not None and match.group(1).lower() in ("http", "https", "ws", "wss"):
        rest = match.group(2)
        if match.group(1).lower() != scheme or rest.startswith("/"):
            text = f"{match.group(1).lower()}://{rest.lstrip('/')}"  # an authority, however written
        else:
            text = rest  # ``http:path`` from an http page: a path on the same host
    text = _LEADING_SLASHES.sub("//", text)
    try:
        target = urljoin(url, text)
        parts = urlsplit(target)
        parts.port  # noqa: B018 (a malformed port raises)
    except ValueError:
        return None
    host = parts.netloc.rpartition("@")[2].lower()
    host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if not _CANONICAL_HOST.match(host):
        return None
    return target


class BrowserSettings(BaseModel):
    """The browser tool's configuration, validated once when the settings are loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executable_path: str = DEFAULT_EXECUTABLE
    """The Chromium binary Playwright drives (``apt-get install chromium``; ``playwright install``
    is never needed)."""
    headless: bool = True
    """False shows the window (needs a display)."""
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    """Hosts the page may reach: a name (``example.com``, that name only), ``*.example.com`` (its
    subdomains), an IP address, or ``*`` (any host). Every request is checked, subresources and
    redirects included; a request to any other host is refused before it leaves the browser."""
    viewport_width: int = Field(default=1280, ge=320, le=7680)
    """The page's width in pixels, as its layout and the screenshots see it."""
    viewport_height: int = Field(default=720, ge=240, le=4320)
    """The page's height in pixels: one screen, what `scroll_down` moves by default."""
    action_timeout: float = Field(default=10.0, gt=0)
    """Seconds one action on an element (click, fill, select, ...) may take."""
    navigation_timeout: float = Field(default=30.0, gt=0)
    """Seconds a page may take to load (`go_to_url`, `go_back`, opening a tab)."""
    settle_timeout: float = Field(default=5.0, ge=0)
    """Seconds each action waits for a load it started (a click on a link, a key press that
    navigates); a page still loading after that is read as it is."""
    max_state_chars: int = Field(default=8_000, ge=200)
    """Characters of the page's snapshot in a page state; the lines past it are cut, with a
    marker saying how many (the `find` action reads the lines that match a text instead)."""
    max_page_bytes: int = Field(default=1_000_000, ge=10_000)
    """Bytes of a page's own document the browser is given; a larger one is cut there (the page
    state and `extract_content` say so). Chromium reads a page of several megabytes too slowly for
    any state or text to be read within `action_timeout`."""
    max_extract_chars: int = Field(default=20_000, ge=200)
    """Characters of a page's text that `extract_content` sends to the model."""
    screenshot_quality: int = Field(default=70, ge=1, le=100)
    """JPEG quality of the screenshot each action returns (70: about 11 KB for a small page)."""

    @field_validator("executable_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ConfigError(f"{value!r} is not an absolute path: use e.g. {DEFAULT_EXECUTABLE!r}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        hosts = []
        for entry in value:
            host = entry.strip().lower()
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            if host != "*" and not _is_ip(host) and not _NAME.match(host):
                raise ConfigError(
                    f"{entry!r} is not a host: give a name ('example.com'), its subdomains "
                    "('*.example.com'), an IP address, or '*' for any host (no scheme, port or path)"
                )
            hosts.append(host)
        return tuple(hosts)

    @property
    def any_host(self) -> bool:
        """Whether every host is allowed (``*``)."""
        return "*" in self.allowed_hosts

    def allows(self, url: str) -> bool:
        """Whether the page may send a request to `url` (http, https, ws and wss only)."""
        scheme = url.partition(":")[0].lower()
        if scheme not in ("http", "https", "ws", "wss"):
            return False
        host = host_of(url)
        if not host:
            return False
        if self.any_host:
            return True
        for allowed in self.allowed_hosts:
            if allowed.startswith("*."):
                if host.endswith(allowed[1:]):
                    return True
            elif host == allowed:
                return True
        return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
