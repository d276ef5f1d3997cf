"""Output files of a run: public (DP values, their uncertainty, the plan and the guarantee).

``releases.csv`` (replaced atomically), ``releases.json`` and ``summary.json`` in the output
directory. The summary holds counts (records, quarantined, dropped) but no record and no
per-unit state; the quarantine file and the store are operator-only (docs/privacy.md).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow

if TYPE_CHECKING:
    from dpcr.release._settings import ContinualRelease

__all__ = ["OUTPUT_FIELDS", "write_outputs", "write_table"]


def write_table(
    out: Path, name: str, fields: Sequence[str], records: Sequence[dict[str, Any]]
) -> None:
    """``<name>.csv`` and ``<name>.json`` in ``out``, each replaced atomically."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"{name}.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(records)
    tmp.replace(out / f"{name}.csv")
    _atomic_text(out / f"{name}.json", json.dumps(list(records), indent=1))


def write_outputs(
    settings: ContinualRelease, rows: Sequence[ReleaseRow], summary: dict[str, Any]
) -> None:
    out = Path(settings.output_dir)
    write_table(out, "releases", OUTPUT_FIELDS, [asdict(r) for r in rows])
    _atomic_text(out / "summary.json", json.dumps(summary, indent=2, default=str))


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
