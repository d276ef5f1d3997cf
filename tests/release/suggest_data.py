"""Small changelogs with known unit histories (tests of ``dpcr suggest`` and of
``warn_dropped``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

DAY = 86_400_000_000
START = datetime(2025, 1, 1, tzinfo=UTC)


def _histories(seed: int = 3, units: int = 60) -> list[tuple[str, list[float]]]:
    """Per unit: its kind (``multi`` or ``monthly``) and its mutations' days after 2025-01-01
    (the first is the insert)."""
    gen = np.random.default_rng(seed)
    out = []
    for u in range(units):
        n = int(gen.integers(1, 12))
        t0 = float(gen.uniform(0, 100))
        delays = sorted(float(d) for d in gen.exponential(6.0, size=n - 1))
        out.append(("multi" if u % 3 else "monthly", [t0, *(t0 + d for d in delays)]))
    return out


def _write(tmp: Path, histories: list[tuple[str, list[float]]], constraint: str,
           extra: str = "") -> Path:  # fmt: skip
    lines = []
    for u, (kind, days) in enumerate(histories):
        for i, day in enumerate(days):
            ts = (START + timedelta(days=day)).isoformat().replace("+00:00", "Z")
            row = {"kind": kind, "zone": "AB"[i % 2], "fare": 2 * i}
            op = "insert" if i == 0 else "update"
            lines.append(
                json.dumps(
                    {
                        "entry": str(u),
                        "ts": ts,
                        "op": op,
                        "before": None if i == 0 else {},
                        "after": row,
                    }
                )
            )
    (tmp / "log.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp / "dpcr.toml"
    config.write_text(
        '[source]\nformat = "jsonl"\npath = "log.jsonl"\n[privacy]\nepsilon = 2.0\n'
        f"[constraint]\n{constraint}\n{extra}"
        '[release]\nplan = "disjoint"\nstart = "2025-01-01"\nperiod = "7d"\n'
        'end = "2025-07-02"\n'
        '[[query]]\nname = "n"\nkind = "count"\n'
        '[[query]]\nname = "zones"\nkind = "histogram"\ncolumn = "zone"\nkeys = ["A", "B"]\n',
        encoding="utf-8",
    )
    return config
