"""Shared pieces of the engine reference tests."""

from __future__ import annotations

from typing import Any


def append_mutation(
    mutations: list[dict[str, Any]],
    base: dict[str, Any],
    *,
    unit: str,
    new_unit: str,
    op: str,
    row: Any,
    after: Any,
) -> None:
    """Append one canonical mutation; an update moving the entry to another unit is a delete
    in the old unit and an insert in the new one (docs/privacy.md, section 8)."""
    if new_unit != unit:
        mutations.append({**base, "unit": unit, "op": "delete", "before": row, "after": None})
        mutations.append({**base, "unit": new_unit, "op": "insert", "before": None, "after": after})
    else:
        mutations.append({**base, "unit": unit, "op": op, "before": row, "after": after})
