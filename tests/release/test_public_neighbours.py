"""Neighbouring changelogs through the real command line, over several runs: every public file is
the same for D and D' (D without one privacy unit's whole history) except the released values,
which differ within the stated guarantee, and no run that succeeds on D' fails on D.

Each side lives in its own folder with its own configuration, changelog and outputs. Records
arrive in chunks, and ``dpcr run --until T`` runs after each chunk at several clocks, including
runs that close no interval (before and after the source changed). The removed unit also sends
bad records on D (a malformed line, an over-long line; in the cases of issue 30 point 1 a line
that is not UTF-8 and a CSV row with the wrong number of fields), which D' never sees. The noise
is switched off (``add_noise`` is the identity, as in tests/release/test_neighbours.py), so the
released values are the exact ones and the pair's privacy loss is exact:
ε_pair = Σ |d_i| / b_i (discrete Laplace) or ρ_pair = Σ d_i² / (2 σ_i²) (discrete Gaussian).

After every run, every file of the public folder (``dpcr.release._outputs.public_dir``) is read
on both sides and compared byte for byte once the released values are masked
(tests/release/public_files.py). That the public folder holds no operator-only file (the store,
its state and lock, ``operator/``) is :func:`test_the_public_folder_holds_only_public_files`
(issue 30 point 3).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import dpcr.release._draw as release_draw
from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent, event_from_dict
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.release._outputs import public_dir
from dpcr.store import Store
from release.public_files import snapshot
from release.test_neighbours import adversarial_log, busiest_units, unit_of, without

pytestmark = pytest.mark.slow

#: Operator-only names, which the public folder never holds (issue 30 point 3).
OPERATOR_NAMES = frozenset({
    "operator", "store.sqlite", "store.sqlite.lock", "store.sqlite.state",
    "store.sqlite.intervals.json", "simulation",
})  # fmt: skip

Row = dict[str, Any]


@dataclass(frozen=True)
class Config:
    """One release of the matrix: its ``[release]``, ``[constraint]``, unit, noise, queries."""

    plan: str
    constraint: str
    unit: str = "entry"
    noise: str = "laplace"
    queries: tuple[str, ...] = ("count", "sum", "histogram")
    alerts: bool = False
    fmt: str = "jsonl"
    on_exhausted: str | None = None
    epsilon: float = 1.0

    def toml(self, path: str) -> str:
        gaussian = self.noise == "gaussian"
        release = {
            "disjoint": 'plan = "disjoint"\nstart = "2025-01-01"\nperiod = "1d"\n'
            'end = "2025-01-17"',
            "tree": 'plan = "tree"\nstart = "2025-01-01"\nperiod = "1d"\nend = "2025-01-17"',
            "window": 'plan = "window"\nstart = "2025-01-01"\nperiod = "1d"\nwindow = "3d"\n'
            'end = "2025-01-17"',
            "sqrt": 'plan = "factorization"\nstart = "2025-01-01"\nperiod = "1d"\nhorizon = 16',
            "rescaled": 'plan = "factorization"\nfactorization = "rescaled"\n'
            'start = "2025-01-01"\nperiod = "1d"\nhorizon = 16',
            "blt": 'plan = "factorization"\nfactorization = "blt"\nstart = "2025-01-01"\n'
            'period = "1d"\nplanning_horizon = 16',
            "auto": 'start = "2025-01-01"\nperiod = "1d"\nend = "2025-01-17"',
        }[self.plan]
        constraint = {
            "at_most_k": "at_most_k = 3",
            "time_bounded": 'time_bounded = "2d"',
            "state_machine": '[constraint.state_machine]\ncolumn = "rides"\n'
            'buckets = { "0" = 0, "1" = 1, "2" = 2, "3+" = 3 }\n'
            'initial = ["0"]\ntransitions = ["0 -> 1 -> 2 -> 3+"]\n'
            'terminal = ["0", "1", "2", "3+"]',
            "hybrid": 'column = "kind"\n[constraint.classes.multi]\nat_most_k = 4\n'
            '[constraint.classes.monthly]\ntime_bounded = "3d"',
            "op_limits": "at_most_k = 4\ninserts = 1\ndeletes = 1",
        }[self.constraint]
        if self.on_exhausted:
            constraint = f'on_exhausted = "{self.on_exhausted}"\n{constraint}'
        queries = {
            "count": '[[query]]\nname = "active"\nkind = "count"',
            "sum": '[[query]]\nname = "fares"\nkind = "sum"\ncolumn = "fare"\nlower = 0\n'
            "upper = 100\ngrid = 0.5",
            "histogram": '[[query]]\nname = "zones"\nkind = "histogram"\ncolumn = "zone"\n'
            'keys = ["A", "B", "C"]',
            "exhausted": '[[query]]\nname = "exhausted"\nkind = "exhausted"',
            "events": '[[query]]\nname = "rides"\nkind = "events"\nop = "update"\n'
            '[[query]]\nname = "to_b"\nkind = "events"\nop = "update"\n'
            'before = { zone = ["A", "C"] }\nwhere = { zone = "B" }\n'
            '[[query]]\nname = "new_a"\nkind = "events"\nop = "insert"\nwhere = { zone = "A" }\n'
            '[[query]]\nname = "gone"\nkind = "events"\nop = "delete"',
        }
        alerts = (
            (
                '[[alerts]]\nname = "busy"\nstatistic = "active"\nwhat = "running"\n'
                "threshold = 2\ncutoff = 2\nepsilon = 0.5\n"
            )
            if self.alerts
            else ""
        )
        return (
            "\n".join(
                [
                    f'[source]\nformat = "{self.fmt}"\npath = "{path}"',
                    f'[privacy]\nunit = "{self.unit}"\nepsilon = {self.epsilon}'
                    + ('\nmechanism = "gaussian"\ndelta = 1e-6' if gaussian else ""),
                    f"[constraint]\n{constraint}",
                    f"[release]\n{release}",
                    *(queries[q] for q in self.queries),
                    alerts,
                    '[output]\ndir = "out"',
                ]
            )
            + "\n"
        )


# --- the removed unit's bad records ------------------------------------------------------------


def _line(m: Row) -> bytes:
    return json.dumps(m).encode()


def bad_records(kind: str, victim: Row, fmt: str) -> list[bytes]:
    """Raw records (without line ends) of ``kind`` in ``fmt`` that the unit of ``victim``
    sends: a line that is not JSON (a CSV row whose row is not JSON), an over-long line, a line
    that is not UTF-8, a CSV row with too few fields."""
    if kind == "csv_fields":
        return [b"%s,2025-01-02T00:00:00Z,10001,update" % victim["entry"].encode()]
    row = victim["after"] or victim["before"]
    after = dict(row, note="x")
    if kind == "long":
        after["pad"] = "p" * 1_000_000
    elif kind == "latin1":
        after["note"] = "MARK"
    elif kind != "malformed":
        raise ValueError(kind)
    text = json.dumps(after)
    if kind == "malformed":
        text = text.replace('"note"', '"note" "', 1)
    base = dict(victim, seq=10_000, op="update", before=row, after=text)
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(
            [base["entry"], base["ts"], base["seq"], base["op"], json.dumps(row), text]
        )
        line = out.getvalue().encode()
    else:
        line = json.dumps(base).encode().replace(json.dumps(text).encode(), text.encode())
    return [line.replace(b"MARK", b"Jos\xe9")]


# --- writing a side ----------------------------------------------------------------------------


def _csv_lines(rows: list[Row], *, header: bool) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if header:
        w.writerow(["entry", "ts", "seq", "op", "before", "after"])
    for m in rows:
        w.writerow(
            [
                m["entry"],
                m["ts"],
                m["seq"],
                m["op"],
                "" if m["before"] is None else json.dumps(m["before"]),
                "" if m["after"] is None else json.dumps(m["after"]),
            ]
        )
    return out.getvalue().encode()


def append(path: Path, fmt: str, rows: list[Row], bad: list[bytes]) -> None:
    fresh = not path.exists()
    if fmt == "csv":
        data = _csv_lines(rows, header=fresh)
    else:
        data = b"".join(_line(m) + b"\n" for m in rows)
    data += b"".join(b + b"\n" for b in bad)
    with path.open("ab") as fh:
        fh.write(data)


@dataclass
class Side:
    """One neighbour: its folder, its configuration, its runs' exit statuses and snapshots."""

    root: Path
    config: Path
    codes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    snapshots: list[dict[str, bytes]] = field(default_factory=list)

    def run(self, until: str) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", str(self.config), "--until", until, "--quiet"])
        self.codes.append(code)
        self.errors.append(err.getvalue().strip())
        folder = public_dir(load_config(self.config), simulation=False)
        self.snapshots.append(snapshot(folder, self.root, skip=OPERATOR_NAMES))


#: The clocks: each step appends the records up to ``cut`` (on both sides) and runs at ``until``.
#: Steps 2 and 3 close nothing (the first after new records arrived, the second with none).
SCHEDULE: list[tuple[str, str]] = [
    ("2025-01-03T00:00:00Z", "2025-01-03T00:00:00Z"),
    ("2025-01-04T12:00:00Z", "2025-01-03T00:00:00Z"),
    ("2025-01-04T12:00:00Z", "2025-01-03T00:00:00Z"),
    ("2025-01-08T00:00:00Z", "2025-01-07T00:00:00Z"),
    ("2025-01-20T00:00:00Z", "2025-01-12T00:00:00Z"),
    ("2025-01-20T00:00:00Z", "2025-01-17T00:00:00Z"),
]


def victim_unit(log: list[Row], column: str | None) -> str:
    """The unit with the most mutations (ties: the smallest name)."""
    return busiest_units(log, column)[0]


def run_pair(
    tmp: Path,
    config: Config,
    *,
    bad: tuple[str, ...] = (),
    bad_step: int = 1,
    unit_only_step: int | None = None,
    other: Config | None = None,
) -> tuple[Side, Side, str]:
    """Run the schedule on D and D'. ``bad``: kinds of bad records the removed unit appends to
    D at step ``bad_step``; ``unit_only_step``: a step where only the removed unit appends (a
    valid record of its own) and the clock closes nothing; ``other``: D''s configuration when
    it is not ``config`` (to check the harness)."""
    log = adversarial_log(7)
    column = None if config.unit == "entry" else config.unit
    unit = victim_unit(log, column)
    logs = {"D": log, "D1": without(log, unit, column)}
    victim = next(m for m in log if unit_of(m["after"] or m["before"], column, m["entry"]) == unit)
    name = "log.csv" if config.fmt == "csv" else "log.jsonl"
    sides = {}
    for side in logs:
        root = tmp / side
        root.mkdir()
        own = other if other is not None and side == "D1" else config
        (root / "dpcr.toml").write_text(own.toml(name), encoding="utf-8")
        sides[side] = Side(root=root, config=root / "dpcr.toml")
    done = "0000"
    for step, (cut, until) in enumerate(SCHEDULE):
        for side, rows in logs.items():
            new = [m for m in rows if done < m["ts"] <= cut]
            extra: list[bytes] = []
            if side == "D" and step == bad_step:
                extra = [b for kind in bad for b in bad_records(kind, victim, config.fmt)]
            if side == "D" and step == unit_only_step:
                new = [
                    dict(
                        victim,
                        seq=20_000,
                        ts="2025-01-04T13:00:00Z",
                        op="update",
                        before=victim["after"],
                        after=dict(victim["after"], rides=9),
                    )
                ]
            elif unit_only_step is not None and step == unit_only_step:
                new = []
            append(sides[side].root / name, config.fmt, new, extra)
        done = cut
        for s in sides.values():
            s.run(until)
    return sides["D"], sides["D1"], unit


def released(config_path: Path) -> tuple[dict[Any, int], dict[Any, Any], Any]:
    settings = load_config(config_path)
    with Store(settings.store_path, fingerprint=settings.fingerprint()) as st:
        values = {(r.query, r.key, r.layer, r.index): r.value for r in st.released()}
        events = {(q, lv, i): event_from_dict(e) for lv, i, q, e in st.ledger()}
    return values, events, settings


def pair_loss(settings: Any, a: dict[Any, int], b: dict[Any, int], events: dict[Any, Any]) -> float:
    """ε_pair (discrete Laplace) or ρ_pair (discrete Gaussian) of two exact released vectors."""
    total = 0.0
    for key in a.keys() | b.keys():
        query, _k, layer, index = key
        d = a.get(key, 0) - b.get(key, 0)
        if not d:
            continue
        inst = settings.plan.instance((layer, index))
        e = events[(query, inst[0], inst[1])]
        if isinstance(e, DiscreteLaplaceEvent):
            total += abs(d) / float(e.scale)
        elif isinstance(e, DiscreteGaussianEvent):
            total += d * d / (2 * float(e.sigma2))
        else:
            raise AssertionError(f"unexpected event {e!r}")
    return total


def check_pair(d: Side, d1: Side, unit: str) -> float:
    """The harness's assertions; returns the pair's loss over the stated one."""
    for step, (a, b) in enumerate(zip(d.codes, d1.codes, strict=True)):
        if b == 0:
            assert a == 0, (
                f"step {step + 1} ({SCHEDULE[step][1]}): the run succeeds without unit {unit!r} "
                f"and fails with it: {d.errors[step]}"
            )
    assert set(d1.codes) == {0}, d1.errors
    for step, (a, b) in enumerate(zip(d.snapshots, d1.snapshots, strict=True)):
        differ = [name for name in sorted(a.keys() | b.keys()) if a.get(name) != b.get(name)]
        assert not differ, (
            f"step {step + 1} ({SCHEDULE[step][1]}): {', '.join(differ)} differ between D and D' "
            f"beyond the released values (removed unit {unit!r}):\n"
            + "\n".join(
                f"{name}:\n{_first_difference(a.get(name, b''), b.get(name, b''))}"
                for name in differ
            )
        )
    values_d, events, settings = released(d.config)
    values_o, _, _ = released(d1.config)
    report = settings.explain()
    stated = report.rho if settings.noise.name == "gaussian" else report.epsilon
    loss = pair_loss(settings, values_d, values_o, events)
    assert loss <= stated * (1 + 1e-9), f"unit {unit!r}: pair loss {loss:.6g} > stated {stated}"
    return loss / stated


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"  D : ...{a[max(0, i - 150) : i + 150]!r}\n  D': ...{b[max(0, i - 150) : i + 150]!r}"


@pytest.fixture(autouse=True)
def noise_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)


#: Every plan kind, unit mode, statistic, constraint kind and noise at least once; the removed
#: unit sends a malformed line and an over-long line on D.
MATRIX = {
    "disjoint-k-entry": Config("disjoint", "at_most_k"),
    "tree-bounded-column-csv": Config("tree", "time_bounded", unit="rider_id", fmt="csv"),
    "window-machine-entry-gauss": Config(
        "window", "state_machine", noise="gaussian", queries=("count", "histogram", "exhausted")
    ),
    "sqrt-hybrid-column": Config("sqrt", "hybrid", unit="rider_id", noise="gaussian"),
    "rescaled-bounded-entry": Config(
        "rescaled", "time_bounded", noise="gaussian", queries=("count", "sum")
    ),
    "blt-k-column": Config(
        "blt", "at_most_k", unit="rider_id", noise="gaussian", queries=("count", "histogram")
    ),
    "auto-hybrid-entry-exhausted": Config(
        "auto", "hybrid", on_exhausted="retire", queries=("count", "sum", "exhausted")
    ),
    # per-op limits: the count is charged for an entry's insert and delete only
    "tree-op-limits-entry": Config("tree", "op_limits", queries=("count", "sum")),
    "tree-machine-column-retire": Config(
        "tree",
        "state_machine",
        unit="rider_id",
        on_exhausted="retire",
        queries=("count", "exhausted"),
    ),
    "tree-k-entry-events": Config("tree", "at_most_k", queries=("count", "events")),
    "window-bounded-column-events-gauss": Config(
        "window", "time_bounded", unit="rider_id", noise="gaussian",
        queries=("histogram", "events"),
    ),
}


@pytest.mark.parametrize("name", list(MATRIX))
def test_public_files_of_neighbours_differ_only_in_released_values(
    tmp_path: Path, name: str
) -> None:
    d, d1, unit = run_pair(tmp_path, MATRIX[name], bad=("malformed", "long"))
    ratio = check_pair(d, d1, unit)
    assert ratio > 0, "the harness saw no difference (a test that cannot fail is a defect)"


SMALL = Config("disjoint", "at_most_k", queries=("count",))


@pytest.mark.parametrize(("bad", "fmt"), [(("latin1",), "jsonl"), (("csv_fields",), "csv")])
def test_one_units_undecodable_record_never_halts_the_release(
    tmp_path: Path, bad: tuple[str, ...], fmt: str
) -> None:
    config = Config("disjoint", "at_most_k", queries=("count",), fmt=fmt)
    d, d1, unit = run_pair(tmp_path, config, bad=bad)
    check_pair(d, d1, unit)


@pytest.mark.parametrize("alerts", [False, True])
def test_one_units_record_between_runs_that_close_nothing_changes_no_public_file(
    tmp_path: Path, alerts: bool
) -> None:
    """Step 3 closes nothing, and only the removed unit appended a record since step 2."""
    config = Config("disjoint", "at_most_k", queries=("count",), alerts=alerts)
    d, d1, unit = run_pair(tmp_path, config, unit_only_step=2)
    check_pair(d, d1, unit)


def test_the_public_folder_holds_only_public_files(tmp_path: Path) -> None:
    d, _, _ = run_pair(tmp_path, SMALL)
    folder = public_dir(load_config(d.config), simulation=False)
    inside = sorted(p.name for p in folder.iterdir() if p.name in OPERATOR_NAMES)
    assert not inside, f"operator-only files in the public folder {folder}: {inside}"
    # nothing of the operator's machine either: the head file names the store's state only
    head = json.loads((folder / "release-head.json").read_text())
    assert set(head) == {"store_head", "fingerprint", "simulation"}, head


def test_the_harness_sees_a_difference_outside_the_released_values(tmp_path: Path) -> None:
    """Masking only released values: D' released under another budget differs in its plan and
    guarantee, and the harness says so."""
    d, d1, unit = run_pair(tmp_path, SMALL, other=dataclasses.replace(SMALL, epsilon=2.0))
    with pytest.raises(AssertionError, match="differ between D and D'"):
        check_pair(d, d1, unit)
