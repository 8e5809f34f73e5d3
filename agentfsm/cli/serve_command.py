"""`agentfsm mcp-serve`: the command line's agents served to MCP clients, over stdio or over
streamable HTTP on a loopback address (another only with `--allow-remote`); with `--otel` (or
``[telemetry] enabled``) the served runs' spans are exported, in their callers' traces."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING

from ..agent.toolcall import ToolCallAgent
from ..errors import ConfigError
from ..model.base import ChatModel
from .building import (
    build_agent,
    check_model_credentials,
    check_own_agent,
    flags_given,
    mcp_server_settings,
    own_agent,
)
from .driving import log_level, run_async
from .output import exit_interrupted, usage_error
from .parser import PROG

if TYPE_CHECKING:
    from ..sandbox.settings import SandboxSettings


def mcp_serve_command(args: argparse.Namespace) -> int:
    """Serve `run_agent` to MCP clients: each call builds its agent as `run` would, from the
    same configuration and flags (the model flags apply to every agent's `[llm]`)."""
    from . import log_setup
    from .config import AgentSettings, LLMSettings, Settings, build_llm
    from .otel import exporting
    from .parser import AGENTS, package_version

    http = args.http
    if http is not None and not args.allow_remote and not is_loopback(http[0]):
        return usage_error(
            f"--http {http[0]}:{http[1]} serves beyond this machine, where anyone who reaches it runs "
            "agents: bind a loopback address (127.0.0.1), or pass --allow-remote"
        )
    llm_flags = flags_given(args, LLMSettings.model_fields)
    try:
        default = args.agent or Settings.load(args.config).agent.factory or "toolcall"
        served = (*AGENTS, default) if default not in AGENTS else AGENTS  # the person's factory too
        overrides = {
            "llm": dict.fromkeys(served, llm_flags),
            "agent": flags_given(args, AgentSettings.model_fields),
        }
        settings = Settings.load(args.config, overrides)
        flagged_servers = mcp_server_settings(settings, args)
        if ":" in default:
            check_own_agent(default, args, settings)
    except ValueError as exc:
        return usage_error(str(exc))
    models: dict[str, ChatModel] = {}
    sandbox: SandboxSettings | None = None

    def build(name: str, max_steps: int | None) -> ToolCallAgent:
        """A new agent for one call; the model of each agent name is built once and shared by the
        concurrent calls (this command made it, and closes it when it stops serving: a call's end
        closes nothing of it), and so is Manus's sandbox decision (made, and said, by the first
        Manus, before its first command)."""
        nonlocal sandbox
        if name not in models:
            llm = build_llm(settings.llm_for(name))
            check_model_credentials(llm)
            models[name] = llm
        if ":" in name:  # the person's factory: its agent's options are its own, but a call's max_steps
            own = own_agent(name, models[name], terminal=False)
            if not isinstance(own, ToolCallAgent):
                raise ConfigError(
                    f"--agent {name} built a {type(own).__name__}; mcp-serve serves tool-calling agents"
                )
            if max_steps:
                own.options = dataclasses.replace(own.options, max_steps=max_steps)
            return own
        options = settings.agent.agent_kwargs() | ({"max_steps": max_steps} if max_steps else {})
        servers = flagged_servers if name != "toolcall" else None
        agent = build_agent(
            name,
            settings,
            models[name],
            options,
            mcp_servers=servers,
            terminal=False,
            sandbox=sandbox,
            tools=settings.agent.tools or [],
        )
        session = getattr(agent, "session", None)  # Manus's SandboxSession
        if name == "manus" and sandbox is None and session is not None:
            sandbox = session.settings
        return agent

    try:
        build(default, None)  # the default agent is buildable: its errors are reported now, not per call
        spans = exporting(settings.telemetry, args.otel)  # the otel extra is there, if asked for
    except ValueError as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        return exit_interrupted()
    from ..mcp.serve import AgentServer  # the MCP SDK's server side, loaded by this command only

    try:
        server = AgentServer(
            build,
            agents=served,
            default_agent=default,
            pause_timeout=args.pause_timeout,
            version=package_version(),
        )
    except ImportError as exc:  # MissingExtraError: the SDK is not installed
        return usage_error(str(exc))
    secrets = [secret for name in served for secret in settings.llm_for(name).secrets()]
    # With spans on, the provider is the global one: the MCP SDK's server span of each call, a child of
    # the caller's span when its `_meta` carries a traceparent, is current while the run runs, so the
    # run's spans are its children, in the caller's trace.
    with log_setup.configured(args.log_format, secrets=secrets, level=log_level(args)), spans:
        try:
            if http is None:
                run_async(_then_close(server.serve_stdio(), models.values()))
            else:

                def ready(url: str) -> None:
                    print(f"{PROG}: serving MCP on {url}", file=sys.stderr, flush=True)

                with contextlib.redirect_stdout(sys.stderr):  # stdout is no output of a server
                    run_async(_then_close(server.serve_http(*http, ready=ready), models.values()))
        except ConfigError as exc:  # the address cannot be listened on
            return usage_error(str(exc))
        except KeyboardInterrupt:
            return exit_interrupted()
    return 0


async def _then_close(serving: Awaitable[None], models: Iterable[ChatModel]) -> None:
    """Serve, then close the models the command made (their connections on this event loop),
    once no call uses them any more."""
    try:
        await serving
    finally:
        for model in list(models):
            aclose = getattr(model, "aclose", None)  # a model holding connections has one
            if aclose is not None:
                await aclose()


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost: it may resolve anywhere
        return False
