"""An MCP server whose tools ask the client for input, for the elicitation tests, built with the SDK.

Run as ``python tests/mcp_elicit_server.py REVISION TRANSPORT [PORT]``, as
`tests/mcp_test_server.py` (``modern`` | ``legacy``, ``stdio`` | ``http``). The tools ask
through the SDK's resolvers, so one tool works on both revisions: on 2026-07-28 the question
comes back as an ``input_required`` result and the client retries the call with the answer;
on 2025-11-25 the server sends ``elicitation/create`` while the call is open.

The server seals its ``request_state`` under a fixed key, not the SDK's default key of the
process: a stdio server started again by a resumed agent (a new process) still reads the
state its predecessor sealed, as a server of several workers must.
"""

from __future__ import annotations

import sys
from typing import Annotated

from mcp.server.mcpserver import (
    Elicit,
    ElicitationResult,
    ListRoots,
    MCPServer,
    RequestStateSecurity,
    Resolve,
    Sample,
)
from mcp_test_server import serve
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel

KEY = b"agentfsm-tests-request-state-key-0123456789"
"""The key the server seals its request state with (the same in every process)."""


class Name(BaseModel):
    name: str


class Colour(BaseModel):
    colour: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def ask_colour(name: Annotated[Name, Resolve(ask_name)]) -> Elicit[Colour]:
    """Asked once the name is known: a second round of the same call."""
    return Elicit(f"Which colour do you like, {name.name}?", Colour)


def ask_roots() -> ListRoots:
    return ListRoots()


def ask_sample() -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text="hi"))], max_tokens=5)


def build() -> MCPServer:
    server = MCPServer(
        "agentfsm-elicit-test",
        log_level="WARNING",
        request_state_security=RequestStateSecurity(keys=[KEY], ttl=3600.0),
    )

    @server.tool()
    def greet(who: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> str:
        """Greet the user, whose name the server asks for."""
        if who.action == "accept":
            return f"hello {who.data.name}"
        return f"the user would not say their name ({who.action})"

    @server.tool()
    def favourite(
        name: Annotated[Name, Resolve(ask_name)], colour: Annotated[Colour, Resolve(ask_colour)]
    ) -> str:
        """Ask two questions, one after the other."""
        return f"{name.name} likes {colour.colour}"

    @server.tool()
    def echo(text: str) -> str:
        """Return the text (asks nothing)."""
        return f"echo: {text}"

    @server.tool()
    def roots(listed: Annotated[ListRootsResult, Resolve(ask_roots)]) -> str:
        """Asks for the client's roots."""
        return f"roots: {len(listed.roots)}"

    @server.tool()
    def sample(sampled: Annotated[CreateMessageResult, Resolve(ask_sample)]) -> str:
        """Asks the client's model for a completion."""
        return f"sampled: {sampled.content}"

    return server


def main() -> None:
    revision, transport = sys.argv[1], sys.argv[2]
    serve(build(), revision, transport, sys.argv[3] if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
