"""Where an OAuth-protected MCP server's tokens are kept: one file per server, only the user's.

``$XDG_DATA_HOME/agentfsm/mcp-auth/<server>.json`` (``~/.local/share/...`` without the variable;
`AGENTFSM_AUTH_DIR` names another folder). The folder is made mode 0700 and each file is
written whole, as 0600, to a temporary file beside it that replaces it: a reader sees the old
record or the new one, never half of one, and no other user reads either.

A record holds the server's URL, the tokens with the time the access token runs out and the
configured client they were issued to (``issued_to``), and the client the authorization server
registered. Tokens are handed out only for the URL they were issued for: a server whose `url`
changed in the configuration logs in again, so a token never goes to another server; and a
server whose configured ``client_id`` changed gets tokens of that client, not the last one's.
The module speaks JSON only; `agentfsm.mcp.oauth` turns the records into the MCP SDK's types.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["AUTH_DIR_VARIABLE", "AuthFile", "auth_dir"]

AUTH_DIR_VARIABLE = "AGENTFSM_AUTH_DIR"
"""The environment variable naming the folder of the token files, over the XDG default."""

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def auth_dir() -> Path:
    """The folder of the token files (not made here)."""
    chosen = os.environ.get(AUTH_DIR_VARIABLE)
    if chosen:
        return Path(chosen)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "agentfsm" / "mcp-auth"


class AuthFile:
    """The token file of the server `server_id`, whose URL is `url`."""

    def __init__(self, server_id: str, url: str, *, folder: Path | None = None) -> None:
        if not _SAFE_ID.match(server_id) or server_id in (".", ".."):
            raise ConfigError(
                f"MCP server id {server_id!r} cannot name a token file: use letters, digits, '_', '-' or '.'"
            )
        self.url = url
        self.path = (folder or auth_dir()) / f"{server_id}.json"

    def read(self) -> dict[str, Any]:
        """The stored record, or an empty one (no file, a file that is no JSON object)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def tokens(self) -> dict[str, Any] | None:
        """The stored tokens, if they were issued for this URL."""
        data = self.read()
        tokens = data.get("tokens")
        return tokens if data.get("url") == self.url and isinstance(tokens, dict) else None

    def expires_at(self) -> float | None:
        """When the stored access token runs out (`time.time()`), if the server said."""
        data = self.read()
        when = data.get("expires_at")
        return float(when) if data.get("url") == self.url and isinstance(when, int | float) else None

    def client(self) -> dict[str, Any] | None:
        """The registered client's information, if it was registered for this URL."""
        data = self.read()
        client = data.get("client")
        return client if data.get("url") == self.url and isinstance(client, dict) else None

    def update(self, **fields: Any) -> None:
        """Write the record with `fields` replaced (a record for another URL is started afresh)."""
        data = self.read()
        if data.get("url") != self.url:
            data = {"url": self.url}
        data.update(fields)
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)
        try:
            os.fchmod(handle, 0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
