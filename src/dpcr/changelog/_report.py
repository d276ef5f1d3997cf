"""What a load of a changelog reports: the reasons a record is rejected and the counts of a
load (:func:`dpcr.changelog.load`, :func:`dpcr.changelog.load_increment`), apart from the
loader itself (a run that loads nothing new reports from its state alone)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from dpcr.changelog._set_aside import SET_ASIDE_REASONS

if TYPE_CHECKING:
    from dpcr.changelog._resume import FrozenPoint

__all__ = ["REASONS", "LoadReport", "OnError"]

#: Machine-readable codes of the reasons a record is rejected, in the order they are checked
#: (first those of records set aside when read; ``bad_json`` for the record itself before the
#: op, for its before/after rows after it).
REASONS: tuple[str, ...] = (
    *SET_ASIDE_REASONS,
    "bad_json",
    "unknown_op",
    "missing_entry",
    "bad_timestamp",
    "bad_seq",
    "missing_unit",
    "duplicate",
    "update_before_insert",
    "delete_before_insert",
    "double_insert",
)

OnError = Literal["raise", "quarantine"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadReport:
    """What :func:`~dpcr.changelog.load` read.

    ``records`` counts the source's records; ``split`` the updates that moved an entry to another
    unit (each is two mutations); ``valid`` the mutations in the table; ``quarantined`` maps each
    reason code (see :data:`REASONS`) to its number of rejected mutations (empty when every
    record is valid); ``tombstones`` counts skipped Debezium tombstones; ``late`` the mutations
    left out because their (unit, entry) is frozen; ``frozen`` the freeze points, given and new
    (pass them back to the next load). Always
    ``records + split == valid + invalid + tombstones + late``.
    """

    source: str
    records: int
    valid: int
    quarantined: Mapping[str, int]
    quarantine_path: Path | None
    tombstones: int = 0
    split: int = 0
    late: int = 0
    frozen: tuple[FrozenPoint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "quarantined", MappingProxyType(dict(self.quarantined)))

    @property
    def invalid(self) -> int:
        return sum(self.quarantined.values())
