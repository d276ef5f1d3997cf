"""The ``[follow]`` table: what it accepts and what it refuses, with the fix in the message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.cdc.follow import Follower, parse_follow
from dpcr.changelog._sources import DebeziumSource, JsonlSource, Wal2jsonSource
from dpcr.errors import ConfigError

WAL = Wal2jsonSource(path=Path("c.jsonl"), key="id", table="public.t")
DBZ = DebeziumSource(path=Path("c.jsonl"), key="id")


def test_defaults_and_durations() -> None:
    f = parse_follow({"capture": "postgres", "slot": "s"}, WAL)
    assert (f.clock, f.allowed_lateness, f.heartbeat, f.table) == ("wall", 5_000_000,
                                                                    1_000_000, "public.t")
    f = parse_follow({"capture": "postgres", "slot": "s", "clock": "source",
                      "allowed_lateness": "250ms", "heartbeat": "500ms"}, WAL)  # fmt: skip
    assert (f.clock, f.allowed_lateness, f.heartbeat) == ("source", 250_000, 500_000)
    assert f.plugin == "wal2json"
    assert parse_follow({"capture": "postgres", "slot": "s", "plugin": "pgoutput"},
                        WAL).plugin == "pgoutput"  # fmt: skip
    k = parse_follow({"capture": "kafka", "bootstrap": "127.0.0.1:9092", "topic": "x"}, DBZ)
    assert (k.partition, k.group, k.clock) == (0, "dpcr-follow", "wall")


@pytest.mark.parametrize(
    ("raw", "source", "message"),
    [
        ({"capture": "mysql"}, WAL, "'postgres' or 'kafka'"),
        ({"capture": "postgres", "slot": "s"}, DBZ, 'format = \'wal2json\''),
        ({"capture": "postgres", "slot": "s"}, JsonlSource(path=Path("c")), "wal2json"),
        ({"capture": "postgres"}, WAL, "missing the key 'slot'"),
        ({"capture": "postgres", "slot": "s", "clock": "server"}, WAL, "'wall' or 'source'"),
        ({"capture": "postgres", "slot": "s", "lateness": "1s"}, WAL, "unknown key"),
        ({"capture": "postgres", "slot": "s", "plugin": "test_decoding"}, WAL,
         "'wal2json' or 'pgoutput'"),
        ({"capture": "kafka", "bootstrap": "b", "topic": "t", "plugin": "pgoutput"}, DBZ,
         "unknown key"),
        ({"capture": "kafka", "bootstrap": "b", "topic": "t", "clock": "source"}, DBZ,
         "heartbeats"),
        ({"capture": "kafka", "bootstrap": "b", "topic": "t", "partition": -1}, DBZ, ">= 0"),
        ({"capture": "postgres", "slot": "s"}, Wal2jsonSource(path=Path("c"), key="id"),
         "followed table"),
    ],
)
def test_refusals(raw: dict[str, Any], source: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_follow(raw, source)


def _release(tmp: Path, on_error: str) -> Any:
    from dpcr.config import parse_config

    return parse_config({
        "source": {"format": "wal2json", "path": "c.jsonl", "key": "id", "table": "public.t"},
        "privacy": {"epsilon": 1.0}, "constraint": {"at_most_k": 3},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"}], "output": {"on_error": on_error},
        "follow": {"capture": "postgres", "slot": "s"},
    }, base_dir=tmp)  # fmt: skip


def test_a_follower_needs_quarantine_and_a_dsn(tmp_path: Path) -> None:
    follow = parse_follow({"capture": "postgres", "slot": "s"}, WAL)
    with pytest.raises(ConfigError, match="on_error = 'quarantine'"):
        Follower(_release(tmp_path, "raise"), follow, dsn="host=x")
    with pytest.raises(ConfigError, match="connection string"):
        Follower(_release(tmp_path, "quarantine"), follow)
    follower = Follower(_release(tmp_path, "quarantine"), follow, dsn="host=x",
                        wall=lambda: 1_735_776_000_000_000)  # 2025-01-02T00:00Z
    assert follower.next_close() == 1_735_776_000_000_000  # the end of the first day
    assert follower.clock() == 1_735_776_000_000_000 - 5_000_000


def test_every_command_checks_the_follow_table(tmp_path: Path) -> None:
    from dpcr.config import parse_config

    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({
            "source": {"format": "wal2json", "path": "c", "key": "id", "table": "public.t"},
            "privacy": {"epsilon": 1.0}, "constraint": {"at_most_k": 3},
            "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d"},
            "query": [{"name": "n", "kind": "count"}],
            "follow": {"capture": "postgres", "slot": "s", "clok": "wall"},
        }, base_dir=tmp_path)  # fmt: skip


def test_a_follower_stops_once_a_release_with_an_end_is_complete(tmp_path: Path) -> None:
    from dpcr.config import parse_config

    release = parse_config({
        "source": {"format": "wal2json", "path": "c.jsonl", "key": "id", "table": "public.t"},
        "privacy": {"epsilon": 1.0}, "constraint": {"at_most_k": 3},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d",
                    "end": "2025-01-03"},
        "query": [{"name": "n", "kind": "count"}],
    }, base_dir=tmp_path)  # fmt: skip
    follow = parse_follow({"capture": "postgres", "slot": "s"}, WAL)
    events: list[str] = []
    follower = Follower(release, follow, dsn="host=x", log=lambda e, **f: events.append(e))
    follower.status.released = 1  # one of the two intervals is out: not complete
    assert follower.next_close() is not None
    follower.status.released = 2
    follower.tick(0, None)  # nothing is due any more: no step, and the follower stops
    assert follower.next_close() is None and follower._stop() and events == ["complete"]


def test_the_capture_goes_on_while_a_step_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps run in the worker thread: the capture keeps ticking (writing and reading
    heartbeats) during a slow step, the steps come one at a time in order, a stop waits for
    the running step, and a step that raises stops the follower with that error."""
    import threading
    import time

    from dpcr.errors import StoreError

    follow = parse_follow({"capture": "postgres", "slot": "s", "allowed_lateness": "0s"}, WAL)
    day = 86_400_000_000
    t0 = 1_735_689_600_000_000  # 2025-01-01T00:00Z
    now = {"t": t0 + 3 * day + 1}  # three days closed
    follower = Follower(_release(tmp_path, "quarantine"), follow, dsn="host=x",
                        wall=lambda: now["t"])  # fmt: skip
    running = threading.Event()
    steps: list[int] = []
    ticks_during: list[int] = []

    class Result:
        def __init__(self, released: int) -> None:
            self.summary = {"released_intervals": released, "new_intervals": 1}
            self.diagnostics: dict[str, Any] = {}

    def slow_run(*, until: int, rng: Any, progress: Any) -> Result:
        running.set()
        steps.append(until)
        time.sleep(0.4)
        running.clear()
        if len(steps) == 2:
            raise StoreError("the store refused")
        return Result(3)

    monkeypatch.setattr(follower._session, "run", slow_run)

    def capture(idle_exit: float | None) -> None:
        deadline = time.monotonic() + 5
        while not follower._stop() and time.monotonic() < deadline:
            follower.tick(0, None)
            if running.is_set():
                ticks_during.append(1)
            if len(steps) == 1 and not running.is_set():
                now["t"] += day  # the clock closes the fourth day
            time.sleep(0.02)

    monkeypatch.setattr(follower, "_capture", capture)
    with pytest.raises(StoreError, match="the store refused"):
        follower.run()
    assert len(ticks_during) >= 5  # the capture ticked while the steps ran
    assert steps == [t0 + 3 * day + 1, t0 + 4 * day + 1]
    assert follower._worker is None and not running.is_set()
