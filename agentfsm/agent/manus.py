"""`Manus`: the preset general-purpose agent, with upstream's toolbox, prompts and limits.

The toolbox is python_execute, bash, browser_use, str_replace_editor, ask_human
and terminate, plus the tools of the MCP servers given. The
three tools that touch the system share one `SandboxSession`, owned by the
agent: the sandbox is created by the first tool call that needs it, kept
between runs like the agent's memory (``keep_alive``, on by default; off, it
is destroyed at the end of each run), destroyed anyway when a run fails or is
cancelled, and for good by `aclose()` or the end of ``async with``.

The browser (a `BrowserSession`, also the agent's) starts with the first
browser_use call and stays between runs, so a conversation keeps its pages;
it is closed when a run fails or is cancelled, and by `aclose()`. After a step
that used it, the next think's step prompt carries the page's state (address,
tabs, elements by ref, what lies off screen), for that request only; each
action's screenshot travels with its result.

The sandbox and browser modules are imported when an agent is built, not when
this module is, so `import agentfsm` stays light (no pydantic, no docker).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..mcp.tools import MCPServers
from ..run.result import AgentState, RunResult
from ..toolbox import AskHuman, Bash, PythonExecute, StrReplaceEditor, Terminate
from .page_context import BROWSER_CONTEXT, PageContext
from .toolcall import ToolCallAgent, ToolCallOptions

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from ..browser.search import SearchBackend
    from ..browser.session import BrowserSession
    from ..browser.settings import BrowserSettings
    from ..browser.tool import BrowserUseTool
    from ..mcp.settings import MCPServerSettings
    from ..memory import Memory
    from ..model.base import ChatModel
    from ..questions import InputHandler
    from ..sandbox.session import SandboxSession
    from ..sandbox.settings import SandboxSettings
    from ..toolbox import AskFn
    from ..toolbox.tool import Tool
    from .approval import Approver

__all__ = ["BROWSER_CONTEXT", "NEXT_STEP_PROMPT", "SYSTEM_PROMPT", "Manus", "ManusOptions"]

SYSTEM_PROMPT = (
    "You are OpenManus, an all-capable AI assistant, aimed at solving any task presented by the user. "
    "You have various tools at your disposal that you can call upon to efficiently complete complex "
    "requests. Whether it's programming, information retrieval, file processing, web browsing, or human "
    "interaction (only for extreme cases), you can handle it all. "
    "The initial directory is: {directory}"
)
"""Upstream's prompt; ``{directory}`` becomes the sandbox's workspace."""

NEXT_STEP_PROMPT = """
Based on user needs, proactively select the most appropriate tool or combination of tools. For complex \
tasks, you can break down the problem and use different tools step by step to solve it. After using each \
tool, clearly explain the execution results and suggest the next steps.

If you want to stop the interaction at any point, use the `terminate` tool/function call.
"""

UNKNOWN_WORKSPACE = (
    "the sandbox workspace (the working directory of `bash` and `python_execute`; "
    "relative paths are resolved there)"
)
"""What ``{directory}`` says before a sandbox whose path is only known once made (local, auto) exists."""

_EDITOR_RESPONSE = 16_000
"""Upstream's clip for the editor; lowered to fit `max_observe`, so its own marker stays visible."""


@dataclass(frozen=True, kw_only=True)
class ManusOptions(ToolCallOptions):
    """Manus's options: `ToolCallOptions` (types, bounds and docs), with upstream's defaults."""

    max_steps: int = 20
    max_observe: int | None = 10_000
    max_images: int | None = 3
    """Unlike upstream, which sends every screenshot of the run with each request: the latest three."""
    system_prompt: str | None = SYSTEM_PROMPT
    """Upstream's prompt; ``{directory}`` becomes the sandbox's workspace at each think."""
    next_step_prompt: str | None = NEXT_STEP_PROMPT


class Manus(ToolCallAgent):
    """A versatile agent that solves tasks with code, a shell, a browser, a file editor and, rarely,
    a human."""

    options: ManusOptions
    options_class: ClassVar[type[ManusOptions]] = ManusOptions

    def __init__(
        self,
        *,
        llm: ChatModel,
        sandbox: SandboxSettings | SandboxSession | None = None,
        ask_human: AskFn | None = None,
        extra_tools: Iterable[Tool] = (),
        mcp_servers: MCPServers | Mapping[str, MCPServerSettings | str] | None = None,
        browser: BrowserSettings | BrowserSession | None = None,
        search: SearchBackend | None = None,
        memory: Memory | None = None,
        output_type: type[BaseModel] | None = None,
        approver: Approver | None = None,
        input_handler: InputHandler | None = None,
        name: str | None = "manus",
        options: ManusOptions | None = None,
        **values: Any,
    ) -> None:
        """`ToolCallAgent`'s arguments (the options are `ManusOptions`', by name or as the record
        `options`), and: `sandbox`: settings for a new session (default: `SandboxSettings()`, mode auto), or a
        session, which the agent then owns and closes. `ask_human`: how questions reach a person
        (None: the model is told no human is available). `extra_tools` join the toolbox.
        `mcp_servers`: MCP servers whose tools join it too (`MCPServers`, shared: its owner
        closes it; or settings by id, closed by `aclose()`), connected by `create()` or the
        first think. `browser`: settings for the agent's browser (default: `BrowserSettings()`,
        the system's Chromium, loopback hosts only), or a session, which the agent then owns and
        closes. `search`: the backend of browser_use's web_search (None: there is none).
        `system_prompt` may contain ``{directory}``, replaced by the workspace at each think.
        `output_type`: as `ToolCallAgent`'s (`final_result` joins the toolbox, beside `terminate`)."""
        from ..browser.session import BrowserSession
        from ..browser.tool import BrowserUseTool
        from ..sandbox.session import SandboxSession

        options = self.options_class.build(values, start=options, owner=type(self).__qualname__)
        max_observe = options.max_observe  # the tools' own output limits follow it
        self.session = sandbox if isinstance(sandbox, SandboxSession) else SandboxSession(sandbox)
        self._owns_servers = not isinstance(mcp_servers, MCPServers)
        self.mcp_servers = (
            mcp_servers if isinstance(mcp_servers, MCPServers) else MCPServers(mcp_servers or {})
        )
        """The MCP servers whose tools join the toolbox (none by default)."""
        self.browser = browser if isinstance(browser, BrowserSession) else BrowserSession(browser)
        """The browser of browser_use, started by its first call."""
        self.browser_tool: BrowserUseTool = BrowserUseTool(self.browser, llm=llm, search=search)
        self.page_context = PageContext(self.browser_tool)
        """The page state the next think carries after a step that used the browser."""
        output = max_observe - 500 if max_observe is not None and max_observe > 1_500 else None
        editor = min(_EDITOR_RESPONSE, output) if output is not None else _EDITOR_RESPONSE
        tools: list[Tool] = [
            PythonExecute(self.session, max_output=output),
            Bash(self.session, max_output=output),
            self.browser_tool,
            StrReplaceEditor(self.session, max_response=editor),
            AskHuman(ask_human),
            Terminate(),
            *extra_tools,
        ]
        super().__init__(
            llm=llm,
            tools=tools,
            memory=memory,
            output_type=output_type,
            approver=approver,
            input_handler=input_handler,
            name=name,
            options=options,
        )

    @classmethod
    async def create(cls, **kwargs: Any) -> Manus:
        """Build the agent and connect its MCP servers, adding their tools to the toolbox.

        Takes the constructor's arguments. Upstream needs this because pydantic's `__init__`
        cannot await; here it is where I/O at creation belongs (without it, the first think
        connects). A server that cannot be reached is an error naming it, and nothing is left
        running.
        """
        agent = cls(**kwargs)
        await agent.mcp_servers.attach(agent.tools, agent=agent.name)
        agent._follow_tools()  # their tools may ask for input: the machine has AWAITING_INPUT now
        return agent

    # -- the sandbox in the prompt and at the end of a run ----------------------------------

    async def think(self) -> None:
        # The configured prompt stays in `options` (and so in traces and checkpoints): the derived
        # one names a workspace, which a resumed run's sandbox may place elsewhere.
        changes = await self.mcp_servers.attach(self.tools, agent=self.name)  # before each request
        prompt = self.options.system_prompt
        if prompt is not None and "{directory}" in prompt:
            prompt = prompt.replace("{directory}", await self.workspace())
        self.system_prompt = self.mcp_servers.system_prompt(prompt, changes)  # instructions, changes
        async with self.page_context.thinking(self.memory, self.options.next_step_prompt):
            await super().think()

    @property
    def next_step_prompt(self) -> str | None:
        """The configured step prompt; during a think after browser use, followed by the page's state."""
        return self.page_context.step_prompt(self.options.next_step_prompt)

    async def act(self) -> None:
        if not self.mcp_servers.connected:  # a run resumed in ACTING: its calls need the servers' tools
            await self.mcp_servers.attach(self.tools, agent=self.name)
        await super().act()

    async def workspace(self) -> str:
        """The sandbox's working directory, without making the sandbox just to name it.

        A live sandbox knows its own; a Docker one's is set by the settings; a
        local one's is known in advance only when `local_dir` is given.
        """
        session = self.session
        if session.active:
            return (await session.get()).workspace  # exists already: nothing is made
        settings, record = session.settings, session.record
        if record is not None and record.kind == "docker":
            return settings.workspace
        if record is not None and settings.local_dir is not None:
            return os.path.realpath(settings.local_dir)
        return UNKNOWN_WORKSPACE

    def trace_config(self) -> dict[str, Any]:
        """`ToolCallAgent`'s, with ``sandbox``: where the commands run (kind, and Docker's image), once
        known, so a resume of the checkpoint runs them there too (`prepare_resume`)."""
        config = super().trace_config()
        record = self.session.record
        if record is not None:
            config["sandbox"] = record.to_json()
        return self.mcp_servers.recorded(config) if self.mcp_servers.connections else config

    def prepare_resume(self, config: Mapping[str, Any]) -> None:
        """Resume in the sandbox the checkpoint records (`agentfsm.sandbox.record.resumed_settings`):
        a run that used Docker goes on in Docker, with its image, never on the host unless this
        agent's sandbox is ``mode = "local"`` outright."""
        from ..sandbox.record import SandboxRecord

        self.session.resume_from(SandboxRecord.from_config(config))

    async def on_run_end(self, result: RunResult) -> None:
        """Destroy the sandbox unless it is kept alive and the run finished well; close the
        browser when the run failed or was cancelled."""
        failed = result.state is not AgentState.FINISHED
        try:
            await self.session.end_run(failed=failed)
        finally:
            if failed:
                await self.browser.close()

    async def aclose(self) -> None:
        """Destroy the sandbox and close the browser, if they exist (the agent can still run: it
        makes new ones), close the MCP servers it owns, and its model's connections."""
        try:
            await self.session.close()
        finally:
            try:
                await self.browser.close()
            finally:
                try:
                    if self._owns_servers:
                        await self.mcp_servers.aclose()
                finally:
                    await super().aclose()
