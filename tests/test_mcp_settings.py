"""MCP server settings and the agent's names for server tools (no server needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from agentfsm.errors import ConfigError
from agentfsm.mcp import MCPServerSettings
from agentfsm.mcp.names import MAX_NAME, agent_tool_names
from agentfsm.mcp.results import to_tool_result


def test_the_transport_follows_from_command_or_url():
    assert MCPServerSettings(command="uvx", args=("x",)).type == "stdio"
    assert MCPServerSettings(url="http://127.0.0.1:9/mcp").type == "http"
    assert MCPServerSettings(type="sse", url="https://example.invalid/sse").type == "sse"
    assert MCPServerSettings.parse("npx -y server --flag 'a b'").args == ("-y", "server", "--flag", "a b")
    assert MCPServerSettings.parse("http://127.0.0.1:8/mcp").url == "http://127.0.0.1:8/mcp"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a `command` .* or a `url`"),
        ({"type": "stdio", "url": "http://127.0.0.1/mcp"}, "type 'stdio' needs a `command`"),
        ({"command": "x", "url": "http://127.0.0.1/mcp"}, "type 'stdio' takes no `url`"),
        (
            {"type": "http", "url": "ftp://h"},
            "needs a `url` starting with http:// or https://, got 'ftp://h'",
        ),
        ({"url": "http://h/mcp", "env": {"A": "1"}}, "type 'http' takes no `env`"),
        ({"command": "x", "timeout": 0}, "`timeout` must be a number of seconds > 0, got 0"),
        ({"command": "x", "type": "ws"}, "`type` must be 'stdio', 'http' or 'sse', got 'ws'"),
        ({"command": "x", "env": {"A": 1}}, "`env` must be a table of strings"),
    ],
)
def test_a_wrong_setting_names_the_value_and_the_fix(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MCPServerSettings(**kwargs)


def test_a_table_with_an_unknown_key_names_the_known_ones():
    with pytest.raises(ConfigError, match="unknown key 'cmd' for an MCP server; allowed: type, command"):
        MCPServerSettings.from_table({"cmd": "x"})


def test_names_are_valid_short_and_stable():
    names = agent_tool_names("my server", ["get.time", "a" * 80, "terminate"], taken={"terminate"})
    assert names["get.time"] == "mcp_my_server_get_time"
    assert names["terminate"] == "mcp_my_server_terminate"
    long = names["a" * 80]
    assert len(long) <= MAX_NAME and re.fullmatch(r"[A-Za-z0-9_-]+", long)
    assert agent_tool_names("my server", ["a" * 80])["a" * 80] == long  # the same name every time


def test_colliding_names_are_resolved_the_same_way_in_any_order():
    first = agent_tool_names("s", ["a.b", "a_b"])
    assert agent_tool_names("s", ["a_b", "a.b"]) == first
    assert (
        first["a.b"] == "mcp_s_a_b"
        and first["a_b"].startswith("mcp_s_a_b_")
        and len(set(first.values())) == 2
    )
    taken = agent_tool_names("s", ["x"], taken={"mcp_s_x"})
    assert taken["x"] != "mcp_s_x"


def test_results_without_text_or_with_other_blocks_say_what_they_held():
    class Block:
        def __init__(self, **fields: object) -> None:
            self.__dict__.update(fields)

    result = Block(
        content=[
            Block(type="audio", data="AAAA", mime_type="audio/wav"),
            Block(type="image", data="Zm9v", mime_type="image/png"),
            Block(type="image", data="YmFy", mime_type="image/jpeg"),
        ],
        structured_content={"a": 1, "b": [2]},
        is_error=False,
    )
    shown = to_tool_result(result)
    assert shown.base64_image == "Zm9v"
    assert shown.output == (
        "[audio (audio/wav), 3 bytes not shown: the model reads no audio]\n"
        "[image (image/jpeg) not shown: only the first image of a result is]\n"
        'structured content: {"a": 1, "b": [2]}'
    )
    assert to_tool_result(Block(content=[], structured_content=None, is_error=True)).error


def test_importing_the_wing_and_the_agent_does_not_import_the_sdk():
    code = "import agentfsm.agent.mcp, agentfsm.mcp.tools, sys; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
