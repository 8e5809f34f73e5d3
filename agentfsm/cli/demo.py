"""`agentfsm demo`: Manus on a scripted model: it writes a script, runs it, checks what it wrote.

Why a scripted model: the demo must run anywhere (no key, no network) and
always show the same run, yet everything except the model is real: the
tools validate their arguments and run in a real sandbox — a hardened Docker
container of the default image (`DEFAULT_IMAGE`, the one every command uses)
when an engine and that image are there, else a temporary local workspace —
and the machine fires the same edges, guards and events as with a provider.
The command (`agentfsm.cli.commands`) shows each edge as it happens with
`output.format_transition`.
"""

from __future__ import annotations

from ..agent import Manus
from ..sandbox.session import docker_unavailable
from ..sandbox.settings import DEFAULT_IMAGE, SandboxSettings
from ..testing import ScriptedLLM, reply

__all__ = ["BUILT_IMAGE", "SCRIPT", "TASK", "build_demo_agent", "demo_sandbox"]

TASK = "Write a Python script that saves the squares of 1 to 10 to squares.txt, run it, and check the file."
SCRIPT = """squares = [n * n for n in range(1, 11)]
with open("squares.txt", "w") as out:
    out.write(" ".join(map(str, squares)) + "\\n")
print(f"wrote {len(squares)} squares, the last is {squares[-1]}")
"""
BUILT_IMAGE = DEFAULT_IMAGE
"""The image `agentfsm sandbox build` builds without a registry: the one default of every command."""


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
    """The sandbox to run the demo in, and a line saying which: Docker (the default image, as every
    command uses) if it can run here, else local.

    Blocking (it asks the Docker engine): call it before the event loop starts.
    """
    settings = SandboxSettings(mode="docker")
    reason = docker_unavailable(settings.image)
    if reason is None:
        return settings, (
            f"docker, image {settings.image} (no network, {settings.memory} memory, {settings.cpus:g} CPU, "
            f"{settings.pids_limit} processes, read-only root)"
        )
    return SandboxSettings(mode="local"), (
        f"local, a temporary directory on this machine (no Docker sandbox: {reason})"
    )


def build_demo_agent(sandbox: SandboxSettings | None = None) -> Manus:
    """Manus with the scripted model, in `sandbox` (default: local)."""
    return Manus(llm=_script(), sandbox=sandbox or SandboxSettings(mode="local"), name="demo")
