"""`agentfsm demo`: the whole loop, offline, with real tools and a scripted model.

Why a scripted model: the demo must run anywhere (no key, no network) and
always show the same run, yet everything except the model is real: the
tools are `@tool` functions whose arguments are validated and whose results
become observations, and the machine fires the same edges, guards and events
as with a provider. `format_transition` shows each edge as it happens.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from .agent import ToolCallAgent
from .events import Transition
from .testing import ScriptedLLM, reply
from .tool import tool
from .toolbox import Terminate

__all__ = ["SENTENCE", "TASK", "build_demo_agent", "calculate", "format_transition", "word_count"]

SENTENCE = "The quick brown fox jumps over the lazy dog"
TASK = f"How many words are in the sentence {SENTENCE!r}? Then compute the square of that count plus one."
_WIDTH = 100


@tool
def word_count(text: str) -> int:
    """Count the words (runs of non-space characters) in `text`."""
    return len(text.split())


Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_BITS = 4096
"""Integers stay below 2**4096: a model's ``9**9**9`` must not eat the memory."""


def _evaluate(node: ast.AST) -> Number:
    """Numbers and + - * / // % ** only: a model's text is never handed to `eval`."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if (
            isinstance(node.op, ast.Pow)
            and isinstance(left, int)
            and right * max(abs(left).bit_length() - 1, 0) > _MAX_BITS
        ):
            raise ValueError(f"{ast.unparse(node)!r} is too large to compute")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(
        f"unsupported syntax {ast.unparse(node)!r}: use numbers, parentheses and + - * / // % **"
    )


def _bounded(value: Number) -> Number:
    if isinstance(value, complex):  # (-8) ** 0.5
        raise ValueError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise ValueError(f"the result has more than {_MAX_BITS} bits")
    return value


@tool
def calculate(expression: str) -> Number:
    """Evaluate an arithmetic expression: numbers, parentheses and + - * / // % **."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r} ({exc.msg})") from None
    return _evaluate(tree)


def _script() -> ScriptedLLM:
    """What a model would answer, one reply per step; each depends on the observations before it."""
    return ScriptedLLM(
        [
            reply("First I count the words.", [("word_count", {"text": SENTENCE})]),
            reply(
                "The sentence has 9 words. Now 9 squared plus one.",
                [("calculate", {"expression": "9**2 + 1"})],
            ),
            reply(
                "The sentence has 9 words, and 9² + 1 = 82.",
                [("terminate", {"status": "success"})],
            ),
        ]
    )


def build_demo_agent() -> ToolCallAgent:
    """A `ToolCallAgent` with the scripted model and the demo's tools."""
    return ToolCallAgent(llm=_script(), tools=[word_count, calculate, Terminate()], name="demo")


# -- showing the run ----------------------------------------------------------------


def _short(text: str, width: int = _WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_transition(t: Transition) -> str:
    """One edge as a few lines: the edge, then what the phase produced."""
    head = f"{t.source} -> {t.dest}  {t.trigger}  step {t.step}"
    if t.stop_reason is not None:
        head += f"  [{t.stop_reason.value}]"
    lines = [head]
    if t.guards:
        lines.append("    guards: " + ", ".join(f"{g.name}={'yes' if g.held else 'no'}" for g in t.guards))
    if t.reply is not None and t.reply.content:
        lines.append(f"    model says: {_short(t.reply.content)}")
    lines += [f"    call {_short(f'{c.name}({c.arguments})')}" for c in t.tool_calls]
    lines += [
        f"    {'error' if o.is_error else 'result'} {o.call.name}: {_short(o.content)}"
        for o in t.observations
    ]
    if t.error:
        lines.append(f"    error: {t.error}")
    return "\n".join(lines)
