"""The worker process of the CLI fuzz: builds a case's folder and runs its commands in-process
(``dpcr.cli.main(argv)``, stdout and stderr captured), then reports one JSON line per case.

As a pool worker (started by tests/cli/test_fuzz_cli.py)::

    python -m cli.fuzz_worker --serve FD     # reads "SEED INDEX" lines on stdin, writes to FD

Alone, to reproduce one case (prints everything; ``--keep DIR`` keeps its folder)::

    PYTHONPATH=src:tests python -m cli.fuzz_worker SEED INDEX [--keep DIR]
"""

from __future__ import annotations

import _thread
import contextlib
import io
import json
import os
import resource
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from cli.fuzz_cases import BAD_LINES, Action, Case, make_case

__all__ = ["materialize", "run_case"]

Row = dict[str, Any]


# --- writing changelogs ------------------------------------------------------------------------


def _jsonl(rows: list[Row]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _ms(ts: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def _debezium(rows: list[Row]) -> bytes:
    ops = {"insert": "c", "update": "u", "delete": "d"}
    out = []
    for r in rows:
        ms = _ms(r["ts"])
        out.append(
            {
                "payload": {
                    "before": r["before"],
                    "after": r["after"],
                    "op": ops[r["op"]],
                    "source": {"ts_ms": ms, "lsn": r["seq"] * 16},
                    "ts_ms": ms + 5,
                }
            }
        )
    return _jsonl(out)


def _columns(row: Row | None) -> list[Row] | None:
    if row is None:
        return None
    return [
        {"name": k, "type": "text" if isinstance(v, str) else "numeric", "value": v}
        for k, v in row.items()
    ]


def _wal2json(rows: list[Row]) -> bytes:
    actions = {"insert": "I", "update": "U", "delete": "D"}
    out = []
    for r in rows:
        msg: Row = {
            "action": actions[r["op"]],
            "timestamp": r["ts"].replace("T", " ").replace("Z", "+00"),
            "lsn": f"0/{r['seq'] * 16:X}",
            "schema": "public",
            "table": "tickets",
        }
        if r["after"] is not None:
            msg["columns"] = _columns(r["after"])
        if r["before"] is not None:
            msg["identity"] = _columns(r["before"])
        out.append(msg)
    return _jsonl(out)


def _format_bad(fmt: str, name: str) -> bytes:
    """A bad record in ``fmt`` (the canonical lines of BAD_LINES fit every JSON-lines format:
    what matters is that they are not what the format expects, or not even text)."""
    if fmt == "debezium" and name == "dbz_no_key":
        return json.dumps(
            {
                "payload": {
                    "before": {"ticket_id": 1, "zone": "A"},
                    "after": {"zone": "B"},
                    "op": "u",
                    "source": {"ts_ms": 1735779600000, "lsn": 99999},
                }
            }
        ).encode()
    if fmt == "wal2json" and name in ("w2j_key_change", "w2j_no_key"):
        after = [
            {"name": "ticket_id", "type": "integer", "value": 777},
            {"name": "zone", "type": "text", "value": "B"},
        ]
        if name == "w2j_no_key":
            after = after[1:]
        return json.dumps(
            {
                "action": "U",
                "timestamp": "2025-01-02 01:00:00+00",
                "lsn": "0/FFFFF0",
                "schema": "public",
                "table": "tickets",
                "columns": after,
                "identity": [{"name": "ticket_id", "type": "integer", "value": 555}],
            }
        ).encode()
    return BAD_LINES.get(name, b"{}")


def _csv_rows(rows: list[Row], header: bool) -> bytes:
    import csv

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(["entry", "ts", "seq", "op", "before", "after"])
    for r in rows:
        w.writerow(
            [
                r["entry"],
                r["ts"],
                r["seq"],
                r["op"],
                "" if r["before"] is None else json.dumps(r["before"]),
                "" if r["after"] is None else json.dumps(r["after"]),
            ]
        )
    return buf.getvalue().encode()


CSV_BAD = {
    "csv_short": b"950,2025-01-02T01:00:00Z,9500,insert\n",
    "csv_long": b'951,2025-01-02T01:00:00Z,9510,insert,,"{""zone"":""A""}",extra,more\n',
    "latin1_csv": '952,2025-01-02T01:00:00Z,9520,insert,,"{""zone"":""Jos\xe9""}"\n'.encode(
        "latin-1"
    ),
    "csv_quote": b'953,2025-01-02T01:00:00Z,9530,insert,,"{""zone"":""A""}\n',
    "csv_nan": b'954,2025-01-02T01:00:00Z,9540,insert,,"{""zone"":""A"",""fare"":nan}"\n',
}


def _parquet(path: Path, rows: list[Row], bad: tuple[str, ...]) -> None:
    import duckdb

    tmp = path.with_suffix(".tmp.jsonl")
    body = [
        dict(
            r,
            before=None if r["before"] is None else json.dumps(r["before"]),
            after=None if r["after"] is None else json.dumps(r["after"]),
        )
        for r in rows
    ]
    if "parquet_nan" in bad:
        body.append(
            {
                "entry": "960",
                "ts": "2025-01-02T01:00:00Z",
                "seq": 9600,
                "op": "insert",
                "before": None,
                "after": '{"zone":"A","fare":nan}',
            }
        )
    if "parquet_zero_rows" in bad:
        body = []
    tmp.write_bytes(_jsonl(body))
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT entry, ts, seq::BIGINT AS seq, op, before, after FROM read_json("
            f"'{tmp}', columns={{entry:'VARCHAR', ts:'VARCHAR', seq:'BIGINT', op:'VARCHAR', "
            f"before:'VARCHAR', after:'VARCHAR'}})) TO '{path}' (FORMAT parquet)"
        )
    finally:
        con.close()
        tmp.unlink()
    data = path.read_bytes()
    if "parquet_empty" in bad:
        path.write_bytes(b"")
    elif "parquet_truncated" in bad:
        path.write_bytes(data[: len(data) // 2])
    elif "parquet_garbage" in bad:
        path.write_bytes(b"PAR1" + bytes(range(256)) + b"PAR1")


def _sqlite(path: Path, rows: list[Row], bad: tuple[str, ...]) -> None:
    if "sqlite_garbage" in bad:
        path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 500)
        return
    if "sqlite_empty" in bad:
        path.write_bytes(b"")
        return
    with contextlib.suppress(sqlite3.DatabaseError):  # an earlier run's corruption stays
        _sqlite_rows(path, rows, bad)


def _sqlite_rows(path: Path, rows: list[Row], bad: tuple[str, ...]) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con, con:
        con.execute(
            "CREATE TABLE IF NOT EXISTS dpcr_changelog (seq INTEGER PRIMARY KEY "
            "AUTOINCREMENT, entry TEXT, ts TEXT, op TEXT, before TEXT, after TEXT)"
        )
        con.executemany(
            "INSERT INTO dpcr_changelog (entry, ts, op, before, after) VALUES (?, ?, ?, ?, ?)",
            [
                (
                    r["entry"],
                    r["ts"],
                    r["op"],
                    None if r["before"] is None else json.dumps(r["before"]),
                    None if r["after"] is None else json.dumps(r["after"]),
                )
                for r in rows
            ],
        )
        if "sqlite_bad_rows" in bad:
            con.execute(
                "INSERT INTO dpcr_changelog (entry, ts, op, before, after) VALUES (?, ?, ?, ?, ?)",
                (b"\xff\xfe", None, "insert", None, b"{\xe9}"),
            )
            con.execute(
                "INSERT INTO dpcr_changelog (entry, ts, op, before, after) VALUES "
                "('970', '2025-01-02', 'insert', NULL, '{\"zone\":nan}')"
            )
        if "sqlite_no_table" in bad:
            con.execute("DROP TABLE dpcr_changelog")


def _triggers_db(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con, con:
        con.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, zone TEXT, ts TEXT)")
        con.execute("INSERT INTO tickets VALUES (1, 'A', '2025-01-01')")


def _rows(folder: Path, action: Action, written: dict[str, list[Row]]) -> None:
    fmt, rows, bad = action.data
    path = folder / action.path
    if fmt == "sqlite_table":
        _triggers_db(path)
        return
    if fmt == "parquet":
        written[action.path] = written.get(action.path, []) + rows
        _parquet(path, written[action.path], tuple(bad))
        return
    if fmt == "sqlite":
        _sqlite(path, rows, tuple(bad))
        return
    fresh = not path.exists()
    if fmt == "csv":
        data = _csv_rows(rows, header=fresh) + b"".join(CSV_BAD.get(b, b"") for b in bad)
    else:
        body = {"jsonl": _jsonl, "debezium": _debezium, "wal2json": _wal2json}[fmt](rows)
        data = body + b"".join(_format_bad(fmt, b) + b"\n" for b in bad)
    with path.open("ab") as fh:
        fh.write(data)


def materialize(folder: Path, actions: tuple[Action, ...], written: dict[str, list[Row]]) -> None:
    for a in actions:
        path = folder / a.path
        if a.kind == "write":
            path.write_bytes(a.data)
        elif a.kind == "append":
            with path.open("ab") as fh:
                fh.write(a.data)
        elif a.kind == "rows":
            _rows(folder, a, written)
        elif a.kind == "symlink":
            if path.is_symlink() or path.exists():
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            path.symlink_to(a.data)
        elif a.kind == "remove":
            path.unlink(missing_ok=True)
        elif a.kind == "mkdir":
            path.mkdir(parents=True, exist_ok=True)
        else:
            raise ValueError(f"unknown action {a.kind!r}")


# --- running -----------------------------------------------------------------------------------


def _call(argv: tuple[str, ...], interrupt: float | None = None) -> dict[str, Any]:
    """``dpcr.cli.main(argv)`` with stdout/stderr captured: exit status, output, traceback;
    with ``interrupt``, Ctrl-C (SIGINT's handler) arrives after that many seconds."""
    from dpcr.cli import main

    # `dpcr follow` and `dpcr capture` install their own handlers: each command starts afresh
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    running = threading.Lock()
    fired: list[bool] = []

    def ctrl_c() -> None:
        with running:
            if not done:
                fired.append(True)
                _thread.interrupt_main()

    done = False
    timer = threading.Timer(interrupt, ctrl_c) if interrupt is not None else None

    out, err = io.StringIO(), io.StringIO()
    code: Any = None
    tb = None
    thread_errors: list[str] = []
    previous = threading.excepthook

    def hook(args: Any) -> None:
        thread_errors.append(
            "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        )

    threading.excepthook = hook
    started = time.perf_counter()
    cpu = time.process_time()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if timer is not None:
                timer.start()
            try:
                code = main(list(argv))
            finally:
                with running:
                    done = True
                if timer is not None:
                    timer.cancel()
    except KeyboardInterrupt:
        if fired:  # Ctrl-C arrived outside main's handler (argument parsing): a clean stop
            code = 130
        else:
            tb = traceback.format_exc()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code not in (0, 2, None):
            tb = traceback.format_exc()
    except BaseException:
        tb = traceback.format_exc()
    finally:
        threading.excepthook = previous
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if thread_errors and tb is None:
        tb = thread_errors[0]
    return {
        "argv": list(argv),
        "interrupted": bool(fired),
        "code": code,
        "traceback": tb,
        "seconds": seconds,
        "cpu": cpu,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "stdout": out.getvalue()[-2000:],
        "stderr": err.getvalue()[-4000:],
    }


def run_case(case: Case, root: Path, *, keep: bool = False) -> dict[str, Any]:
    folder = root / f"case-{case.index}"
    folder.mkdir()
    cwd = os.getcwd()
    written: dict[str, list[Row]] = {}
    steps = []
    try:
        os.chdir(folder)
        for step in case.steps:
            materialize(folder, step.actions, written)
            result = _call(step.argv, step.interrupt)
            result["out_exists"] = (folder / "out").exists()
            steps.append(result)
    finally:
        os.chdir(cwd)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "seed": case.seed,
        "index": case.index,
        "family": case.family,
        "notes": list(case.notes),
        "steps": steps,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


#: Modules dpcr imports on first use. A worker imports them before its first case, so that a
#: case's CPU time is its own work, whichever case a (re)started worker happens to run first.
WARM = (
    "dpcr.cli",
    "dpcr.commands",
    "dpcr.config",
    "dpcr.report.text",
    "dpcr.svt.pipeline",
    "dpcr.accounting.accountants",
    "dpcr.estimators.tree",
    "dpcr.plans.planner",
    "dpcr.plans.factorization",
    "dpcr.plans.integer_factorization",
    "scipy.optimize",
    "scipy.signal",
    "scipy.special",
    "rich.console",
    "rich.table",
)


def _warm() -> None:
    import importlib
    import pkgutil

    for name in WARM:
        importlib.import_module(name)
    commands = importlib.import_module("dpcr.commands")
    for module in pkgutil.iter_modules(commands.__path__, "dpcr.commands."):
        importlib.import_module(module.name)


def _serve(fd: int) -> None:
    _warm()
    results = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="dpcr-fuzz-") as tmp:
        for line in sys.stdin:
            seed, index = (int(x) for x in line.split())
            try:
                result = run_case(make_case(seed, index), Path(tmp))
            except BaseException:
                result = {
                    "seed": seed,
                    "index": index,
                    "family": "?",
                    "notes": [],
                    "harness_error": traceback.format_exc(),
                    "steps": [],
                }
            results.write(json.dumps(result) + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        _serve(int(argv[1]))
        return 0
    seed, index = int(argv[0]), int(argv[1])
    case = make_case(seed, index)
    print(case.reproduction())
    for n in case.notes:
        print("  note:", n)
    if argv[2:3] == ["--keep"]:
        root = Path(argv[3]).resolve()
        root.mkdir(parents=True, exist_ok=True)
        result = run_case(case, root, keep=True)
        print(f"  files: {root / f'case-{index}'}")
    else:
        with tempfile.TemporaryDirectory(prefix="dpcr-fuzz-") as tmp:
            result = run_case(case, Path(tmp))
    for s in result["steps"]:
        print(f"$ dpcr {' '.join(s['argv'])}  -> exit {s['code']} ({s['seconds']:.2f} s)")
        print(s["stdout"], end="")
        print(s["stderr"], end="", file=sys.stderr)
        if s["traceback"]:
            print(s["traceback"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
