"""Structured final answers: `output_type=` a pydantic model, given through the `final_result` tool.

Why a tool (pydantic-ai's way, and its name): every provider's tool calling
carries JSON arguments against a schema, so the answer arrives as data on any
model adapter, and a validation error is an observation like any tool's, which
the model reads and corrects. A plain-text reply is not an answer then: it gets
a nudge to call `final_result`. Why an edge: the corrections are bounded. Each
invalid attempt (arguments that are not JSON or fail validation, a text reply)
counts, and one more than `output_retries` ends the run, on an edge of its own
added before ``[max_steps]`` with `MachineTable.extend`:

    OBSERVING --observe_done [output_retries_spent]--> ERROR / output_retries

A valid call ends the run as `terminate` does (`final_result` is one of the
agent's special tools); the validated object is `RunResult.parsed`, its JSON
`RunResult.output`. The object's JSON travels with the call's observation
(`Observation.output`), so traces, checkpoints and replay hold it; replay, which
has no class to validate with, gives back that JSON.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError, OutputValidationError, WrongTypeError
from ..fsm.machine import Edge, Effect, Guard, MachineTable
from ..messages import ToolCall
from ..run.result import StopReason
from ..run.state import Observation
from ..toolbox.tool import Tool, validation_problems
from .table import MAX_STEPS
from .turn import AgentRunState

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "FINAL_RESULT",
    "OUTPUT_RETRIES_SPENT",
    "PROCESSED",
    "STEP_PROMPT",
    "TEXT_NUDGE",
    "FinalResult",
    "count_failures",
    "final_result",
    "with_output",
]

FINAL_RESULT = "final_result"
PROCESSED = "Final result processed."
"""The observation of a valid `final_result` call (the run ends right after it)."""
STEP_PROMPT = "When you have the answer, give it by calling `final_result`: that ends the interaction."
"""The step prompt of a `ToolCallAgent` with `output_type` and the default one (which names `terminate`)."""
TEXT_NUDGE = "Plain text responses are not permitted: give your final answer by calling `final_result`."
FIX = "Fix the errors and call `final_result` again."


class FinalResult(Tool):
    """The tool the model gives its final answer through, its parameters `output_type`'s schema."""

    name = FINAL_RESULT
    idempotent = True  # no effect: a resumed run may validate the same arguments again

    def __init__(self, output_type: type[BaseModel]) -> None:
        from pydantic import BaseModel

        if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
            raise WrongTypeError(
                f"`output_type` must be a pydantic model class (a subclass of BaseModel), got {output_type!r}"
            )
        self.output_type = output_type
        schema = output_type.model_json_schema()
        title = schema.pop("title", output_type.__name__)
        about = schema.pop("description", None)
        description = f"The final response which ends this conversation: a {title}."
        super().__init__(description=f"{description} {about}" if about else description, parameters=schema)

    def parse(self, arguments: Mapping[str, Any]) -> BaseModel:
        """The validated answer; `ArgumentError` naming each problem, and what to do, otherwise."""
        from pydantic import ValidationError

        try:
            return self.output_type.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ArgumentError(f"{validation_problems(exc)}. {FIX}") from None

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        self.parse(arguments)
        return arguments

    async def execute(self, **kwargs: Any) -> str:
        return PROCESSED

    def describe(self) -> dict[str, str]:
        """What a trace's header and a checkpoint record of it (replay routes the same edges)."""
        cls = self.output_type
        return {"tool": self.name, "type": f"{cls.__module__}.{cls.__qualname__}"}


def final_result(
    run: AgentRunState, call: ToolCall, tool: FinalResult, arguments: dict[str, Any], started: float
) -> Observation:
    """The tool-call path's hook for a `final_result` call: validated, the object kept for the
    result (`run.parsed`, and its JSON on the observation, for traces and checkpoints), or the
    problems for the model to correct. `started`: when the call began (`time.perf_counter()`)."""
    try:
        value = tool.parse(arguments)
    except ArgumentError as exc:
        content = f"Error: Invalid arguments for {call.name}: {exc}"
        return Observation(
            call=call, content=content, is_error=True, duration_s=time.perf_counter() - started
        )
    run.parsed = value
    return Observation(
        call=call,
        content=PROCESSED,
        output=value.model_dump(mode="json"),
        duration_s=time.perf_counter() - started,
    )


def count_failures(run: AgentRunState, observations: Sequence[Observation], name: str) -> None:
    """Count this step's `final_result` calls (`name`) that failed (bad JSON, invalid), keeping the
    last one's text for the error the run ends with once they are too many."""
    failed = [o for o in observations if o.call.name == name and o.is_error]
    if failed:
        run.output_failures += len(failed)
        run.output_problem = failed[-1].content


def _spent(agent: Any) -> bool:
    return agent.output_name is not None and agent.run_state.output_failures > agent.output_retries


OUTPUT_RETRIES_SPENT = Guard(
    "output_retries_spent",
    _spent,
    "the model's final answers failed validation more than `output_retries` times",
)


def _give_up(agent: Any) -> None:
    run = agent.run_state
    message = (
        f"no valid `{agent.output_name}` in {run.output_failures} attempts (output_retries="
        f"{agent.output_retries}); the last: {run.output_problem}. Raise `output_retries`, or "
        "describe the answer's fields better (their names, types and docstrings make the schema)"
    )
    run.exception = OutputValidationError(message)
    run.error = f"OutputValidationError: {message}"


GIVE_UP = Effect("error := 'no valid final_result'", _give_up)


@cache
def with_output(table: MachineTable) -> MachineTable:
    """`table` with the ``[output_retries_spent]`` edge out of OBSERVING (built once per table)."""
    if any(edge.guard is OUTPUT_RETRIES_SPENT for edge in table.edges):
        return table
    before = next(
        (e for e in table.edges if e.source == "OBSERVING" and e.guard is MAX_STEPS),
        table.edge("OBSERVING", "THINKING", "observe_done"),
    )
    edge = Edge(
        "observe_done", "OBSERVING", "ERROR", OUTPUT_RETRIES_SPENT, StopReason.OUTPUT_RETRIES, GIVE_UP
    )
    return table.extend(edges=[edge], before=before)
