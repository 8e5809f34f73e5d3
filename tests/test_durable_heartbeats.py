"""The heartbeat table itself, on SQLite and on PostgreSQL: a claim marks a row and exactly one of several
claimers wins it, a claim standing still is won again by exactly one, the claimed worker's beats leave the
row alone until the takeover deletes it, and a table from before claims is upgraded in place."""

from __future__ import annotations

import sqlite3

import pytest
from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)

from agentfsm.durable.heartbeat import Beat, Heartbeats

OLD_TABLE = (
    "CREATE TABLE agentfsm_workers (worker_id VARCHAR(200) NOT NULL PRIMARY KEY, queue VARCHAR(200) NOT NULL,"
    " app_version VARCHAR(200) NOT NULL, count BIGINT NOT NULL)"
)
"""The table as releases before claims made it."""


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    """An empty database of either kind (PostgreSQL's made here: no worker launched to make it)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url = request.getfixturevalue("pg_url")
    server, name = url.rsplit("/", 1)
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return url


def execute(db: str, statement: str) -> None:
    """Run `statement` on `db` with the database's own driver, as an earlier release left the table."""
    if db.startswith("sqlite:///"):
        with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:
            conn.execute(statement)
        return
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(statement)


def row(heartbeats: Heartbeats, worker_id: str) -> Beat | None:
    return next((beat for beat in heartbeats.beats() if beat.worker_id == worker_id), None)


def test_one_of_two_claimers_wins_a_row_and_one_wins_it_again_when_the_claim_stands_still(db):
    dead, a, b = Heartbeats(db), Heartbeats(db), Heartbeats(db)
    try:
        assert dead.beat("w1", "q", "v") == "registered"
        assert dead.beat("w1", "q", "v") == "counted"
        seen = row(a, "w1")
        assert seen is not None and seen.claimed_by is None
        assert [a.claim(seen, "a"), b.claim(seen, "b")] == [True, False]  # both saw it dead: one wins
        claimed = row(b, "w1")
        assert claimed == Beat("w1", "q", "v", seen.count, "a")
        # The claimed worker, if alive, finds its row claimed and leaves it as it is.
        assert dead.beat("w1", "q", "v") == "claimed" and row(a, "w1") == claimed
        # a died before it was done: its claim stood still, both see it so, one wins it again.
        assert not b.claim(seen, "b")  # the row as it was before the claim is gone
        assert [b.claim(claimed, "b"), a.claim(claimed, "a")] == [True, False]
        assert not a.finish("w1", "a")  # no longer a's claim: the row stays for b
        assert row(a, "w1") == Beat("w1", "q", "v", seen.count, "b")
        assert b.finish("w1", "b") and row(a, "w1") is None
        # The takeover done, the worker registers afresh, above any count its old row had.
        assert dead.beat("w1", "q", "v") == "registered"
        again = row(a, "w1")
        assert again is not None and again.claimed_by is None and again.count > seen.count
    finally:
        for heartbeats in (dead, a, b):
            heartbeats.close()


def test_a_table_from_before_claims_is_upgraded_in_place(db, monkeypatch):
    execute(db, OLD_TABLE)
    execute(db, "INSERT INTO agentfsm_workers VALUES ('w1', 'q', 'v', 7)")
    execute(db, "INSERT INTO agentfsm_workers VALUES ('w2', 'q', 'v', 3)")
    first = Heartbeats(db)
    # Two workers starting at once on the old table: the second looked before the first added the column,
    # so its own ALTER fails, and it finds the column there.
    looks: list[bool] = []
    has = Heartbeats._has_claimed_by

    def looking(self: Heartbeats) -> bool:
        looks.append(has(self))
        return len(looks) > 1 and looks[-1]  # the first look is from before the first worker's ALTER

    monkeypatch.setattr(Heartbeats, "_has_claimed_by", looking)
    second = Heartbeats(db)
    assert looks == [True, True]  # it tried to add the column, failed, and found it there
    try:
        assert sorted(first.beats(), key=lambda beat: beat.worker_id) == [
            Beat("w1", "q", "v", 7, None),
            Beat("w2", "q", "v", 3, None),
        ]
        assert second.beat("w2", "q", "v") == "counted"
        assert first.claim(Beat("w1", "q", "v", 7, None), "w2")
        assert second.beat("w1", "q", "v") == "claimed"
        assert row(second, "w1") == Beat("w1", "q", "v", 7, "w2")
        assert row(second, "w2") == Beat("w2", "q", "v", 4, None)
    finally:
        first.close()
        second.close()


def test_workers_starting_at_once_on_a_new_database_all_get_the_table(pg_url):  # noqa: F811
    """Four worker processes started together on a new PostgreSQL database each saw no heartbeat
    table and created it; PostgreSQL refused all but one (a duplicate type name) and those workers
    died at their start."""
    import threading

    import psycopg

    from agentfsm.durable.engine import migrate

    migrate(pg_url)  # the database itself, as a worker's launch makes it before its heartbeats
    for round_ in range(3):
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute("DROP TABLE IF EXISTS agentfsm_workers")
        barrier = threading.Barrier(8)
        made: list[Heartbeats] = []
        failed: list[BaseException] = []

        def start(barrier: threading.Barrier, made: list[Heartbeats], failed: list[BaseException]) -> None:
            barrier.wait()
            try:
                made.append(Heartbeats(pg_url))
            except BaseException as exc:
                failed.append(exc)

        threads = [threading.Thread(target=start, args=(barrier, made, failed)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for heartbeats in made:
            heartbeats.close()
        assert failed == [], (round_, failed[:1])
        assert len(made) == 8
