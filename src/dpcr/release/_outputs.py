"""Output files of a run.

Public, in the output directory: ``releases.csv`` / ``releases.json`` (DP values and their exact
uncertainty), ``summary.json`` (the plan, the guarantee, what was released) and, with alert rules,
``alerts.csv`` / ``alerts.json``. Operator-only, in ``operator/`` (created owner-only, mode 0700;
files 0600): ``diagnostics.json`` (exact counts and times from the raw data) and
``quarantine.jsonl`` (raw records). Every file is replaced atomically. docs/attack-model.md says
what each may reveal.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr.errors import ConfigError, StoreError
from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow

if TYPE_CHECKING:
    from dpcr.release._settings import ContinualRelease

__all__ = [
    "HEAD_FILE",
    "OUTPUT_FIELDS",
    "check_published",
    "operator_dir",
    "public_dir",
    "write_outputs",
    "write_table",
]


def write_table(
    out: Path, name: str, fields: Sequence[str], records: Sequence[dict[str, Any]]
) -> None:
    """``<name>.csv`` and ``<name>.json`` in ``out``, each replaced atomically."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the output folder {str(out)!r} ({exc.strerror}); choose an "
            "output.dir you can write to"
        ) from None
    tmp = out / f"{name}.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(records)
    tmp.replace(out / f"{name}.csv")
    _atomic_text(out / f"{name}.json", json.dumps(list(records), indent=1))


#: Written beside the public outputs: the store head they were published from.
HEAD_FILE = "release-head.json"
SIMULATION_MARK = "SIMULATION: seeded noise, not for publication"


def public_dir(settings: ContinualRelease, *, simulation: bool) -> Path:
    """Where the public outputs go: the output folder, or ``simulation/`` inside it for seeded
    runs (whose every row is marked), so simulated values never land where releases are."""
    out = Path(settings.output_dir)
    return out / "simulation" if simulation else out


def check_published(settings: ContinualRelease, store: Any, *, simulation: bool) -> None:
    """Refuse when outputs published from a state the store never was in exist: the store was
    deleted, replaced or restored from an older backup, and releasing now would draw fresh noise
    for intervals already public (doubling their privacy loss). Outputs from an earlier state
    of this store (a run stopped between its commit and its outputs) are fine: the store holds
    all they show, and this run rewrites them."""
    path = public_dir(settings, simulation=simulation) / HEAD_FILE
    if not path.exists():
        return
    try:
        published = json.loads(path.read_text(encoding="utf-8"))
        head = published["store_head"]
    except (OSError, ValueError, KeyError, TypeError):
        raise StoreError(
            f"{path} is unreadable; it records which store state the outputs beside it came "
            "from. Restore it, or publish to a new output.dir"
        ) from None
    if not store.holds(head):
        raise StoreError(
            f"the outputs in {str(path.parent)!r} were published from a store state this store "
            f"({store.path}) does not hold (published head {str(head)[:12]}, store "
            f"{str(store.recorded_head())[:12]}): it was deleted, replaced or restored from an "
            "older backup. Releasing now would draw fresh noise for published intervals. "
            "Restore the store that produced them (docs/store.md), or start a new release in a "
            "new output.dir"
        )


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
    records = [asdict(r) for r in rows]
    fields: Sequence[str] = OUTPUT_FIELDS
    if simulation:
        records = [{**r, "simulation": SIMULATION_MARK} for r in records]
        fields = (*OUTPUT_FIELDS, "simulation")
    write_table(out, "releases", fields, records)
    _atomic_text(out / "summary.json",
                 json.dumps({**summary, "store_head": head}, indent=2, default=str))
    if head is not None:
        _atomic_text(out / HEAD_FILE, json.dumps(
            {"store_head": head, "store": str(settings.store_path),
             "fingerprint": settings.fingerprint(), "simulation": simulation}, indent=2))
    private = operator_dir(settings)
    _atomic_text(private / "diagnostics.json", json.dumps(diagnostics, indent=2, default=str),
                 mode=0o600)


def operator_dir(settings: ContinualRelease) -> Path:
    """``<output>/operator``, created owner-only (0700)."""
    path = Path(settings.output_dir) / "operator"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the operator folder {str(path)!r} ({exc.strerror}); choose an "
            "output.dir you can write to"
        ) from None
    return path


def scratch_dir(settings: ContinualRelease) -> Path:
    """``<output>/operator/scratch``, owner-only, created on first use: still copies of a
    changelog's bytes that a run reads (deleted when it ends)."""
    path = operator_dir(settings) / "scratch"
    path.mkdir(exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def clear_scratch(settings: ContinualRelease) -> None:
    """Delete what a killed run left in the scratch folder, if there is one (the store's lock
    is held, so no other run is using it; nothing is created)."""
    path = Path(settings.output_dir) / "operator" / "scratch"
    if path.is_dir():
        for left in path.glob("dpcr-*"):
            left.unlink(missing_ok=True)


def _atomic_text(path: Path, text: str, *, mode: int | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {str(path)!r} ({exc.strerror}); choose an output.dir you can write to"
        ) from None
