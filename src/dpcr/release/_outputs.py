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
through a symbolic link (:mod:`dpcr._fs`): :func:`check_layout` refuses one before anything is
written. Every file is replaced atomically. docs/attack-model.md says what each may reveal.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dpcr._fs import (
    ensure_dir,
    full,
    refuse_link,
    refuse_world_writable,
    write_atomic,
)
from dpcr.errors import DiskFullError
from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow

if TYPE_CHECKING:
    from dpcr.release._settings import ContinualRelease

__all__ = [
    "HEAD_FILE",
    "OUTPUT_FIELDS",
    "PUBLIC_FILES",
    "check_layout",
    "check_published",
    "operator_dir",
    "public_dir",
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


def public_dir(settings: ContinualRelease, *, simulation: bool) -> Path:
    """Where the public outputs go: ``<output>/public``, or ``<output>/simulation`` for seeded
    runs (whose every row is marked, operator-only), so simulated values never land in the
    public folder."""
    out = Path(settings.output_dir)
    return out / "simulation" if simulation else out / "public"


def public_modes(*, simulation: bool) -> tuple[int, int]:
    """(folder, file) modes of the outputs: public, or owner-only for a simulation."""
    return PRIVATE_MODES if simulation else PUBLIC_MODES


def operator_dir(settings: ContinualRelease, *, create: bool = True) -> Path:
    """``<output>/operator``, created owner-only (0700) when missing (a symbolic link there
    is refused)."""
    path = Path(settings.output_dir) / "operator"
    if create:
        ensure_dir(Path(settings.output_dir), PUBLIC_MODES[0], follow=True)
        ensure_dir(path, PRIVATE_MODES[0])
    return path


def scratch_dir(settings: ContinualRelease) -> Path:
    """``<output>/operator/scratch``, owner-only, created on first use: still copies of a
    changelog's bytes that a run reads (deleted when it ends)."""
    return ensure_dir(operator_dir(settings) / "scratch", PRIVATE_MODES[0])


def clear_scratch(settings: ContinualRelease) -> None:
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


def legacy_dir(settings: ContinualRelease) -> Path:
    """Where releases made before the public folder existed kept their public files."""
    return Path(settings.output_dir)


def check_layout(settings: ContinualRelease, *, simulation: bool) -> None:
    """Refuse, before anything is written, a symbolic link where dpcr writes (the public,
    simulation and operator folders and their files, the state folder, the intervals cache) and
    an output folder every local user may write to."""
    from dpcr.release._incremental import state_path
    from dpcr.release._rows import intervals_cache

    out = Path(settings.output_dir)
    refuse_world_writable(out, "the outputs")
    operator = operator_dir(settings, create=False)
    state = state_path(settings)
    paths = [operator, public_dir(settings, simulation=simulation), state.parent,
             intervals_cache(settings)]  # fmt: skip
    paths += [public_dir(settings, simulation=simulation) / name for name in PUBLIC_FILES]
    paths += [legacy_dir(settings) / name for name in PUBLIC_FILES]
    paths += [operator / name for name in ("scratch", "duckdb-tmp", "diagnostics.json",
                                           "quarantine.jsonl", "report.html",
                                           "simulation-report.html")]  # fmt: skip
    paths += [settings.quarantine_path, state, state.with_name(state.name + ".wal")]
    for path in paths:
        refuse_link(path)


def check_published(settings: ContinualRelease, store: Any, *, simulation: bool) -> None:
    """Refuse when public outputs exist that this store cannot account for
    (:mod:`dpcr.release._published`), then move a release's public files from the layout
    before ``public/`` into it."""
    from dpcr.release._published import verify_published

    folders = [public_dir(settings, simulation=simulation)]
    if not simulation:
        folders.append(legacy_dir(settings))
    verify_published(settings, store, folders, PUBLIC_FILES)
    if not simulation:
        _migrate(settings)


def _migrate(settings: ContinualRelease) -> None:
    """Move the public files of the layout before ``public/`` (directly in ``output.dir``) into
    ``public/``, with one notice. The store accounts for every value they show (checked first);
    a file ``public/`` holds already supersedes the old one, which is removed."""
    old, new = legacy_dir(settings), public_dir(settings, simulation=False)
    names = [n for n in PUBLIC_FILES if os.path.lexists(old / n)]
    if not names:
        return
    ensure_dir(new, PUBLIC_MODES[0])
    for name in names:
        if os.path.lexists(new / name):
            (old / name).unlink()
        else:
            os.replace(old / name, new / name)
    log.warning(
        f"notice: moved the public files ({', '.join(names)}) from {old} into {new}, which holds "
        f"only what may be published: publish {new} from now on, never {old} itself "
        "(docs/store.md)"
    )


def write_table(
    out: Path,
    name: str,
    fields: Sequence[str],
    records: Sequence[dict[str, Any]],
    *,
    simulation: bool = False,
) -> None:
    """``<name>.csv`` and ``<name>.json`` in the folder ``out``, each replaced atomically."""

    def rows(fh: TextIO) -> None:
        writer = csv.DictWriter(fh, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(records)

    write_public(out / f"{name}.csv", rows, simulation=simulation)
    write_public(out / f"{name}.json", json.dumps(list(records), indent=1),
                 simulation=simulation)  # fmt: skip


def write_public(path: Path, content: Any, *, simulation: bool) -> None:
    """Write one public output (a run's, after its commit) into its folder, created with the
    public (or simulation) modes. A full disk says that the release is committed and the next
    run rewrites the outputs."""
    folder_mode, file_mode = public_modes(simulation=simulation)
    try:
        ensure_dir(path.parent.parent, PUBLIC_MODES[0], follow=True)
        ensure_dir(path.parent, folder_mode)
        write_atomic(path, content, mode=file_mode)
    except DiskFullError:
        raise full(path, then=_COMMITTED) from None


def write_outputs(
    settings: ContinualRelease,
    rows: Sequence[ReleaseRow],
    summary: dict[str, Any],
    diagnostics: dict[str, Any],
    *,
    head: str | None = None,
) -> None:
    simulation = bool(summary.get("simulation"))
    out = public_dir(settings, simulation=simulation)
    records = [r.record() for r in rows]
    fields: Sequence[str] = OUTPUT_FIELDS
    if simulation:
        records = [{**r, "simulation": SIMULATION_MARK} for r in records]
        fields = (*OUTPUT_FIELDS, "simulation")
    write_table(out, "releases", fields, records, simulation=simulation)
    write_public(out / "summary.json",
                 json.dumps({**summary, "store_head": head}, indent=2, default=str),
                 simulation=simulation)  # fmt: skip
    if head is not None:
        write_public(out / HEAD_FILE, json.dumps(
            {"store_head": head, "fingerprint": settings.fingerprint(),
             "simulation": simulation}, indent=2),
            simulation=simulation)  # fmt: skip
    private = operator_dir(settings)
    try:
        write_atomic(
            private / "diagnostics.json",
            json.dumps(diagnostics, indent=2, default=str),
            mode=PRIVATE_MODES[1],
        )
    except DiskFullError:
        raise full(private / "diagnostics.json", then=_COMMITTED) from None
