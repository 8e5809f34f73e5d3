"""A stdio MCP server's transport: the SDK's process handling, with a reader of its own.

The SDK's `stdio_client` reads the server's stdout through a strict UTF-8 text stream and
splits it by joining each chunk to what came before. Two faults follow from a server
that misbehaves: one line of bytes that are not UTF-8 ends its reader silently (the process
lives on, and every later call waits out its timeout), and a long line costs time quadratic in
its length (a 50 MB result took 16-17 s). This transport starts, stops and reaps the server
exactly as `stdio_client` does (it calls the same functions of the SDK's module, which the
pinned major keeps), and reads stdout as bytes: lines are cut where a newline arrives, each
decoded on its own with bad bytes replaced (U+FFFD), so a stray byte costs one character and
never the connection. A line that is not JSON-RPC (a stray print) is skipped with a warning; a
line longer than `MAX_LINE_BYTES` ends the connection, with one warning, so its calls fail at
once and the server's tools are withdrawn (the connection sees the end) instead of a call
waiting for an answer that was thrown away. For the same reason a line that is plainly an answer
(a JSON object with an ``id`` and a ``result`` or an ``error``) but not valid JSON-RPC is handed
to the session as an error answer to that ``id``: its call fails at once, saying why.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, TextIO

from ..log import event

__all__ = ["MAX_LINE_BYTES", "stdio_transport", "unreadable_answer"]

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest line kept from a stdio server's stdout; a longer one ends the connection."""
_LOGGED_LINES = 5
"""Lines that are not JSON-RPC warned about one by one per connection; after them, one note."""


@contextlib.asynccontextmanager
async def stdio_transport(
    params: Any, *, server_id: str, errlog: TextIO, max_line: int | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """The read and write streams of the server `params` (a `StdioServerParameters`) describes,
    while the server runs; its process is stopped and reaped on exit, as `stdio_client` does.
    `max_line`: the longest line kept (`MAX_LINE_BYTES` as it is when the transport opens)."""
    import anyio
    import anyio.lowlevel
    import mcp_types
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    # The SDK's own process start (stdio_client's), reused so this transport behaves as its does.
    command = await sdk._get_executable_command(params.command)  # noqa: SLF001
    process = await sdk._create_platform_compatible_process(  # noqa: SLF001
        command=command,
        args=params.args,
        env=sdk.get_default_environment() | (params.env or {}),
        errlog=errlog,
        cwd=params.cwd,
    )
    # The spawn succeeded; no awaits until the task group is entered (a cancellation in the gap
    # would leak the live process).
    limit = MAX_LINE_BYTES if max_line is None else max_line
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    skipped = 0

    def message(raw: bytes | bytearray) -> SessionMessage | None:
        nonlocal skipped
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            return None
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError:
            answer = unreadable_answer(line)
            if answer is not None:  # the answer to a call, malformed: the call fails now
                return SessionMessage(answer)
            skipped += 1
            if skipped <= _LOGGED_LINES:
                shown = line if len(line) <= 120 else f"{line[:120]}..."
                more = (
                    f" (further such lines are skipped without a word after {_LOGGED_LINES})"
                    if skipped == _LOGGED_LINES
                    else ""
                )
                event(
                    "mcp_stdout_line_skipped",
                    level=logging.WARNING,
                    server=server_id,
                    message=f"MCP server {server_id!r} wrote a line that is not JSON-RPC to stdout, "
                    f"skipped: {shown!r}{more}",
                )
            return None

    async def stdout_reader() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            async with read_writer:
                while True:
                    try:
                        chunk = await process.stdout.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return
                    buffer += chunk
                    if b"\n" in chunk:
                        *lines, rest = buffer.split(b"\n")
                        buffer = bytearray(rest)
                        for line in lines:
                            item = message(line)
                            if item is not None:
                                await read_writer.send(item)
                    if len(buffer) > limit:
                        event(
                            "mcp_stdout_line_too_long",
                            level=logging.WARNING,
                            server=server_id,
                            message=f"MCP server {server_id!r} wrote a line longer than {limit} bytes "
                            "to stdout; the connection is closed",
                        )
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
            return  # the session is gone, or our own shutdown closed stdout under the read
        finally:
            buffer.clear()
            await sdk._drain_stdout(process)  # noqa: SLF001 - the SDK's own drain, as stdio_client's

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still be alive: end the read side, so the session sees the end.
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()  # unblocks the reader into its drain, which lets the server flush
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):  # noqa: SLF001 - stdio_client's own bound
            await writer_done.wait()
        await sdk._stop_server_process(process)  # noqa: SLF001 - stdio_client's stop and reap
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the server must be stopped even when cancelled
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


def unreadable_answer(line: str) -> Any:
    """A JSON-RPC error answering the request `line` answers, when `line` is a JSON object with
    an ``id`` and a ``result`` or ``error`` that is no valid JSON-RPC message; else None."""
    from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError

    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "method" in data or not ("result" in data or "error" in data):
        return None
    request_id = data.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        return None
    shown = line if len(line) <= 120 else f"{line[:120]}..."
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=INTERNAL_ERROR, message=f"its answer is not valid JSON-RPC: {shown}"),
    )
