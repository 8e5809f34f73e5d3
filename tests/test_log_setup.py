"""The command line's log lines: secrets masked without destroying the rest of the line."""

from __future__ import annotations

import io
import logging

from agentfsm.cli.log_setup import configured


def _logged(secrets: list[str], message: str) -> str:
    stream = io.StringIO()
    with configured("json", stream=stream, secrets=secrets):
        logging.getLogger("agentfsm").warning(message)
    return stream.getvalue()


def test_a_long_secret_is_masked_wherever_it_appears():
    line = _logged(["sk-a1b2c3d4e5"], "calling with Bearer sk-a1b2c3d4e5; retry xsk-a1b2c3d4e5x")
    assert "sk-a1b2c3d4e5" not in line
    assert "Bearer **********; retry x**********x" in line


def test_a_short_secret_is_masked_only_where_it_stands_alone():
    line = _logged(["k"], "key k refused: check the api_key (k)")
    assert "key ********** refused: check the api_key (**********)" in line


def test_the_longer_of_two_overlapping_secrets_is_masked_whole():
    line = _logged(["abc", "abcdefghijkl"], "token abcdefghijkl and abc")
    assert "token ********** and **********" in line
