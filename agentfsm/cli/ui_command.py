"""`agentfsm ui PATHS... [--db URL]`: the inspector over the traces and checkpoints under PATHS and the
runs of a durable database, until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import webbrowser
from pathlib import Path

from ..errors import InspectorError
from .output import EXIT_OK, EXIT_USAGE, usage_error


def ui_command(args: argparse.Namespace) -> int:
    from ..ui.managed import database, shown_url
    from ..ui.reader import Reader
    from ..ui.server import Inspector, needs_token

    paths = [Path(p) for p in args.paths] or ([] if args.db else [Path.cwd()])
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return usage_error(
            f"no such file or folder: {missing[0]}; give traces, checkpoints or folders holding them"
        )
    token = secrets.token_urlsafe(24) if needs_token(args.host) else None
    inspector = Inspector(
        Reader(paths, managed=[database(args.db)] if args.db else []),
        host=args.host,
        port=args.port,
        token=token,
    )

    async def serve() -> None:
        url = await inspector.start()
        try:
            given = f"{len(paths)} path(s)" + (f" and {shown_url(args.db)}" if args.db else "")
            print(f"agentfsm ui: {given} at {url} (Ctrl-C stops)", flush=True)
            if args.open:
                webbrowser.open(url)
            await asyncio.Event().wait()
        finally:
            await inspector.stop()

    try:
        asyncio.run(serve())
    except InspectorError as exc:
        print(f"agentfsm ui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        pass
    return EXIT_OK
