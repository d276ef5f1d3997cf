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

from dpcr.errors import ConfigError
from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow

if TYPE_CHECKING:
    from dpcr.release._settings import ContinualRelease

__all__ = ["OUTPUT_FIELDS", "operator_dir", "write_outputs", "write_table"]


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


def write_outputs(
    settings: ContinualRelease,
    rows: Sequence[ReleaseRow],
    summary: dict[str, Any],
    diagnostics: dict[str, Any],
) -> None:
    out = Path(settings.output_dir)
    write_table(out, "releases", OUTPUT_FIELDS, [asdict(r) for r in rows])
    _atomic_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
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
