"""Extending the machine: a new phase (REFLECTING) and a new final state (HANDED_OFF)."""

import asyncio

from agentfsm import AgentState, Edge, Guard, StateSpec, ToolCallAgent
from agentfsm.agent.table import AGENT_TABLE, NEXT_STEP
from agentfsm.fsm.diagram import to_mermaid
from agentfsm.testing import ScriptedLLM, reply


async def reflect(agent: ToolCallAgent) -> None: ...  # the new phase's I/O


EVERY_3RD = Guard("every_3rd_step", lambda agent: agent.run_state.step % 3 == 0)
WANTS_A_PERSON = Guard("wants_a_person", lambda agent: "[handoff]" in (agent.run_state.output or ""))


class ReflectingAgent(ToolCallAgent):
    table = AGENT_TABLE.extend(
        states=[StateSpec("REFLECTING", "RUNNING", reflect, "reflect_done")],  # a phase
        edges=[
            Edge("observe_done", "OBSERVING", "REFLECTING", EVERY_3RD),
            Edge("reflect_done", "REFLECTING", "THINKING", effect=NEXT_STEP),
        ],
        before=AGENT_TABLE.edge("OBSERVING", "THINKING"),  # priority over the fallback edge
    ).extend(
        states=[StateSpec("HANDED_OFF", final=AgentState.FINISHED, doc="a person takes over")],
        edges=[Edge("think_done", "THINKING", "HANDED_OFF", WANTS_A_PERSON, stop_reason="handed_off")],
        before=AGENT_TABLE.edge("THINKING", "ACTING"),
    )


async def main() -> None:
    agent = ReflectingAgent(llm=ScriptedLLM([reply("[handoff] a person should take this")]))
    result = await agent.run("help")
    print(result.state, result.stop_reason)
    drawn = to_mermaid(agent.table)
    print([line.strip() for line in drawn.splitlines() if "HANDED_OFF -->" in line])


asyncio.run(main())
