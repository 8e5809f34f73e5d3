"""`agentfsm answer --field`: a durable run's question answered from another process reads each
field as the terminal reads a typed answer (`agentfsm.forms`): a multiple choice as a list, a
choice by its value or label, the field's schema checked, and a required field with a default
left to the MCP client to fill in (SEP-1034)."""

from __future__ import annotations

import pytest

from agentfsm.cli.durable import _content, _fields
from agentfsm.errors import WrongValueError
from agentfsm.questions import Question

SURVEY = Question(
    key="survey",
    message="Tell us",
    schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "colors": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}},
            "status": {
                "type": "string",
                "oneOf": [{"const": "a", "title": "Active"}, {"const": "i", "title": "Idle"}],
            },
            "verified": {"type": "boolean"},
        },
        "required": ["name", "age"],
    },
)


def test_a_multiple_choice_is_a_list_and_a_choice_is_read_by_its_label() -> None:
    fields = [("age", "36"), ("colors", "red, blue"), ("status", "Idle"), ("verified", "yes")]
    content = _content(SURVEY, fields)
    assert content == {
        "age": 36,
        "colors": ["red", "blue"],
        "status": "i",
        "verified": True,
    }  # no name: its default


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("age", "200")], "at most 150"),
        ([("age", "36"), ("colors", "red,purple")], "'purple' is not one of the choices"),
        ([("age", "36"), ("status", "gone")], "'gone' is not one of the choices"),
        ([("name", "Ada")], "needs --field age=..."),
    ],
)
def test_an_answer_that_does_not_fit_the_schema_names_the_field(
    fields: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(WrongValueError, match=message):
        _content(SURVEY, fields)


def test_the_fields_are_listed_with_their_choices_and_defaults() -> None:
    lines = _fields(SURVEY)
    assert lines[0] == "name=<string> (default 'John Doe')"
    assert lines[1] == "age=<integer>"
    assert lines[2] == "colors=<a,b,...> (one of 'red', 'green', 'blue'; optional)"
    assert lines[3] == "status=<string> (one of 'a', 'i'; optional)"
