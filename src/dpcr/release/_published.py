"""Public outputs the store must account for, checked before anything is released.

A run (and ``dpcr report``) first reads every public file that carries the store head or
released values, in the public folder and where the layout before it kept them:
``release-head.json`` and ``summary.json`` (the head, the number of released intervals),
``releases.csv`` and ``releases.json`` (the rows), ``alerts.csv`` and ``alerts.json`` (the alert
answers), and the data embedded in ``report.html`` (``<script id="dpcr-data">``: rows, alert
answers, summary). It refuses (one :class:`~dpcr.errors.StoreError`) when any of them shows what
this store cannot account for:

* any public output beside a store that holds no release (a lost store replaced by a new one);
* a head the store never held (another release's store, an older backup with a newer head);
* more released intervals, or a row of a later interval, than the store released (an older
  backup restored with its own head while newer outputs survive);
* a row (interval, statistic, key) whose published values differ from what the store's released
  values give through the computation every run publishes with
  (:func:`~dpcr.release._rows.released_rows`, at the number of intervals the file shows);
* an alert answer the store does not hold;
* a file that cannot be read, or is truncated, other than what a power cut leaves of the file
  the store gives now (:func:`dpcr.release._layout.check_published`).

A run first compares each file with the digests of the files the store's runs wrote
(:func:`dpcr.release._layout.check_published`): when every file is one of them, at a head the
store holds, nothing needs parsing; :func:`verify_published` parses and checks every file.

Releasing from such a store would draw fresh noise for values already public, and the average of
two independent draws of a statistic costs twice the privacy the summary states. Outputs written
from an earlier state of this store (a run stopped between its commit and its outputs) are
accounted for: the store holds every value they show, and the run rewrites them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr._fs import read_nofollow
from dpcr.errors import RewrittenError, StoreError
from dpcr.release._results import OUTPUT_FIELDS

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import Store

__all__ = ["verify_published"]

_DATA = re.compile(r'<script type="application/json" id="dpcr-data">(.*?)</script>', re.S)
_ROW_KEY = ("interval", "query", "key")
_ALERT_KEY = ("rule", "interval", "key")
_ALERT_FIELDS = ("rule", "statistic", "key", "interval", "end", "above", "value")


class Unreadable(ValueError):
    """A public file that cannot be parsed (truncated, edited, not what dpcr writes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """What one public file shows. ``form`` is how its values are written: ``csv`` (text),
    ``json``, or ``html`` (JSON with non-finite numbers as null)."""

    path: Path
    form: str
    head: str | None = None
    intervals: int | None = None
    rows: tuple[dict[str, Any], ...] = ()
    alerts: tuple[dict[str, Any], ...] = ()


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _same(read: Any, value: Any, form: str) -> bool:
    """Whether ``read`` (from a file of ``form``) is ``value`` as that file's writer writes it:
    text in a CSV file (``str``, None as empty), JSON values (non-finite numbers as null in the
    report's embedded data)."""
    if form == "csv":
        text = "" if value is None else str(value)
        return bool(read == text or (isinstance(value, float) and _close(read, value)))
    if form == "html":
        value = _finite(value)
    if type(read) is not type(value):
        return False
    return bool(read == value or (read != read and value != value)  # (NaN is NaN)
                or (isinstance(value, float) and _close(read, value)))


#: How far a derived number (an estimate, a std, an interval bound: floating-point
#: post-processing of the stored values) may move between dpcr versions and still be the same
#: published value. Fresh noise moves a value by at least one grid step, many orders more.
_REL = 1e-9


def _close(read: Any, value: float) -> bool:
    try:
        number = float(read)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and math.isclose(number, value, rel_tol=_REL, abs_tol=1e-12)


def _csv_rows(text: str, needed: Sequence[str]) -> tuple[dict[str, Any], ...]:
    if not text.endswith("\n"):
        raise Unreadable("its last line is cut")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None or not set(needed) <= set(reader.fieldnames):
        raise Unreadable(f"its header does not name {', '.join(needed)}")
    rows = []
    for k, row in enumerate(reader, start=2):
        if None in row or any(v is None for v in row.values()):
            raise Unreadable(f"line {k} does not have the header's fields")
        rows.append(row)
    return tuple(rows)


def _records(data: Any, needed: Sequence[str], what: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(data, list) or not all(
        isinstance(r, dict) and set(needed) <= set(r) for r in data
    ):
        raise Unreadable(f"its {what} are not records naming {', '.join(needed)}")
    return tuple(data)


def _object(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise Unreadable("it is not a JSON object")
    return data


def _head(data: dict[str, Any], *, required: bool) -> str | None:
    head = data.get("store_head")
    if head is None and not required:
        return None
    if not isinstance(head, str):
        raise Unreadable("its store_head is not a store head")
    return head


def _intervals(data: dict[str, Any]) -> int | None:
    n = data.get("released_intervals")
    if n is None:
        return None
    if not isinstance(n, int) or isinstance(n, bool):
        raise Unreadable("its released_intervals is not a number")
    return n


def parse(path: Path, text: str) -> Published:
    """What the public file ``path`` shows (:class:`Unreadable` when it cannot be parsed)."""
    name = path.name
    if name == "release-head.json":
        return Published(path=path, form="json", head=_head(_object(text), required=True))
    if name == "summary.json":
        data = _object(text)
        return Published(path=path, form="json", head=_head(data, required=False),
                         intervals=_intervals(data))  # fmt: skip
    if name == "releases.csv":
        return Published(path=path, form="csv", rows=_csv_rows(text, _ROW_KEY))
    if name == "releases.json":
        return Published(path=path, form="json",
                         rows=_records(json.loads(text), _ROW_KEY, "rows"))  # fmt: skip
    if name == "alerts.csv":
        return Published(path=path, form="csv", alerts=_csv_rows(text, _ALERT_KEY))
    if name == "alerts.json":
        return Published(path=path, form="json",
                         alerts=_records(json.loads(text), _ALERT_KEY, "alerts"))  # fmt: skip
    found = _DATA.search(text)
    if found is None or not text.rstrip().endswith("</html>"):
        raise Unreadable("it holds no complete embedded data (script id dpcr-data)")
    data = _object(found.group(1))
    summary = data.get("summary") or {}
    if not isinstance(summary, dict):
        raise Unreadable("its embedded summary is not an object")
    return Published(path=path, form="html", intervals=_intervals(summary),
                     rows=_records(data.get("rows", []), _ROW_KEY, "rows"),
                     alerts=_records(data.get("alerts", []), _ALERT_KEY, "alerts"))  # fmt: skip


def _unreadable(path: Path, detail: str) -> StoreError:
    return RewrittenError(
        f"{path} is unreadable or truncated ({detail}): dpcr cannot tell which values it "
        "published, so it cannot rule out drawing them again. Restore the file (from where it "
        "was published), or start a new release in a new output.dir"
    )


def _refuse(path: Path, store: Store, what: str) -> StoreError:
    return RewrittenError(
        f"{path} {what}: this store ({store.path}) cannot account for it; it was deleted, "
        "replaced or restored from an older backup, and releasing now would draw fresh noise "
        "for published values. Restore the store that produced them (docs/store.md), or start "
        "a new release in a new output.dir"
    )


def _read_all(
    folders: Sequence[Path], names: Sequence[str], remnant: Callable[[Path, bytes], bool]
) -> list[Published]:
    out = []
    for folder in folders:
        for name in names:
            path = folder / name
            if not os.path.lexists(path):
                continue
            data = read_nofollow(path)
            try:
                out.append(parse(path, data.decode("utf-8")))
            except (Unreadable, ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
                if remnant(path, data):
                    continue  # (it shows nothing the store does not hold; written again)
                raise _unreadable(path, str(exc).splitlines()[0] if str(exc) else "") from None
    return out


def _no_remnant(path: Path, data: bytes) -> bool:
    return False


def verify_published(
    settings: ReleaseSettings,
    store: Store,
    folders: Sequence[Path],
    names: Sequence[str],
    remnant: Callable[[Path, bytes], bool] = _no_remnant,
) -> None:
    """Refuse when a public file ``names`` in ``folders`` shows what ``store`` cannot account
    for (see the module docstring). ``remnant(path, bytes)``: whether a file that cannot be
    parsed is what a power cut left of the file the store gives (it shows nothing else)."""
    published = _read_all(folders, names, remnant)
    if not published:
        return
    head = store.recorded_head()
    if head is None:
        raise _refuse(published[0].path, store, "exists, but the store does not hold any release")
    n = store.source_state().interval
    for p in published:
        if p.head is not None and not store.holds(p.head):
            raise _refuse(p.path, store, (
                f"was published from a store state this store does not hold (published head "
                f"{p.head[:12]}, store {head[:12]})"))  # fmt: skip
        shown = max([p.intervals or 0] + [_interval(p, r) for r in (*p.rows, *p.alerts)])
        if shown > n:
            raise _refuse(p.path, store, (
                f"shows {shown} released intervals; the store released {n} (an older backup: "
                "it does not hold the newer values)"))  # fmt: skip
    _verify_rows(settings, store, [p for p in published if p.rows])
    _verify_alerts(settings, store, [p for p in published if p.alerts])


def _interval(p: Published, record: dict[str, Any]) -> int:
    value = record["interval"]
    try:
        n = int(value) if p.form == "csv" else value
    except ValueError:
        raise _unreadable(p.path, f"interval {value!r} is not a number") from None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _unreadable(p.path, f"interval {value!r} is not a positive whole number")
    return n


def _verify_rows(settings: ReleaseSettings, store: Store, published: list[Published]) -> None:
    """Every published row equals the row the store's values give at the file's count."""
    from dpcr.release._rows import released_rows

    expected: dict[int, dict[tuple[int, str, str], dict[str, Any]]] = {}
    for p in published:
        n = max(_interval(p, r) for r in p.rows)
        if n not in expected:
            expected[n] = {
                (r.interval, r.query, r.key): {f: getattr(r, f) for f in OUTPUT_FIELDS}
                for r in released_rows(settings, store, n)
            }
        _compare(p, store, p.rows, expected[n], OUTPUT_FIELDS, "row")


def _verify_alerts(settings: ReleaseSettings, store: Store, published: list[Published]) -> None:
    """Every published alert answer is one the store holds."""
    from dpcr.svt.pipeline import alert_rows

    held = {(str(a["rule"]), int(a["interval"]), str(a["key"])): a
            for a in alert_rows(settings, store)}  # fmt: skip
    for p in published:
        _compare(p, store, p.alerts, held, _ALERT_FIELDS, "alert answer")


def _key(p: Published, record: dict[str, Any], what: str) -> tuple[Any, ...]:
    """A row's (interval, statistic, key); an alert answer's (rule, interval, key)."""
    if what == "row":
        return (_interval(p, record), str(record["query"]), str(record["key"]))
    return (str(record["rule"]), _interval(p, record), str(record["key"]))


def _written(value: Any, form: str) -> Any:
    """``value`` as the writer of a file of ``form`` writes it (what reading it gives back)."""
    if form == "csv":
        return "" if value is None else str(value)
    return _finite(value) if form == "html" else value


def _compare(
    p: Published,
    store: Store,
    records: Sequence[dict[str, Any]],
    expected: dict[Any, dict[str, Any]],
    fields: Sequence[str],
    what: str,
) -> None:
    """Every record is one ``expected`` holds, field by field. The fields of the first record
    are compared as one tuple (fast); a record that differs is compared field by field."""
    shown = [f for f in fields if records and f in records[0]]
    for record in records:
        k = _key(p, record, what)
        want = expected.get(k)
        if want is None:
            raise _refuse(p.path, store, f"shows a {what} {k} the store does not hold")
        if [record[f] for f in shown] == [_written(want[f], p.form) for f in shown]:
            continue
        for f in fields:
            if f in record and not _same(record[f], want[f], p.form):
                raise _refuse(p.path, store, (
                    f"shows {f} = {record[f]!r} for the {what} {k}; the store's released "
                    f"values give {want[f]!r}"))  # fmt: skip
