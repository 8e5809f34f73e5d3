"""`serve`: the inspector for an app's own runs, from Python.

Why: an app that runs agents through `Runs` (or `DurableRuns`) wants to watch them as they go and
decide their approvals without a second program; `serve` starts the same page `agentfsm ui` does,
in the app's own event loop, over the app's managers (followed live and steered from the page)
and any recordings it names.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import WrongTypeError
from .managed import Managed, app_runs
from .reader import Reader
from .server import LOOPBACK, Inspector, needs_token

if TYPE_CHECKING:
    from ..durable.client import DurableRuns
    from ..runs.manager import Runs

__all__ = ["serve"]


async def serve(
    *sources: Runs | DurableRuns | str | os.PathLike[str],
    host: str = LOOPBACK,
    port: int = 0,
) -> Inspector:
    """Serve the inspector over `sources`: a `Runs` (its runs under ``app/ID``), a `DurableRuns`
    (``db/ID``), or a path of recordings; returns the started `Inspector` (its `url`, with a token
    when `host` is not a loopback address). ``await inspector.stop()`` ends it; the managers stay
    the app's to close."""
    from ..runs.manager import Runs

    paths: list[Path] = []
    managed: list[Managed] = []
    for source in sources:
        if isinstance(source, Runs):
            managed.append(app_runs(source))
        elif isinstance(source, str | os.PathLike):
            paths.append(Path(source))
        elif _durable(source):
            managed.append(_database(source))
        else:
            raise WrongTypeError(
                f"serve() takes Runs, DurableRuns or paths of recordings, got {type(source).__name__}"
            )
    token = secrets.token_urlsafe(24) if needs_token(host) else None
    inspector = Inspector(Reader(paths, managed=managed), host=host, port=port, token=token)
    await inspector.start()
    return inspector


def _durable(source: object) -> bool:
    """Whether `source` is a `DurableRuns`: its module is loaded if it is one (importing it here
    would load DBOS for every app)."""
    client = sys.modules.get("agentfsm.durable.client")
    return client is not None and isinstance(source, client.DurableRuns)


def _database(runs: DurableRuns) -> Managed:
    return Managed(lambda: runs, prefix="db", where="the durable database", kind="durable")
