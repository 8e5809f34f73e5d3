"""`AgentSpec`: the agent of a managed run, declared as data.

A run's input is its task and the spec of its agent, never a pickled object:
the run may be resumed by another process (a `Runs` restarted on its directory,
a durable worker recovering it), another machine, or a newer release of the
application, and each of them builds the agent again from the declaration, with
the factory registered under the spec's name (`Runs(agents={...})`,
`Worker(agents={...})`). Secrets are not part of a spec: the process's
environment and configuration hold them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agent.toolcall import ToolCallAgent
from ..errors import WrongValueError
from ..flow.flow import PlanningFlow
from ..serde import Serializable

__all__ = ["AgentFactory", "AgentSpec", "RunsFactory"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec(Serializable):
    """Which agent runs a task: a factory's name on the worker, and the options it is given."""

    agent: str = "toolcall"
    """The name a worker registered the agent's factory under (`agentfsm worker`: toolcall, manus,
    browser)."""
    options: dict[str, Any] = field(default_factory=dict)
    """JSON values for the factory: the agent's options (``max_steps``, ...), the model (``model``,
    ``api_base``), whatever the factory reads. Never an API key: a spec is stored in the database."""

    def __post_init__(self) -> None:
        if not self.agent:
            raise WrongValueError("an AgentSpec needs the name of an agent factory, got ''")
        try:
            json.dumps(self.options, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise WrongValueError(
                f"an AgentSpec's options must be JSON values (they are stored, never pickled): {exc}"
            ) from None
        secret = sorted(key for key in self.options if "key" in key.lower() or "secret" in key.lower())
        if secret:
            raise WrongValueError(
                f"an AgentSpec is stored in the database, so it takes no secrets ({', '.join(secret)}); "
                "give them to the worker through its environment or configuration"
            )

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "options": dict(self.options)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentSpec:
        return cls(agent=str(data.get("agent", "")), options=dict(data.get("options") or {}))


AgentFactory = Callable[[AgentSpec], ToolCallAgent]
"""Builds a run's agent from its spec, in the process that runs it (and in every process that resumes
it: the same spec must build the same agent, since the run goes on from its recorded steps)."""

RunsFactory = Callable[[AgentSpec], ToolCallAgent | PlanningFlow]
"""What `Runs` builds a run's model with: an agent's factory, or one that builds a `PlanningFlow` of
agents (the flow's run is managed as an agent's: `agentfsm.runs.flows`)."""
