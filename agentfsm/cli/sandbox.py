"""`agentfsm sandbox build`: the Docker sandbox's image, built here without any image registry.

Why in the package: a person who installed the wheel has no clone and no
`tools/` folder, yet `[sandbox] mode = "docker"` needs an image, and where no
registry is reachable this builder is how to get one. The builder is a shell
script shipped beside the sandbox (`agentfsm/sandbox/build-image.sh`:
debootstrap a minimal Debian root with Python from the mirror apt already
uses, then `docker import` it), run here as it is run from a clone by
`tools/build-sandbox-image`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from .output import EXIT_USAGE
from .parser import PROG

__all__ = ["sandbox_command"]


def sandbox_command(args: argparse.Namespace) -> int:
    """Run the builder (`--name`: only print the image's name; `--force`: build it again)."""
    from importlib.resources import as_file, files

    flags = ["--name"] if args.name else ["--force"] if args.force else []
    with as_file(files("agentfsm.sandbox") / "build-image.sh") as script:
        try:
            return subprocess.run(["bash", str(script), *flags], check=False).returncode
        except FileNotFoundError:
            print(f"{PROG}: error: the image builder needs bash: install it, then run again", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
