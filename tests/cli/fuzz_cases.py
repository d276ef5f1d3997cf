"""Generated cases of the CLI fuzz (tests/cli/test_fuzz_cli.py).

A case is a pure function of ``(seed, index)``: a folder of files and a list of steps, each step
some file actions (write, append, symlink, remove) and then one ``dpcr`` command run in the
case's folder. The families cover every command with valid and broken configurations and inputs:
every source format with generated logs (and the bad records of issue 30), several runs with
appends and ``--until`` clocks, reports on folders and stores, ``follow`` and ``capture`` bounded
so they return, the analyses, ``local-plan`` and plain argument fuzz.

Run one case alone (prints each command, its exit status, output and any traceback)::

    PYTHONPATH=src:tests python -m cli.fuzz_worker SEED INDEX
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from cli.fuzz_toml import Raw, dumps

__all__ = ["FAMILIES", "Action", "Case", "Step", "case_list", "make_case"]

START = "2025-01-01T00:00:00Z"
DAY = "2025-01-{:02d}T{:02d}:{:02d}:00Z"
FORMATS = ("jsonl", "csv", "parquet", "sqlite", "debezium", "wal2json")
#: A port nothing listens on (the discard service is not run on these machines).
CLOSED = "127.0.0.1:9"


@dataclass(frozen=True, slots=True)
class Action:
    """A change to the case's folder before a step: ``kind`` is write (bytes), append (bytes),
    rows (a changelog in ``fmt``: ``data`` = (format, rows, corruption)), symlink (``data`` =
    target), remove, mkdir or truncate (``data`` = bytes kept)."""

    kind: str
    path: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class Step:
    """File actions, then ``dpcr argv``; ``interrupt``: seconds after which Ctrl-C arrives
    (``_thread.interrupt_main``), if the command is still running."""

    argv: tuple[str, ...]
    actions: tuple[Action, ...] = ()
    interrupt: float | None = None


@dataclass(frozen=True, slots=True)
class Case:
    seed: int
    index: int
    family: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.seed}:{self.index}"

    def reproduction(self) -> str:
        return (
            f"PYTHONPATH=src:tests python -m cli.fuzz_worker {self.seed} {self.index}"
            f"  # {self.family}: " + " ; ".join("dpcr " + " ".join(s.argv) for s in self.steps)
        )


# --- changelogs --------------------------------------------------------------------------------

Row = dict[str, Any]


def changelog(rnd: random.Random, *, entries: int, days: int = 8) -> list[Row]:
    """Tickets inserted, ridden (rides + 1, zone and owner changes) and deleted, in time order."""
    out: list[Row] = []
    seq = 0
    for e in range(entries):
        day, hour = rnd.randint(1, days), rnd.randint(0, 22)
        row: Row | None = None
        for step in range(rnd.randint(1, 5)):
            seq += 1
            if row is None:
                op, after = (
                    "insert",
                    {
                        "ticket_id": e,
                        "rider_id": f"r{rnd.randrange(4)}",
                        "kind": rnd.choice(["multi", "monthly"]),
                        "zone": rnd.choice("ABC"),
                        "fare": rnd.choice([1.5, 40, 99.5, 150]),
                        "rides": 0,
                        "status": "issued",
                    },
                )
            elif step == 4 or rnd.random() < 0.15:
                op, after = "delete", None
            else:
                op, after = (
                    "update",
                    dict(row, rides=row["rides"] + 1, status="used", zone=rnd.choice("ABC")),
                )
                if rnd.random() < 0.2:
                    after["rider_id"] = f"r{rnd.randrange(4)}"
            out.append(
                {
                    "entry": str(e),
                    "ts": DAY.format(min(day, 28), hour % 24, step),
                    "seq": seq,
                    "op": op,
                    "before": row,
                    "after": after,
                }
            )
            row = after
            if row is None:
                break
            hour += rnd.randint(1, 30)
            day, hour = day + hour // 24, hour % 24
    out.sort(key=lambda m: (m["ts"], m["seq"]))
    return out


#: Bad records a unit may send (appended as raw lines of a text source).
BAD_LINES: dict[str, bytes] = {
    "latin1": '{"entry":"900","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    '"after":{"ticket_id":900,"rider_id":"r1","zone":"A","fare":1,"name":"Jos\xe9"}}'.encode(
        "latin-1"
    ),
    "bare_nan": b'{"entry":"901","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    b'"after":{"ticket_id":901,"rider_id":"r1","zone":"A","fare":nan}}',
    "malformed": b'{"entry":"902","ts":"2025-01-02T01:00:00Z","op":"insert",',
    "not_object": b"[1, 2, 3]",
    "null": b"null",
    "bad_op": b'{"entry":"903","ts":"2025-01-02T01:00:00Z","op":"upsert","before":null,'
    b'"after":{"ticket_id":903,"zone":"A"}}',
    "bad_ts": b'{"entry":"904","ts":"yesterday","op":"insert","before":null,'
    b'"after":{"ticket_id":904,"zone":"A"}}',
    "int_ts": b'{"entry":"905","ts":0,"op":"insert","before":null,'
    b'"after":{"ticket_id":905,"rider_id":"r2","zone":"A"}}',
    "huge_ts": b'{"entry":"906","ts":1e300,"op":"insert","before":null,'
    b'"after":{"ticket_id":906,"zone":"A"}}',
    "dup_key": b'{"entry":"907","entry":"908","ts":"2025-01-02T01:00:00Z","op":"insert",'
    b'"before":null,"after":{"ticket_id":907,"zone":"A"}}',
    "nul_byte": b'{"entry":"909\x00","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    b'"after":{"ticket_id":909,"zone":"A"}}',
    "bom": b'\xef\xbb\xbf{"entry":"910","ts":"2025-01-02T01:00:00Z","op":"insert",'
    b'"before":null,"after":{"ticket_id":910,"zone":"A"}}',
    "crlf": b'{"entry":"911","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    b'"after":{"ticket_id":911,"zone":"A"}}\r',
    "deep": b'{"entry":"912","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,"after":'
    + b'{"a":' * 200
    + b"1"
    + b"}" * 200
    + b"}",
    "long": b'{"entry":"913","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    b'"after":{"ticket_id":913,"zone":"A","pad":"' + b"x" * 200_000 + b'"}}',
    "lone_surrogate": b'{"entry":"914","ts":"2025-01-02T01:00:00Z","op":"insert",'
    b'"before":null,"after":{"ticket_id":914,"zone":"\\ud800"}}',
    "big_number": b'{"entry":"915","ts":"2025-01-02T01:00:00Z","op":"insert","before":null,'
    b'"after":{"ticket_id":915,"zone":"A","fare":1' + b"0" * 400 + b"}}",
    "empty_line": b"",
    "whitespace": b"   \t ",
}


def _bad(rnd: random.Random, fmt: str) -> list[str]:
    """Names of bad records to append (text formats) or corruptions (the others)."""
    if fmt in ("jsonl", "debezium", "wal2json"):
        names = sorted(BAD_LINES)
        if fmt == "debezium":
            names += ["dbz_no_key"] * 4
        if fmt == "wal2json":
            names += ["w2j_key_change", "w2j_no_key"] * 3
        return rnd.sample(names, rnd.randint(1, 3))
    if fmt == "csv":
        return [rnd.choice(["csv_short", "csv_long", "latin1_csv", "csv_quote", "csv_nan"])]
    if fmt == "parquet":
        return [
            rnd.choice(
                [
                    "parquet_empty",
                    "parquet_truncated",
                    "parquet_garbage",
                    "parquet_zero_rows",
                    "parquet_nan",
                ]
            )
        ]
    return [rnd.choice(["sqlite_garbage", "sqlite_no_table", "sqlite_bad_rows", "sqlite_empty"])]


# --- configurations ----------------------------------------------------------------------------


def source_table(fmt: str, path: str, rnd: random.Random) -> dict[str, Any]:
    table: dict[str, Any] = {"format": fmt, "path": path}
    if fmt in ("debezium", "wal2json"):
        table["key"] = "ticket_id"
    if fmt == "wal2json" and rnd.random() < 0.3:
        table["table"] = "public.tickets"
    if fmt == "sqlite" and rnd.random() < 0.3:
        table["table"] = "dpcr_changelog"
    return table


def _constraint(rnd: random.Random) -> dict[str, Any]:
    pick = rnd.choice(["k", "k", "bounded", "machine", "hybrid"])
    if pick == "k":
        c: dict[str, Any] = {"at_most_k": rnd.choice([1, 2, 3, 5])}
    elif pick == "bounded":
        c = {"time_bounded": rnd.choice(["1d", "2d", "36h", "3d"])}
    elif pick == "machine":
        c = {
            "state_machine": {
                "column": "rides",
                "buckets": {"0": 0, "1": 1, "2": 2, "3+": 3},
                "initial": ["0"],
                "transitions": ["0 -> 1 -> 2 -> 3+"],
                "terminal": ["0", "1", "2", "3+"],
                "allowance": {"3+": 2},
            }
        }
    else:
        c = {
            "column": "kind",
            "classes": {"multi": {"at_most_k": 3}, "monthly": {"time_bounded": "2d"}},
        }
        if rnd.random() < 0.5:
            c["default"] = {"at_most_k": 1}
    if rnd.random() < 0.2 and pick != "hybrid":
        c = {"on_exhausted": rnd.choice(["freeze", "retire"]), **c}
    return c


def _release(rnd: random.Random, gaussian: bool) -> dict[str, Any]:
    kinds = ["auto", "disjoint", "tree", "window", "times"]
    if gaussian:
        kinds += ["factorization"]
    kind = rnd.choice(kinds)
    if kind == "times":
        return {"times": ["2025-01-03", "2025-01-05", "2025-01-09"]}
    r: dict[str, Any] = {"start": START, "period": rnd.choice(["1d", "12h", "2d"])}
    if kind != "auto" or rnd.random() < 0.5:
        r = {"plan": kind, **r}
    end = rnd.random() < 0.5
    if kind == "tree":
        r["branching"] = rnd.choice([2, 4])
        if rnd.random() < 0.3:
            r["height"] = rnd.choice([2, 3, 5])
        if rnd.random() < 0.3:
            r["estimator"] = rnd.choice(["honaker", "plain"])
    elif kind == "window":
        r["window"] = rnd.choice(["2d", "3d", "4d"])
        r["period"] = "1d"
    elif kind == "factorization":
        fac = rnd.choice(["sqrt", "blt", "rescaled"])
        r["factorization"] = fac
        if fac == "blt" and rnd.random() < 0.5:
            r["planning_horizon"] = rnd.choice([16, 64])
            if rnd.random() < 0.5:
                r["fit_participations"] = rnd.choice([1, 3])
            end = False
        else:
            r["horizon"] = rnd.choice([8, 16, 32])
            end = False
    if end:
        r["end"] = rnd.choice(["2025-01-09", "2025-01-17T00:00:00Z", "2025-02-01"])
    elif kind in ("auto", "disjoint", "tree", "window") and rnd.random() < 0.2:
        r["planning_horizon"] = rnd.choice([8, 30])
    return r


def _queries(rnd: random.Random, *, exhausted: bool) -> list[dict[str, Any]]:
    qs: list[dict[str, Any]] = []
    if rnd.random() < 0.8:
        q: dict[str, Any] = {"name": "active", "kind": "count"}
        if rnd.random() < 0.3:
            q["where"] = rnd.choice([{"zone": "A"}, {"kind": ["multi", "monthly"]}])
        if rnd.random() < 0.2:
            q["consistency"] = ["nonnegative"]
        qs.append(q)
    if rnd.random() < 0.5:
        qs.append(
            {
                "name": "fares",
                "kind": "sum",
                "column": "fare",
                "lower": 0,
                "upper": rnd.choice([10, 100]),
                "grid": rnd.choice([0.5, 1]),
            }
        )
    if rnd.random() < 0.5:
        h: dict[str, Any] = {
            "name": "zones",
            "kind": "histogram",
            "column": "zone",
            "keys": ["A", "B", "C"][: rnd.randint(1, 3)],
        }
        if rnd.random() < 0.3:
            h["unknown"] = rnd.choice(["drop", "other"])
        if rnd.random() < 0.2:
            h["weight"] = 2
        qs.append(h)
    if exhausted and rnd.random() < 0.2:
        qs.append({"name": "exhausted", "kind": "exhausted"})
    return qs or [{"name": "active", "kind": "count"}]


def valid_config(
    rnd: random.Random,
    *,
    fmt: str = "jsonl",
    path: str = "log.jsonl",
    follow: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A configuration dpcr should accept (a few combinations it refuses are fine too)."""
    gaussian = rnd.random() < 0.2
    privacy: dict[str, Any] = {"epsilon": rnd.choice([0.5, 1.0, 2, 10])}
    if rnd.random() < 0.3:
        privacy = {"unit": "rider_id", **privacy}
    if gaussian:
        privacy.update(mechanism="gaussian", delta=rnd.choice([1e-6, 1e-9]))
    doc: dict[str, Any] = {
        "source": source_table(fmt, path, rnd),
        "privacy": privacy,
        "constraint": _constraint(rnd),
        "release": _release(rnd, gaussian),
        "query": _queries(rnd, exhausted=True),
    }
    if "unit" not in privacy and rnd.random() < 0.15:
        name = doc["query"][0]["name"]
        doc["alerts"] = [
            {
                "name": "busy",
                "statistic": name,
                "what": "running",
                "threshold": rnd.choice([1, 3, True]) if rnd.random() < 0.1 else 2,
                "cutoff": 2,
                "epsilon": 0.5,
            }
        ]
    out: dict[str, Any] = {"dir": "out"}
    if rnd.random() < 0.2:
        out["on_error"] = rnd.choice(["quarantine", "raise"])
    if rnd.random() < 0.1:
        out["store"] = "state/store.sqlite"
    doc["output"] = out
    if follow is not None:
        doc["follow"] = follow
    return doc


#: Values of every type for keys that take something else.
ODD_VALUES: list[Any] = [
    True,
    False,
    float("nan"),
    float("inf"),
    float("-inf"),
    2**63 - 1,
    2**70,
    -(2**63),
    0,
    -1,
    1e308,
    5e-324,
    "",
    "x",
    "nan",
    "1d",
    "-1d",
    "0s",
    "99999999999d",
    0.5,
    [],
    [1, "a"],
    {},
    {"a": 1},
    Raw("2025-01-01T00:00:00Z"),
    Raw("2025-01-01"),
    Raw("07:00:00"),
    1735689600,
    "2025-01-01",
    "0001-01-01",
    "9999-12-31T23:59:59Z",
    'A"B',
    "é",
    "\u0000",
]


def _paths(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every key path of ``doc`` (into tables and arrays of tables)."""
    out: list[tuple[Any, ...]] = []

    def walk(node: Any, prefix: tuple[Any, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                out.append((*prefix, k))
                walk(v, (*prefix, k))
        elif isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
            for i, v in enumerate(node):
                walk(v, (*prefix, i))

    walk(doc, ())
    return out


def _container(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = doc
    for p in path[:-1]:
        node = node[p]
    return node


def mutate(rnd: random.Random, doc: dict[str, Any]) -> str:
    """Change ``doc`` in place in one way a person (or a script) might get wrong; return how."""
    paths = _paths(doc)
    how = rnd.choice(
        ["value", "value", "value", "unknown", "misspell", "drop", "empty", "section", "list"]
    )
    path = rnd.choice(paths)
    parent = _container(doc, path)
    last = path[-1]
    if how == "value":
        parent[last] = rnd.choice(ODD_VALUES)
    elif how == "unknown":
        parent[rnd.choice(["colour", "epsilon2", "Path", "plan_kind", "unit"])] = 1
    elif how == "misspell":
        if isinstance(last, str) and last:
            i = rnd.randrange(len(last))
            parent[last[:i] + last[i + 1 :] + last[i : i + 1] * 2] = parent.pop(last)
    elif how == "drop":
        if isinstance(parent, dict):
            parent.pop(last)
    elif how == "empty":
        top = rnd.choice(list(doc))
        doc[top] = [] if isinstance(doc[top], list) else {}
    elif how == "section":
        doc[
            rnd.choice(
                ["privacy", "release", "sources", "query", "alerts", "engine", "follow", "output"]
            )
        ] = rnd.choice([{}, "x", 3, [{}], [{"name": 1}]])
    else:
        parent[last] = [parent[last], parent[last]]
    return f"{how} {'.'.join(map(str, path))}"


def broken_text(rnd: random.Random, text: str) -> bytes:
    """TOML text made invalid, or not text."""
    how = rnd.choice(["cut", "dup", "bytes", "bracket", "empty", "binary", "bom", "quote"])
    data = text.encode()
    if how == "cut":
        return data[: rnd.randrange(len(data))]
    if how == "dup":
        lines = text.splitlines()
        i = rnd.randrange(len(lines))
        return "\n".join([*lines[: i + 1], lines[i], *lines[i + 1 :]]).encode()
    if how == "bytes":
        i = rnd.randrange(len(data))
        return data[:i] + bytes([rnd.choice([0xFF, 0xE9, 0x80, 0x00])]) + data[i:]
    if how == "bracket":
        return b"[[source]\n" + data
    if how == "empty":
        return b""
    if how == "binary":
        return bytes(rnd.randrange(256) for _ in range(64))
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    return data.replace(b'"', b"'", 1)


# --- families ----------------------------------------------------------------------------------


def _config_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    doc = valid_config(rnd)
    notes = [mutate(rnd, doc) for _ in range(rnd.choice([0, 0, 0, 1, 1, 1, 2, 3]))]
    text = dumps(doc).encode() if rnd.random() < 0.9 else broken_text(rnd, dumps(doc))
    log = changelog(rnd, entries=6)
    files = (Action("write", "dpcr.toml", text), Action("rows", "log.jsonl", ("jsonl", log, ())))
    command = rnd.choice(
        [
            ("plan",),
            ("plan",),
            ("plan",),
            ("plan", "--json"),
            ("account",),
            ("plan", "--json"),
            ("account", "--json"),
            ("plan",),
            ("account",),
            ("run", "--until", "2025-01-06", "--quiet"),
        ]
    )
    steps = [Step((command[0], "dpcr.toml", *command[1:]), files)]
    if rnd.random() < 0.05:
        steps.append(
            Step(
                (
                    "run",
                    "dpcr.toml",
                    "--until",
                    "2025-01-09",
                    "--simulate",
                    "3",
                    "--no-report",
                    "--log-format",
                    "json",
                )
            )
        )
    if rnd.random() < 0.2:  # (drawn last: the cases before `check` existed are unchanged)
        steps.append(Step(("check", "dpcr.toml")))
    return tuple(steps), tuple(notes)


UNTILS = [
    "2025-01-02",
    "2025-01-03T00:00:00Z",
    "2025-01-03T12:00:00+01:00",
    "2025-01-05",
    "2025-01-05",
    "2025-01-09",
    "2025-01-30",
    "1970-01-01",
    "0",
    "1735776000",
    "not a time",
    "9999-12-31",
    "2025-13-01",
    "",
]


def _writes(fmt: str, path: str, rows: list[Row], bad: tuple[str, ...]) -> Action:
    return Action("rows", path, (fmt, rows, bad))


def _run_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """A release over several runs: rows arrive in chunks (with bad records), runs at clocks."""
    fmt = rnd.choice(FORMATS)
    path = {
        "jsonl": "log.jsonl",
        "csv": "log.csv",
        "parquet": "log.parquet",
        "sqlite": "app.sqlite",
        "debezium": "dbz.jsonl",
        "wal2json": "w2j.jsonl",
    }[fmt]
    doc = valid_config(rnd, fmt=fmt, path=path)
    if doc.get("alerts") and rnd.random() < 0.5:
        doc["alerts"][0]["threshold"] = True
    notes = [f"format {fmt}"]
    if rnd.random() < 0.1:
        col = 'rid"x'
        doc["privacy"] = {"unit": col, **{k: v for k, v in doc["privacy"].items() if k != "unit"}}
        notes.append("unit column with a double quote")
    log = changelog(rnd, entries=rnd.randint(3, 14))
    if doc["privacy"].get("unit", "entry") != "entry":
        col = doc["privacy"]["unit"]
        for m in log:
            for side in ("before", "after"):
                if m[side] is not None and col != "rider_id":
                    m[side] = {**m[side], col: m[side]["rider_id"]}
    chunks = sorted(rnd.sample(range(1, len(log)), min(len(log) - 1, rnd.randint(0, 2))))
    parts = [log[a:b] for a, b in zip([0, *chunks], [*chunks, len(log)], strict=True)]
    steps: list[Step] = []
    seen: list[Row] = []
    clock = sorted(rnd.sample(UNTILS[:7], 3))
    for i, part in enumerate(parts):
        seen = seen + part
        bad: tuple[str, ...] = ()
        if rnd.random() < 0.45:
            bad = tuple(_bad(rnd, fmt))
            notes.append(f"run {i + 1}: {', '.join(bad)}")
        actions = [Action("write", "dpcr.toml", dumps(doc).encode())] if i == 0 else []
        actions.append(_writes(fmt, path, list(seen), bad))
        until = clock[min(i, len(clock) - 1)] if rnd.random() < 0.9 else rnd.choice(UNTILS)
        extra = rnd.choice(
            [
                (),
                ("--quiet",),
                ("--json",),
                ("--no-report",),
                ("--log-format", "json"),
                ("--simulate", "7"),
            ]
        )
        steps.append(Step(("run", "dpcr.toml", "--until", until, *extra), tuple(actions)))
        if rnd.random() < 0.2:  # a run that closes nothing new
            steps.append(Step(("run", "dpcr.toml", "--until", until, "--quiet")))
    if rnd.random() < 0.25:
        steps.append(
            Step(
                (
                    "report",
                    "dpcr.toml",
                    *rnd.choice(
                        [(), ("--quiet",), ("--no-operator",), ("-o", "r.html"), ("--simulation",)]
                    ),
                )
            )
        )
    if rnd.random() < 0.15:
        steps.append(Step(("verify", "dpcr.toml", *rnd.choice([(), ("--json",)]))))
    if rnd.random() < 0.1:
        options = [(), ("--json",), ("--exact",), ("--epsilon", "0.5"), ("--k", "1,2"),
                   ("--bound", "1d,7d"), ("--cap", "3"), ("--simulate", "1")]  # fmt: skip
        steps.append(Step(("suggest", "dpcr.toml", *rnd.choice(options))))
    if rnd.random() < 0.1:
        setup = rnd.choice(
            [Action("remove", path), Action("symlink", path, path), Action("mkdir", path + ".d")]
        )
        steps.append(Step(("run", "dpcr.toml", "--until", "2025-01-09"), (setup,)))
        notes.append(f"then {setup.kind} {setup.path}")
    if rnd.random() < 0.15:  # (drawn last, as in _config_case)
        steps.append(Step(("check", "dpcr.toml")))
    return tuple(steps), tuple(notes)


def _source_file_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """The source path is missing, a loop, a folder, empty or unreadable."""
    fmt = rnd.choice(FORMATS)
    doc = valid_config(rnd, fmt=fmt, path="src.data")
    how = rnd.choice(["missing", "loop", "dangling", "folder", "empty", "fifo_like", "self"])
    actions = [Action("write", "dpcr.toml", dumps(doc).encode())]
    if how == "loop":
        actions += [
            Action("symlink", "a.link", "src.data"),
            Action("symlink", "src.data", "a.link"),
        ]
    elif how == "dangling":
        actions.append(Action("symlink", "src.data", "nowhere/none"))
    elif how == "folder":
        actions.append(Action("mkdir", "src.data"))
    elif how == "empty":
        actions.append(Action("write", "src.data", b""))
    elif how == "self":
        actions.append(Action("symlink", "src.data", "src.data"))
    elif how == "fifo_like":
        actions.append(Action("write", "src.data", b"\x00" * 300))
    command = rnd.choice(
        [
            ("run", "dpcr.toml", "--until", "2025-01-05"),
            ("run", "dpcr.toml", "--until", "2025-01-05", "--simulate", "1"),
            ("audit", "dpcr.toml", "--runs", "20", "--candidates", "2", "--seed", "1"),
        ]
    )
    steps = [Step(command, tuple(actions))]
    if rnd.random() < 0.5:
        steps.append(Step(("report", "dpcr.toml")))
    if rnd.random() < 0.3:  # (drawn last, as in _config_case)
        steps.append(Step(("check", "dpcr.toml")))
    return tuple(steps), (f"source {fmt} {how}",)


def _report_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """``dpcr report`` (and plan/run) pointed at things that are not a configuration."""
    doc = valid_config(rnd)
    log = changelog(rnd, entries=5)
    steps = [
        Step(
            ("run", "dpcr.toml", "--until", "2025-01-05", "--quiet"),
            (
                Action("write", "dpcr.toml", dumps(doc).encode()),
                Action("rows", "log.jsonl", ("jsonl", log, ())),
            ),
        )
    ]
    target = rnd.choice(
        [
            "out",
            "out/store.sqlite",
            "out/summary.json",
            "log.jsonl",
            "none.toml",
            ".",
            "out/report.html",
            "out/operator",
        ]
    )
    command = rnd.choice(
        ["report", "report", "plan", "run", "account", "audit", "verify", "suggest"]
    )
    steps.append(Step((command, target)))
    return tuple(steps), (f"{command} {target}",)


def _follow_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    pick = rnd.choice(["no_follow", "bad", "postgres", "postgres", "kafka_bad"])
    notes = [pick]
    if pick == "no_follow":
        doc = valid_config(rnd)
    elif pick == "bad":
        follow: dict[str, Any] = {"capture": rnd.choice(["postgres", "kafka", "mysql", 3])}
        for _ in range(rnd.randint(1, 2)):
            follow[
                rnd.choice(
                    [
                        "clock",
                        "allowed_lateness",
                        "heartbeat",
                        "slot",
                        "plugin",
                        "partition",
                        "topic",
                    ]
                )
            ] = rnd.choice(ODD_VALUES)
        doc = valid_config(
            rnd, fmt=rnd.choice(["wal2json", "debezium"]), path="c.jsonl", follow=follow
        )
    elif pick == "postgres":
        doc = valid_config(
            rnd,
            fmt="wal2json",
            path="c.jsonl",
            follow={"capture": "postgres", "slot": "s1", "table": "public.t"},
        )
    else:
        doc = valid_config(
            rnd,
            fmt="debezium",
            path="c.jsonl",
            follow={
                "capture": "kafka",
                "bootstrap": "127.0.0.1:9",
                "topic": "t",
                "clock": "source",
            },
        )
    actions = [Action("write", "dpcr.toml", dumps(doc).encode())]
    if rnd.random() < 0.5:
        actions.append(
            Action("rows", "c.jsonl", (doc["source"]["format"], changelog(rnd, entries=3), ()))
        )
    argv = ["follow", "dpcr.toml", "--once", "--idle-exit", "0.2", "--simulate", "1"]
    if pick == "postgres":
        argv += rnd.choice(
            [
                ["--dsn", "host=127.0.0.1 port=9 connect_timeout=1"],
                ["--dsn-file", "missing.dsn"],
                [],
                ["--create-slot", "--dsn", "host=127.0.0.1 port=9 connect_timeout=1"],
            ]
        )
    return (Step(tuple(argv), tuple(actions)),), tuple(notes)


def _capture_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    dsn = rnd.choice(
        [
            ["--dsn", "host=127.0.0.1 port=9 connect_timeout=1"],
            ["--dsn-file", "missing.dsn"],
            ["--dsn-file", "."],
            [],
            ["--dsn", "not a dsn ===="],
        ]
    )
    rest = rnd.choice(
        [
            ["--slot", "s", "--table", "public.t", "--key", "id", "--out", "o.jsonl"],
            [
                "--slot",
                "s",
                "--table",
                "public.t",
                "--key",
                ",",
                "--out",
                "o.jsonl",
                "--create-slot",
            ],
            ["--slot", "s", "--drop-slot"],
            ["--slot", "s"],
            ["--slot", "s", "--table", "t", "--key", "id", "--out", "out", "--idle-exit", "nan"],
        ]
    )
    return (Step(("capture", "postgres", *dsn, *rest), (Action("mkdir", "out"),)),), ()


def _triggers_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    table = rnd.choice(["tickets", "tickets", "missing", 'ti"ck', "t; DROP TABLE x", ""])
    key = rnd.choice(["id", "id", "nope", 'i"d', ""])
    argv = [
        "sqlite-install-triggers",
        rnd.choice(["app.sqlite", "app.sqlite", "none.sqlite", "bad.sqlite", "."]),
        table,
        "--key",
        key,
    ]
    if rnd.random() < 0.3:
        argv += ["--time-column", rnd.choice(["ts", "missing", "id"])]
    if rnd.random() < 0.2:
        argv += ["--log-table", rnd.choice(["log", 'l"og', "tickets", "sqlite_master"])]
    actions = (
        Action("write", "bad.sqlite", b"SQLite format 3\x00" + b"\xff" * 200),
        Action("rows", "app.sqlite", ("sqlite_table", [], ())),
    )
    steps = [Step(tuple(argv), actions)]
    if rnd.random() < 0.5:
        steps.append(Step(tuple(argv)))
    return tuple(steps), ()


def _analyze_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    kind = rnd.choice(["region", "cw-stream", "cw-finite", "summary-privacy"])
    if kind == "region":
        doc: dict[str, Any] = {
            "mechanism": {
                "rows": [["3/4", "1/4"], ["1/4", "3/4"]],
                "inputs": ["0", "1"],
                "outputs": ["0", "1"],
                "neighbours": "all",
            },
            "report": {"deltas": [0, 0.01], "epsilons": [0, 1]},
            "claim": {"epsilon": 1.0987, "delta": 0},
        }
        if rnd.random() < 0.3:
            doc = {
                "mechanisms": [
                    {"randomized_response": {"p_truth": "3/4"}, "compose": rnd.choice([1, 2, 3])}
                ]
            }
    elif kind == "cw-stream":
        doc = {
            "n": rnd.choice([2, 4, 6]),
            "c": "1/2",
            "p": "1/2",
            "steps": rnd.choice([1, 2, 3]),
            "kernel": "count",
        }
        if rnd.random() < 0.5:
            doc = {
                "n": 4,
                "block": 2,
                "p": "1/2",
                "steps": 2,
                "kernel": {"type": "noisy_count", "keep": "1/2"},
            }
    elif kind == "cw-finite":
        doc = {
            "distribution": ["1/2", "1/4", "1/4"],
            "layout": "private-blocks",
            "block": 1,
            "steps": rnd.choice([1, 2, 3]),
            "kernel": {"type": "noisy_sum", "keep": "1/2"},
        }
        if rnd.random() < 0.5:
            doc.update(layout="sliding-window", n=3)
    else:
        doc = {
            "prior": {"a": "1/2", "b": "1/2"},
            "secret": {"a": "low", "b": "high"},
            "mechanisms": [
                {
                    "name": "m",
                    "kernel": {"a": {"x": "3/4", "y": "1/4"}, "b": {"x": "1/4", "y": "3/4"}},
                }
            ],
        }
    notes = [mutate(rnd, doc) for _ in range(rnd.choice([0, 1, 1, 2]))]
    as_json = rnd.random() < 0.3
    name = "spec.json" if as_json else "spec.toml"
    text = json.dumps(doc, default=str).encode() if as_json else dumps(doc).encode()
    if rnd.random() < 0.1:
        text = broken_text(rnd, text.decode("utf-8", "replace"))
    argv = [
        "analyze",
        kind,
        name,
        *rnd.choice([[], ["--json"]] if kind == "cw-finite" else
                    [[], ["--json"], ["--svg", "o.svg"], ["--svg", "out"]]),
    ]
    return (Step(tuple(argv), (Action("write", name, text), Action("mkdir", "out"))),), tuple(notes)


def _local_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    def num(*good: str) -> str:
        return rnd.choice([*good, *good, "0", "-1", "nan", "inf", "1e9", "x", "3.5"])

    argv = [
        "local-plan",
        "--domain",
        num("2", "4", "8"),
        "--horizon",
        num("2", "4", "16"),
        "--epsilon",
        num("1", "0.5", "4"),
        "--population",
        num("10", "1000"),
    ]
    if rnd.random() < 0.5:
        argv += ["--changes", num("0", "1", "3")]
    return (Step(tuple(argv)),), ()


WORDS = [
    "plan",
    "run",
    "report",
    "follow",
    "capture",
    "local-plan",
    "account",
    "analyze",
    "audit",
    "verify",
    "suggest",
    "check",
    "sqlite-install-triggers",
    "--help",
    "-h",
    "--version",
    "--json",
    "--until",
    "--simulate",
    "x",
    "dpcr.toml",
    "--quiet",
    "--log-format",
    "yaml",
    "--",
    "-",
    "region",
    "postgres",
    "kafka",
    "--runs",
    "-5",
    "--unit",
    "é",
    "\udcff",
    "--once",
    "--no-report",
]


def _argv_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    doc = valid_config(rnd)
    argv = tuple(rnd.choice(WORDS) for _ in range(rnd.randint(0, 5)))
    log = changelog(rnd, entries=3)
    return (
        Step(
            argv,
            (
                Action("write", "dpcr.toml", dumps(doc).encode()),
                Action("rows", "log.jsonl", ("jsonl", log, ())),
            ),
        ),
    ), ()


def _audit_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    doc = valid_config(rnd)
    notes = [mutate(rnd, doc)] if rnd.random() < 0.3 else []
    argv = [
        "audit",
        "dpcr.toml",
        "--runs",
        rnd.choice(["10", "50", "5", "x"]),
        "--candidates",
        rnd.choice(["1", "2", "0", "-1"]),
        "--seed",
        "4",
    ]
    if rnd.random() < 0.3:
        argv += rnd.choice(
            [
                ["--alpha", rnd.choice(["0", "1", "nan", "0.5"])],
                ["--noise-factor", rnd.choice(["0", "inf", "nan", "0.5"])],
                ["--unit", rnd.choice(["0", "r1", "nobody"])],
                ["--json"],
            ]
        )
    actions = (
        Action("write", "dpcr.toml", dumps(doc).encode()),
        Action("rows", "log.jsonl", ("jsonl", changelog(rnd, entries=6), ())),
    )
    return (Step(tuple(argv), actions),), tuple(notes)


def _interrupt_case(rnd: random.Random) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """Ctrl-C during a run (the first, or one continuing from the incremental state), then the
    same run again: exit 130 (or 0 when it finished first), and the rerun works."""
    doc = {
        "source": {"format": rnd.choice(["jsonl", "csv"]), "path": "log.data"},
        "privacy": {"epsilon": 1.0},
        "constraint": _constraint(rnd),
        "release": {"plan": rnd.choice(["disjoint", "tree"]), "start": START, "period": "12h"},
        "query": _queries(rnd, exhausted=False),
        "output": {"dir": "out"},
    }
    fmt = doc["source"]["format"]
    log = changelog(rnd, entries=rnd.randint(20, 60))
    half = len(log) // 2
    delay = round(rnd.uniform(0.01, 0.35), 3)
    first = rnd.random() < 0.3
    steps = [
        Step(("run", "dpcr.toml", "--until", "2025-01-04", "--quiet"),
             (Action("write", "dpcr.toml", dumps(doc).encode()),
              Action("rows", "log.data", (fmt, log[:half], ()))),
             interrupt=delay if first else None),
        Step(("run", "dpcr.toml", "--until", "2025-01-09", "--quiet"),
             (Action("rows", "log.data", (fmt, log[half:], ())),),
             interrupt=None if first else delay),
        Step(("run", "dpcr.toml", "--until", "2025-01-09", "--quiet")),
    ]  # fmt: skip
    return tuple(steps), (f"Ctrl-C after {delay} s in run {1 if first else 2}",)


#: family -> (generator, number of cases in a run of 1,000; the list is scaled to ``count``)
FAMILIES: dict[str, tuple[Any, int]] = {
    "config": (_config_case, 450),
    "run": (_run_case, 110),
    "source_file": (_source_file_case, 50),
    "report": (_report_case, 20),
    "follow": (_follow_case, 25),
    "capture": (_capture_case, 20),
    "triggers": (_triggers_case, 45),
    "analyze": (_analyze_case, 70),
    "local": (_local_case, 40),
    "argv": (_argv_case, 130),
    "interrupt": (_interrupt_case, 20),
    "audit": (_audit_case, 20),
}


def _family(index: int) -> str:
    """Families interleaved in a fixed pattern of 1,000 slots."""
    total = sum(n for _, n in FAMILIES.values())
    slot = (index * 7919) % total
    for name, (_, n) in FAMILIES.items():
        if slot < n:
            return name
        slot -= n
    raise AssertionError(slot)


def make_case(seed: int, index: int) -> Case:
    family = _family(index)
    rnd = random.Random(f"dpcr-cli-fuzz:{seed}:{index}")
    steps, notes = FAMILIES[family][0](rnd)
    return Case(seed=seed, index=index, family=family, steps=steps, notes=notes)


def case_list(seed: int, count: int) -> list[Case]:
    return [make_case(seed, i) for i in range(count)]
