"""`agentfsm demo`: Manus on a scripted model: it writes a script, runs it, checks what it wrote.

Why a scripted model: the demo must run anywhere (no key, no network) and
always show the same run, yet everything except the model is real: the
tools validate their arguments and run in a real sandbox — a hardened Docker
container when an engine and an image are there, else a temporary local
workspace — and the machine fires the same edges, guards and events as with
a provider. `format_transition` shows each edge as it happens.
"""

from __future__ import annotations

from ..agent import Manus
from ..run.events import Transition
from ..run.state import Observation
from ..sandbox.settings import DEFAULT_IMAGE, SandboxSettings
from ..testing import ScriptedLLM, reply

__all__ = ["BUILT_IMAGE", "SCRIPT", "TASK", "build_demo_agent", "demo_sandbox", "format_transition"]

TASK = "Write a Python script that saves the squares of 1 to 10 to squares.txt, run it, and check the file."
SCRIPT = """squares = [n * n for n in range(1, 11)]
with open("squares.txt", "w") as out:
    out.write(" ".join(map(str, squares)) + "\\n")
print(f"wrote {len(squares)} squares, the last is {squares[-1]}")
"""
BUILT_IMAGE = "agentfsm-sandbox:bookworm"
"""The image `tools/build-sandbox-image` builds without a registry; tried before upstream's."""
_WIDTH = 100


def _script() -> ScriptedLLM:
    """What a model would answer, one reply per step; each depends on the observations before it."""
    return ScriptedLLM(
        [
            reply(
                "I'll write the script to squares.py.",
                [("str_replace_editor", {"command": "create", "path": "squares.py", "file_text": SCRIPT})],
            ),
            reply(
                "Now I run it.", [("python_execute", {"code": "import runpy\nrunpy.run_path('squares.py')"})]
            ),
            reply("Let me check the file it wrote.", [("bash", {"command": "cat squares.txt"})]),
            reply(
                "squares.txt holds the squares of 1 to 10: 1 4 9 16 25 36 49 64 81 100.",
                [("terminate", {"status": "success"})],
            ),
        ]
    )


def demo_sandbox() -> tuple[SandboxSettings, str]:
    """The sandbox to run the demo in, and a line saying which: Docker if it can run here, else local.

    Blocking (it asks the Docker engine): call it before the event loop starts.
    """
    from ..sandbox.session import docker_unavailable

    reason = "no image"
    for image in dict.fromkeys((BUILT_IMAGE, DEFAULT_IMAGE)):
        reason = docker_unavailable(image) or ""
        if not reason:
            settings = SandboxSettings(mode="docker", image=image)
            return settings, (
                f"docker, image {image} (no network, {settings.memory} memory, {settings.cpus:g} CPU, "
                f"{settings.pids_limit} processes, read-only root)"
            )
    return SandboxSettings(mode="local"), (
        f"local, a temporary directory on this machine (no Docker sandbox: {reason})"
    )


def build_demo_agent(sandbox: SandboxSettings | None = None) -> Manus:
    """Manus with the scripted model, in `sandbox` (default: local)."""
    return Manus(llm=_script(), sandbox=sandbox or SandboxSettings(mode="local"), name="demo")


# -- showing the run ----------------------------------------------------------------


def _short(text: str, width: int = _WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _unwrapped(observation: Observation) -> str:
    """The tool's own text, without the engine's "Observed output of cmd ..." wrapper."""
    return observation.content.removeprefix(f"Observed output of cmd `{observation.call.name}` executed:\n")


def format_transition(t: Transition) -> str:
    """One edge as a few lines: the edge, then what the phase produced."""
    head = f"{t.source} -> {t.dest}  {t.trigger}  step {t.step}"
    if t.stop_reason is not None:
        head += f"  [{t.stop_reason}]"
    lines = [head]
    if t.guards:
        lines.append("    guards: " + ", ".join(f"{g.name}={'yes' if g.held else 'no'}" for g in t.guards))
    if t.reply is not None and t.reply.content:
        lines.append(f"    model says: {_short(t.reply.content)}")
    lines += [f"    call {_short(f'{c.name}({c.arguments})')}" for c in t.tool_calls]
    for o in t.observations:
        lines.append(f"    {'error' if o.is_error else 'result'} {o.call.name}: {_short(_unwrapped(o))}")
    if t.error:
        lines.append(f"    error: {t.error}")
    return "\n".join(lines)
