"""Sessions: a conversation kept between runs and processes (`run(..., session=...)`, `FileSession`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfsm import ToolCallAgent
from agentfsm.errors import SessionError, WrongTypeError
from agentfsm.messages import Role
from agentfsm.recording.session import FileSession, session_file
from agentfsm.testing import FunctionLLM, ModelRequest, reply


def _agent(seen: list[list[str]], max_messages: int = 100) -> ToolCallAgent:
    def answer(request: ModelRequest) -> object:
        said = [str(m.content) for m in request.messages if m.role is Role.USER]
        seen.append(said)
        return reply(f"you said {len(said)} things")

    from agentfsm.memory import Memory

    return ToolCallAgent(llm=FunctionLLM(answer), memory=Memory(max_messages))


async def test_a_new_agent_goes_on_with_the_conversation_its_session_keeps(tmp_path: Path):
    seen: list[list[str]] = []
    session = FileSession(tmp_path / "talk.json")
    first = await _agent(seen).run("my name is Ada", session=session)
    assert first.ok and (tmp_path / "talk.json").exists()
    again = _agent(seen)  # another agent (another process, after a restart)
    second = await again.run("what is my name?", session=session)
    assert second.ok
    assert seen[-1][:2] == ["my name is Ada", "what is my name?"]  # the earlier turn was sent too
    assert [m.role for m in again.memory.messages][:3] == [Role.USER, Role.ASSISTANT, Role.USER]
    saved = json.loads((tmp_path / "talk.json").read_text())
    assert [m["content"] for m in saved["messages"] if m["role"] == "user"] == [
        "my name is Ada",
        "what is my name?",
    ]
    await session.clear()
    assert await session.load() is None


async def test_the_memory_window_applies_across_the_conversation(tmp_path: Path):
    seen: list[list[str]] = []
    session = FileSession(tmp_path / "long.json")
    for turn in range(6):
        await _agent(seen, max_messages=4).run(f"turn {turn}", session=session)
    snapshot = await session.load()
    assert snapshot is not None and len(snapshot.messages) <= 4
    assert "turn 5" in seen[-1]


async def test_a_damaged_session_or_a_bad_name_is_one_line_naming_the_fix(tmp_path: Path):
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(
        SessionError, match=r"holds no conversation agentfsm wrote .*remove it, or give another"
    ):
        await _agent([]).run("hi", session=FileSession(tmp_path / "bad.json"))
    with pytest.raises(SessionError, match=r"session name '\.\./x' cannot name a file"):
        session_file("../x", tmp_path)
    with pytest.raises(WrongTypeError, match="`session` must be a Session"):
        await _agent([]).run("hi", session="talk")  # type: ignore[arg-type]
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SessionError, match=r"cannot read the session .*a-file/talk\.json: Not a directory"):
        await _agent([]).run("hi", session=FileSession(tmp_path / "a-file" / "talk.json"))


def test_named_sessions_live_in_the_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert session_file("work").path == tmp_path / "agentfsm" / "sessions" / "work.json"
    assert session_file("work", tmp_path / "mine").path == tmp_path / "mine" / "work.json"


async def test_a_database_session_is_one_row_replaced_whole(tmp_path: Path):
    from agentfsm.durable.sessions import DatabaseSession

    seen: list[list[str]] = []
    session = DatabaseSession(f"sqlite:///{tmp_path / 'chats.db'}", "ada")
    try:
        await _agent(seen).run("my name is Ada", session=session)
        await _agent(seen).run("what is my name?", session=session)
        assert seen[-1][:2] == ["my name is Ada", "what is my name?"]
        other = DatabaseSession(f"sqlite:///{tmp_path / 'chats.db'}", "bob")
        assert await other.load() is None  # a session of its own
        other.close()
        await session.clear()
        assert await session.load() is None
    finally:
        session.close()
