"""The package's layers, read from its imports: no cycles (not even under TYPE_CHECKING), no arrow up.

Every import counts: at module level, inside functions, and under
`TYPE_CHECKING`, since each is a dependency a reader has to follow. A
package importing its own submodules (its public re-exports) is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentfsm

ROOT = Path(agentfsm.__file__).parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name and not target.startswith(name + "."):
                    found.add(target)
        graph[name] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _layer(module: str) -> str:
    """`agentfsm.run.driver` -> ``run``; `agentfsm.errors` -> ``errors``; the package -> ``agentfsm``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


GRAPH = _graph()


def test_the_import_graph_has_no_cycle():
    assert _cycles(GRAPH) == []


def test_a_cycle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_points_up_the_layers():
    """fsm < run < recording < agent < flow < cli; tools and the sandbox never reach the engine or the CLI."""
    # the vocabulary (`questions`: what a tool asks a person, spoken by tools, runs and results;
    # `forms`: the fields of a question's schema, read alike by the MCP client and the terminal)
    ground = {"errors", "log", "serde", "messages", "questions", "forms", "memory", "options", "lazy"}
    allowed_above = {
        "fsm": set(),
        "model": set(),
        "sandbox": set(),
        # a tool that asks a model itself reports what it spent (`ToolResult.usage`)
        "toolbox": {"sandbox", "model"},
        "run": {"fsm", "model"},
        "recording": {"run", "fsm", "model"},
        "mcp": {"toolbox"},
        "browser": {"toolbox", "sandbox", "model"},
        "agent": {"run", "fsm", "model", "recording", "toolbox", "sandbox", "mcp", "browser"},
        "testing": {"model"},
        # the planning flow drives agents (their RunResults are its steps' outcomes) on the same driver
        "flow": {"agent", "run", "fsm", "model", "toolbox", "recording"},
        # spans are read from the one event stream of agents' and flows' runs, and roles from their
        # tables: no class of an agent or a flow is known there
        "telemetry": {"run", "fsm", "model"},
        # durable runs: an agent's run as a workflow of steps (its model, its tools), queued and resumed
        "durable": {"agent", "run", "fsm", "model", "toolbox", "recording", "runs"},
        # an app's runs in one process: agents (or planning flows of agents) built by factories, run,
        # checkpointed and resumed
        "runs": {"agent", "flow", "run", "fsm", "model", "toolbox", "recording"},
        # the inspector reads recorded runs (and draws their tables; a default table is an agent's
        # or a flow's), and a durable database's through DurableRuns
        "ui": {"recording", "fsm", "agent", "flow", "durable", "runs"},
    }
    # `agentfsm mcp-serve`'s server returns the RunResult of the runs it drives, and asks the client
    # for their approvals' Decisions (`elicit`): the mcp wing's modules that read the run's data.
    # They take their agents from the command line, so they reach no further up than that.
    allowed_for_module = {"agentfsm.mcp.serve": {"run"}, "agentfsm.mcp.elicit": {"run"}}
    wrong = []
    for module, targets in GRAPH.items():
        layer = _layer(module)
        if layer not in allowed_above:
            continue
        allowed = allowed_above[layer] | allowed_for_module.get(module, set()) | ground
        for target in targets:
            other = _layer(target)
            if other != layer and other not in allowed:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_only_the_command_line_configures_logging():
    configuring = ("basicConfig", "dictConfig", "structlog.configure", "setLevel", "addHandler")
    found = []
    for path in ROOT.rglob("*.py"):
        module = _module(path)
        if module.startswith("agentfsm.cli"):
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{module}: {word}" for word in configuring if word in text]
    # log.py gives the library's logger a NullHandler, as the logging docs ask of a library
    assert found == ["agentfsm.log: addHandler"]


def test_every_public_name_of_the_spec_imports_from_agentfsm():
    import agentfsm.testing

    spec = ["ToolCallAgent", "ReActAgent", "BaseAgent", "AgentState", "StopReason", "RunResult", "LLM"]
    spec += ["Memory", "Message", "Tool", "ToolCollection", "ToolResult", "Terminate", "tool", "Transition"]
    spec += ["Edge", "Guard", "StateSpec", "MachineTable", "Manus", "AgentfsmError"]
    assert [name for name in spec if not hasattr(agentfsm, name)] == []
    assert set(agentfsm.__all__) >= set(spec)
    assert callable(agentfsm.testing.ScriptedLLM) and callable(agentfsm.testing.reply)


def test_each_heavy_dependency_has_one_importer_in_its_wing():
    """transitions, litellm, aiohttp, tiktoken, docker, rich, pygraphviz, jsonschema, tenacity, mcp (and its
    httpx2, anyio and uvicorn), playwright, ddgs: each by one module (the one that talks to it), so an
    optional integration stays out of the rest. aiohttp has four, one a wing: the model's HTTP client,
    the inspector's server, the search services' requests, and `agentfsm mcp login`'s one-shot
    redirect receiver. The MCP SDK has six: the client, its stdio transport, its reading of failures
    and its OAuth, and `agentfsm mcp-serve`'s server with its elicitations, the only importers of its
    server side (the server is the only importer of uvicorn, which serves its HTTP)."""
    importers: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                importers.setdefault(name.split(".")[0], set()).add(_module(path))
    assert importers["transitions"] == {"agentfsm.fsm.machine"}
    assert importers["litellm"] == {"agentfsm.model.llm"}
    assert importers["aiohttp"] == {
        "agentfsm.model.openai_compatible",
        "agentfsm.ui.server",
        "agentfsm.browser.engines.request",
        "agentfsm.mcp.login",
    }
    assert importers["tiktoken"] == {"agentfsm.model.encoding"}
    assert importers["tenacity"] == {"agentfsm.model.retry"}
    assert importers["docker"] == {"agentfsm.sandbox.docker_engine"}
    assert importers["rich"] == {"agentfsm.cli.live"}
    assert importers["pygraphviz"] == {"agentfsm.fsm.diagram"}
    assert importers["jsonschema"] == {"agentfsm.toolbox.tool"}
    assert importers["mcp"] == {
        "agentfsm.mcp.client",
        "agentfsm.mcp.stdio",
        "agentfsm.mcp.failures",
        "agentfsm.mcp.serve",
        "agentfsm.mcp.elicit",
        "agentfsm.mcp.oauth",
    }
    assert importers["uvicorn"] == {"agentfsm.mcp.serve"}
    assert importers["httpx2"] == {"agentfsm.mcp.client", "agentfsm.mcp.failures"}
    assert importers["anyio"] == {"agentfsm.mcp.stdio", "agentfsm.mcp.failures"}
    assert importers["playwright"] == {"agentfsm.browser.session"}
    assert importers["ddgs"] == {"agentfsm.browser.engines.duckduckgo"}
    assert importers["opentelemetry"] == {"agentfsm.telemetry.spans"}
    assert importers["dbos"] == {"agentfsm.durable.engine"}
    # DBOS's own dependency: the queries of the two tables beside DBOS's (the workers' heartbeats, the
    # runs' events), and the engine's catch of the errors DBOS's calls raise
    assert importers["sqlalchemy"] == {
        "agentfsm.durable.heartbeat",
        "agentfsm.durable.events",
        "agentfsm.durable.engine",
        "agentfsm.durable.sessions",
    }
