"""Where a run writes, and how.

``output.dir`` (default ``out``) holds three things side by side:

* ``public/`` (0755, files 0644): what may be published, and nothing else: ``releases.csv`` /
  ``releases.json`` (DP values and their exact uncertainty), ``summary.json`` (the plan, the
  guarantee, what was released), ``release-head.json`` (the store state they came from),
  ``report.html`` and, with alert rules, ``alerts.csv`` / ``alerts.json``;
* ``operator/`` (0700, files 0600): ``diagnostics.json`` (exact counts and times from the raw
  data), ``quarantine.jsonl`` (raw records), the operator report, ``scratch/`` and DuckDB's
  ``duckdb-tmp/``;
* the store (``store.sqlite``, 0600, with its log, shared memory and lock) and its state folder
  ``store.sqlite.state/`` (0700), unless ``output.store`` puts them elsewhere.

A simulation (seeded noise: its values reveal the exact statistics to whoever knows the seed)
writes its outputs to ``simulation/`` (0700, files 0600), never to ``public/``. Folders are
created with these modes whatever the umask; what exists keeps its mode. Nothing is written
through a symbolic link (:mod:`dpcr._fs`): :func:`dpcr.release._layout.check_layout` refuses
one before anything is written. Every file is replaced atomically. The files a run writes after
its commit (the public files, ``diagnostics.json``) are not flushed to the disk: the store holds
what each shows, and a run writes again one that a power cut left empty or cut short
(:func:`dpcr.release._layout.check_published`; docs/store.md, "After a crash").
docs/attack-model.md says what each may reveal.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import logging
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr._fs import (
    ensure_dir,
    full,
    write_atomic,
)
from dpcr._lastused import LastUsed
from dpcr.errors import DiskFullError
from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow
from dpcr.release._settings import OPERATOR_FOLDER

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "HEAD_FILE",
    "OUTPUT_FIELDS",
    "PUBLIC_FILES",
    "operator_dir",
    "public_dir",
    "public_texts",
    "table_texts",
    "write_outputs",
    "write_public",
    "write_table",
]

#: Written beside the public outputs: the store head they were published from.
HEAD_FILE = "release-head.json"
#: Every file dpcr writes into the public folder (and wrote into ``output.dir`` itself before
#: the public folder existed).
PUBLIC_FILES = (HEAD_FILE, "summary.json", "releases.csv", "releases.json", "alerts.csv",
                "alerts.json", "report.html")  # fmt: skip
SIMULATION_MARK = "SIMULATION: seeded noise, not for publication"
#: (folder, file) modes: the public folder, and everything operator-only (a simulation's too).
PUBLIC_MODES = (0o755, 0o644)
PRIVATE_MODES = (0o700, 0o600)
#: The notices of a run (a layout migrated), one line each.
log = logging.getLogger("dpcr")

_COMMITTED = (
    "The release is committed in the store (intact): free space and run again; the next run "
    "rewrites every public output from the store, drawing nothing again"
)


@functools.lru_cache(maxsize=256)
def _under(folder: Path | str, *names: str) -> Path:
    """``Path(folder).joinpath(*names)``, made once (a run asks for the same few paths many
    times; a path is immutable)."""
    return Path(folder).joinpath(*names)


def public_dir(settings: ReleaseSettings, *, simulation: bool) -> Path:
    """Where the public outputs go: ``<output>/public``, or ``<output>/simulation`` for seeded
    runs (whose every row is marked, operator-only), so simulated values never land in the
    public folder."""
    return _under(settings.output_dir, "simulation" if simulation else "public")


def public_modes(*, simulation: bool) -> tuple[int, int]:
    """(folder, file) modes of the outputs: public, or owner-only for a simulation."""
    return PRIVATE_MODES if simulation else PUBLIC_MODES


def operator_dir(settings: ReleaseSettings, *, create: bool = True) -> Path:
    """``<output>/operator``, created owner-only (0700) when missing (a symbolic link there
    is refused)."""
    path = _under(settings.output_dir, OPERATOR_FOLDER)
    if create:
        ensure_dir(_under(settings.output_dir), PUBLIC_MODES[0], follow=True)
        ensure_dir(path, PRIVATE_MODES[0])
    return path


def scratch_dir(settings: ReleaseSettings) -> Path:
    """``<output>/operator/scratch``, owner-only, created on first use: still copies of a
    changelog's bytes that a run reads (deleted when it ends)."""
    return ensure_dir(operator_dir(settings) / "scratch", PRIVATE_MODES[0])


def state_path(settings: ReleaseSettings) -> Path:
    """The incremental state file, in an owner-only folder beside the store
    (``<store>.state/``, created 0700 by :func:`dpcr.engines.state.attach`; a symbolic
    link there is refused): DuckDB creates the file's write-ahead log with the process's
    default mode, so the folder is what keeps the per-unit data operator-only."""
    store = settings.store_path
    return _under(store.parent, store.name + ".state", "state.duckdb")


def noise_tables(settings: ReleaseSettings) -> Path:
    """``<store>.noise/``: the noise samplers' inversion tables, by distribution (no data;
    :func:`dpcr.noise.table_cache`), so that a process need not compute them again."""
    store = settings.store_path
    return store.with_name(store.name + ".noise")


def source_blocks(settings: ReleaseSettings) -> Path:
    """Where a line file's block digests are kept between runs
    (:func:`dpcr.changelog.position.advance`): in the store's owner-only state folder."""
    return state_path(settings).with_name("source-blocks")


def quiet_path(settings: ReleaseSettings) -> Path:
    """Where the summary of an incremental state at rest is kept for runs that read nothing
    (:mod:`dpcr.release._quiet`): in the store's owner-only state folder."""
    return state_path(settings).with_name("quiet.json")


def clear_scratch(settings: ReleaseSettings) -> None:
    """Delete what a killed run left in the scratch folder, if there is one (the store's lock
    is held, so no other run is using it; nothing is created, no link is followed)."""
    path = operator_dir(settings, create=False) / "scratch"
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        for left in path.glob("dpcr-*"):
            left.unlink(missing_ok=True)


def legacy_dir(settings: ReleaseSettings) -> Path:
    """Where releases made before the public folder existed kept their public files."""
    return _under(settings.output_dir)


def published_path(settings: ReleaseSettings) -> Path:
    """Where the digests of the public files the last run wrote are kept (in the store's
    owner-only state folder)."""
    return state_path(settings).with_name("published.json")


def record_published(settings: ReleaseSettings, head: str | None, digests: dict[str, str]) -> None:
    """Keep the SHA-256 of each public file a run wrote (``digests``: path -> hex; kept by
    their path in the output folder) with the store head they were written at. A lost or stale
    record only makes the next run parse the files
    (:func:`dpcr.release._layout.check_published`)."""
    if head is None:
        return
    out = _under(settings.output_dir)
    files = {_relative(Path(p), out): sha for p, sha in digests.items()}
    path = published_path(settings)
    ensure_dir(path.parent, PRIVATE_MODES[0])
    write_atomic(path, json_indented({"head": head, "files": files}, 1, sort_keys=True),
                 mode=PRIVATE_MODES[1], durable=False)  # fmt: skip


def _relative(path: Path, out: Path) -> str:
    """``os.path.relpath(path, out)``, without its two absolute paths when ``path`` is in
    ``out`` as spelt."""
    text, folder = str(path), str(out)
    if text.startswith(folder + os.sep) and folder not in (".", "") and ".." not in path.parts:
        return text[len(folder) + 1 :]
    return os.path.relpath(path, out)


def as_published(
    settings: ReleaseSettings, store: Any, folders: Sequence[Path]
) -> Published | None:
    """Whether every public file in ``folders`` is byte for byte one that a run of this store
    wrote at a head the store holds (so the store accounts for every value it shows): the
    head and the bytes of each file (by path) when it is, else None."""
    from dpcr._fs import read_nofollow
    from dpcr.errors import OutputError

    try:
        kept = json.loads(read_nofollow(published_path(settings)))
        head, files = kept["head"], kept["files"]
        if not isinstance(head, str) or not isinstance(files, dict) or not store.holds(head):
            return None
        out = _under(settings.output_dir)
        texts: dict[Path, bytes] = {}
        for folder in folders:
            for name in PUBLIC_FILES:
                path = _under(folder, name)
                if os.path.lexists(path):
                    digest, texts[path] = _content(path)
                    if files.get(_relative(path, out)) != digest:
                        return None
    except (OutputError, ValueError, KeyError, TypeError):
        return None
    return Published(head=head, texts=texts)


@dataclass(frozen=True, slots=True)
class Published:
    """The public files a check found as a run of the store wrote them at ``head``: their
    bytes by path (:func:`as_published`)."""

    head: str
    texts: dict[Path, bytes]


def published_rows(
    settings: ReleaseSettings, store: Any, *, simulation: bool
) -> list[ReleaseRow] | None:
    """The rows of ``releases.json`` when every public file the store's last run wrote is
    there, byte for byte, and the store is still at the head they were written at (so the file
    shows what the store's values give now); None otherwise."""
    texts = _published_texts(settings, store.recorded_head(), PUBLIC_FILES,
                             simulation=simulation)  # fmt: skip
    text = None if texts is None else texts.get("releases.json")
    return None if text is None else rows_of(text)


def published_rows_at(
    settings: ReleaseSettings, head: str | None, simulation: bool
) -> list[ReleaseRow] | None:
    """The rows of ``releases.json`` when it is the file a run wrote at the store head
    ``head`` (its digest as recorded); None otherwise."""
    texts = published_releases(settings, head, simulation=simulation)
    return None if texts is None else rows_of(texts[1])


def rows_of(text: bytes) -> list[ReleaseRow] | None:
    """The rows of a ``releases.json`` text (None: not such a text)."""
    try:
        records = json.loads(text)
        return [ReleaseRow(**{f: r[f] for f in OUTPUT_FIELDS}) for r in records]
    except (ValueError, KeyError, TypeError):
        return None


def published_releases(
    settings: ReleaseSettings, head: str | None, *, simulation: bool
) -> tuple[bytes, bytes] | None:
    """The bytes of ``releases.csv`` and ``releases.json`` when both are those a run wrote at
    the store head ``head`` (their digests as it recorded them); None otherwise."""
    texts = _published_texts(settings, head, ("releases.csv", "releases.json"),
                             simulation=simulation)  # fmt: skip
    if texts is None or len(texts) != 2:
        return None
    return texts["releases.csv"], texts["releases.json"]


def _published_texts(
    settings: ReleaseSettings, head: str | None, names: Sequence[str], *, simulation: bool
) -> dict[str, bytes] | None:
    """The bytes of the public files ``names`` that the run which recorded its digests at
    ``head`` wrote, each as written (by name; a file it did not write is left out); None when
    the record is of another head or a file is not as it was written."""
    from dpcr._fs import read_nofollow
    from dpcr.errors import OutputError

    if head is None:
        return None
    out = _under(settings.output_dir)
    folder = public_dir(settings, simulation=simulation)
    try:
        kept = json.loads(read_nofollow(published_path(settings)))
        files = kept["files"]
        if kept["head"] != head or not isinstance(files, dict):
            return None
        texts = {}
        for name in names:
            key = _relative(folder / name, out)
            if key in files:
                digest, texts[name] = _content(folder / name)
                if digest != files[key]:
                    return None
        return texts
    except (OutputError, ValueError, KeyError, TypeError):
        return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: The public files this process wrote last, by file (:func:`_file`): the SHA-256 and the bytes
#: it wrote (a file read back with the same bytes has that digest: a long-running session
#: hashes none of the files it wrote again), and the SHA-256 state of those bytes but the last
#: :data:`_HASH_TAIL` or fewer, with its length (:func:`_digest`). The 8 files used last are
#: kept (a session's intervals thread and its steps may both use it).
_WRITTEN: LastUsed[tuple[int, int, str] | str, tuple[str, bytes, int, Any]] = LastUsed(8)
#: A file's bytes hashed again at each write, at least: the release tables grow by rows written
#: before their last bytes (``releases.json``'s ``"\n]"``).
_HASH_TAIL = 4096


def _digest(data: bytes, before: tuple[str, bytes, int, Any] | None) -> tuple[str, int, Any]:
    """The SHA-256 (hex) of ``data``, a file's new bytes, and the hash state of its first
    ``p`` bytes (``p``, the state): from the state :data:`_WRITTEN` kept of the bytes written
    before (``before``) where ``data`` begins with the bytes that state hashed (a session's
    release tables, which grow at their end: a step hashes what it adds, not the year)."""
    start, h = 0, hashlib.sha256()
    if before is not None:
        _, old, length, state = before
        if 0 < length <= len(data) and data.startswith(memoryview(old)[:length]):
            start, h = length, state.copy()
    view = memoryview(data)
    length = max(start, len(data) - _HASH_TAIL)
    h.update(view[start:length])
    state = h.copy()
    h.update(view[length:])
    return h.hexdigest(), length, state


def _file(path: Path) -> tuple[int, int, str] | str:
    """The file at ``path`` however it is spelt: its folder's device and inode and its name
    (the path's text when the folder cannot be looked at)."""
    try:
        st = os.stat(path.parent)
    except OSError:
        return str(path)
    return st.st_dev, st.st_ino, path.name


def _content(path: Path) -> tuple[str, bytes]:
    """The SHA-256 (hex) and the bytes of the public file at ``path`` (read without following
    a link)."""
    from dpcr._fs import read_nofollow

    data = read_nofollow(path)
    known = _WRITTEN.get(_file(path))
    if known is not None and known[1] == data:
        return known[0], data
    return _sha256(data), data


def table_texts(
    out: Path,
    name: str,
    fields: Sequence[str],
    records: Sequence[dict[str, Any]],
    *,
    prior: tuple[bytes, bytes] | None = None,
) -> dict[Path, str]:
    """The texts of ``<name>.csv`` and ``<name>.json`` in the folder ``out`` (path -> text).
    ``prior``: the files' bytes as they are, which hold the rows before ``records`` (written
    with the same fields): the new texts are those bytes with ``records`` appended, the text
    writing every row gives."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)  # (what csv.DictWriter writes, without its per-row key check)
    if prior is None:
        writer.writerow(fields)
    writer.writerows([[r.get(f, "") for f in fields] for r in records])
    csv_text, json_text = text.getvalue(), json_records(records)
    if prior is not None:
        csv_text = prior[0].decode("utf-8") + csv_text
        json_text = _json_append(prior[1].decode("utf-8"), json_text)
    return {out / f"{name}.csv": csv_text, out / f"{name}.json": json_text}


def write_table(
    out: Path,
    name: str,
    fields: Sequence[str],
    records: Sequence[dict[str, Any]],
    *,
    simulation: bool = False,
    prior: tuple[bytes, bytes] | None = None,
) -> dict[str, str]:
    """``<name>.csv`` and ``<name>.json`` in the folder ``out`` (:func:`table_texts`), each
    replaced atomically without an fsync (:func:`write_public`); returns the SHA-256 of each
    (path -> hex)."""
    texts = table_texts(out, name, fields, records, prior=prior)
    _public_folder(out, simulation=simulation)
    return {str(path): _write_public(path, text, simulation=simulation, durable=False)
            for path, text in texts.items()}  # fmt: skip


def _json_append(before: str, new: str) -> str:
    """The text :func:`json_records` gives for the records of ``before`` and then those of
    ``new`` (both its texts)."""
    if new == "[]":
        return before
    if before == "[]":
        return new
    return before[: -len("\n]")] + ",\n" + new[len("[\n"):]


def json_records(records: Sequence[dict[str, Any]]) -> str:
    """``json.dumps(list(records), indent=1)`` of flat records (scalar values): the same text,
    without the pure-Python encoder that ``indent`` selects (several times faster)."""
    if not records:
        return "[]"
    dumps = _json_value
    keys: dict[str, str] = {}
    parts = []
    for record in records:
        if not record:
            parts.append(" {}")
            continue
        items = []
        for k, v in record.items():
            if k not in keys:
                keys[k] = f"  {dumps(k)}: "
            items.append(keys[k] + dumps(v))
        parts.append(" {\n" + ",\n".join(items) + "\n }")
    return "[\n" + ",\n".join(parts) + "\n]"


class _Other(Exception):
    """A value :func:`json_indented` leaves to ``json.dumps``."""


def json_indented(
    value: Any, indent: int, *, sort_keys: bool = False, default: Any = None
) -> str:
    """``json.dumps(value, indent=indent, sort_keys=sort_keys, default=default)``: the same
    text, without the pure-Python encoder that ``indent`` selects (dicts with text keys,
    lists, tuples and scalars written here; anything else by ``json.dumps``)."""
    parts: list[str] = []
    try:
        _indented(value, parts, "\n", " " * indent, sort_keys, default)
    except _Other:
        return json.dumps(value, indent=indent, sort_keys=sort_keys, default=default)
    return "".join(parts)


def _indented(value: Any, parts: list[str], newline: str, step: str, sort_keys: bool,
              default: Any) -> None:  # fmt: skip
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        if not value:
            parts.append("{}" if kind is dict else "[]")
            return
        inner = newline + step
        parts.append("{" if kind is dict else "[")
        if kind is dict:
            items = sorted(value.items()) if sort_keys else value.items()
            if any(type(k) is not str for k in value):
                raise _Other
            for n, (k, v) in enumerate(items):
                parts.append(("," if n else "") + inner + encode_basestring_ascii(k) + ": ")
                _indented(v, parts, inner, step, sort_keys, default)
        else:
            for n, v in enumerate(value):
                parts.append(("," if n else "") + inner)
                _indented(v, parts, inner, step, sort_keys, default)
        parts.append(newline + ("}" if kind is dict else "]"))
    elif kind in _SCALARS or value is None:
        parts.append(_json_value(value))
    elif isinstance(value, (str, int, float, dict, list, tuple)) or default is None:
        raise _Other
    else:
        _indented(default(value), parts, newline, step, sort_keys, default)


_SCALARS = (str, int, float, bool)
_FLOATS = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _json_value(value: Any) -> str:
    """``json.dumps(value)`` of a scalar, without its encoder's set-up (strings, numbers, None
    and booleans written directly; anything else by ``json.dumps``)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is float or (kind is not bool and isinstance(value, float)):
        if value != value:
            return "NaN"
        return _FLOATS.get(value) or float.__repr__(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return json.dumps(value)


def write_public(path: Path, content: str, *, simulation: bool, durable: bool = True) -> str:
    """Write one public output (a run's, after its commit) into its folder, created with the
    public (or simulation) modes; returns its SHA-256 (hex). A full disk says that the release
    is committed and the next run rewrites the outputs. ``durable``: flushed to the disk
    before it replaces the file; the files a run derives from the store are not (a file a
    power cut leaves empty or cut short at a block is written again by the next run:
    :func:`dpcr.release._layout.check_published`)."""
    _public_folder(path.parent, simulation=simulation)
    return _write_public(path, content, simulation=simulation, durable=durable)


def _public_folder(folder: Path, *, simulation: bool) -> None:
    """The folder of public (or simulation) outputs, created with its modes when missing."""
    try:
        ensure_dir(folder.parent, PUBLIC_MODES[0], follow=True)
        ensure_dir(folder, public_modes(simulation=simulation)[0])
    except DiskFullError:
        raise full(folder, then=_COMMITTED) from None


def _write_public(path: Path, content: str, *, simulation: bool, durable: bool) -> str:
    """:func:`write_public` into a folder that exists."""
    data = content.encode("utf-8")
    try:
        write_atomic(path, data, mode=public_modes(simulation=simulation)[1], durable=durable)
    except DiskFullError:
        raise full(path, then=_COMMITTED) from None
    key = _file(path)
    digest, length, state = _digest(data, _WRITTEN.get(key))
    _WRITTEN.put(key, (digest, data, length, state))
    return digest


def public_texts(
    settings: ReleaseSettings,
    rows: Sequence[ReleaseRow],
    summary: dict[str, Any],
    *,
    head: str | None,
    prior: tuple[bytes, bytes, int] | None = None,
) -> dict[Path, str]:
    """The texts of a run's public files (path -> text): ``releases.csv`` and
    ``releases.json`` of ``rows``, ``summary.json`` of the public ``summary`` stamped with the
    store ``head``, and ``release-head.json``. ``prior``: the bytes of ``releases.csv`` and
    ``releases.json`` as they are and the number of ``rows`` they hold (the first ones): only
    the later rows are written out, appended to those bytes (:func:`table_texts`)."""
    simulation = bool(summary.get("simulation"))
    out = public_dir(settings, simulation=simulation)
    records = [r.record() for r in (rows if prior is None else rows[prior[2]:])]
    fields: Sequence[str] = OUTPUT_FIELDS
    if simulation:
        records = [{**r, "simulation": SIMULATION_MARK} for r in records]
        fields = (*OUTPUT_FIELDS, "simulation")
    texts = table_texts(out, "releases", fields, records,
                        prior=None if prior is None else prior[:2])  # fmt: skip
    texts[out / "summary.json"] = json_indented({**summary, "store_head": head}, 2,
                                                default=str)  # fmt: skip
    if head is not None:
        texts[out / HEAD_FILE] = json_indented(
            {"store_head": head, "fingerprint": settings.fingerprint(),
             "simulation": simulation}, 2)  # fmt: skip
    return texts


def write_outputs(
    settings: ReleaseSettings,
    rows: Sequence[ReleaseRow],
    summary: dict[str, Any],
    diagnostics: dict[str, Any],
    *,
    head: str | None = None,
    prior: tuple[bytes, bytes, int] | None = None,
) -> dict[str, str]:
    """The public outputs (:func:`public_texts`) and the operator's diagnostics of a run;
    returns the SHA-256 of each public file (path -> hex). Nothing is flushed to the disk:
    the store holds what every file shows, and the next run writes again a public file that a
    power cut left empty or cut short (:func:`dpcr.release._layout.check_published`)."""
    simulation = bool(summary.get("simulation"))
    _public_folder(public_dir(settings, simulation=simulation), simulation=simulation)
    digests = {
        str(path): _write_public(path, text, simulation=simulation, durable=False)
        for path, text in public_texts(settings, rows, summary, head=head, prior=prior).items()
    }
    private = operator_dir(settings)
    try:  # (not flushed to the disk: the store's run summary holds the same diagnostics)
        write_atomic(
            private / "diagnostics.json",
            json_indented(diagnostics, 2, default=str),
            mode=PRIVATE_MODES[1],
            durable=False,
        )
    except DiskFullError:
        raise full(private / "diagnostics.json", then=_COMMITTED) from None
    return digests
