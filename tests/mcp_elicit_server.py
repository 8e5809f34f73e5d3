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

import json
import sys
from typing import Annotated, Any, Literal

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
from pydantic import BaseModel, Field, model_validator

KEY = b"agentfsm-tests-request-state-key-0123456789"
"""The key the server seals its request state with (the same in every process)."""


class Name(BaseModel):
    name: str


class Colour(BaseModel):
    colour: str


class Sent(BaseModel):
    """A form the server takes only with every field sent: the fields' defaults are the client's to
    fill in (SEP-1034), so one left out is refused rather than filled in here."""

    @model_validator(mode="before")
    @classmethod
    def _every_field_sent(cls, data: Any) -> Any:
        missing = [name for name in cls.model_fields if name not in data]
        if missing:
            raise ValueError(f"the client left out {missing}")
        return data


class Profile(Sent):
    """The conformance suite's SEP-1034 form: every field optional, with a default."""

    name: str = "John Doe"
    age: int = 30
    score: float = 95.5
    status: Literal["active", "inactive", "pending"] = "active"
    verified: bool = True


COLOURS = {
    "anyOf": [
        {"const": "red", "title": "Red"},
        {"const": "green", "title": "Green"},
        {"const": "blue", "title": "Blue"},
    ]
}


class Survey(Sent):
    """A form with bounds, a required field, single and multiple choices, for the terminal prompt."""

    name: str = Field(min_length=2)
    age: int = Field(ge=0, le=150)
    colours: list[Literal["red", "green", "blue"]] = Field(
        default=["red"], min_length=1, json_schema_extra={"items": COLOURS, "minItems": 1}
    )
    plan: Literal["free", "pro"] = "free"


def ask_profile() -> Elicit[Profile]:
    return Elicit("Your profile (Enter keeps each default)", Profile)


def ask_survey() -> Elicit[Survey]:
    return Elicit("A short survey", Survey)


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
    def profile(answer: Annotated[ElicitationResult[Profile], Resolve(ask_profile)]) -> str:
        """Ask for a profile whose every field has a default; return what the client sent."""
        if answer.action != "accept":
            return f"no profile ({answer.action})"
        return json.dumps(answer.data.model_dump(), sort_keys=True)

    @server.tool()
    def survey(answer: Annotated[ElicitationResult[Survey], Resolve(ask_survey)]) -> str:
        """Ask the survey; return what the client sent."""
        if answer.action != "accept":
            return f"no survey ({answer.action})"
        return json.dumps(answer.data.model_dump(), sort_keys=True)

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
