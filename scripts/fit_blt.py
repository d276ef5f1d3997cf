#!/usr/bin/env python3
"""Fit the open-ended BLT presets for several participations and write them into
src/dpcr/plans/blt_presets.py (the table between ``# --- fitted`` and ``# --- end fitted``).

    python scripts/fit_blt.py            # fit every (m, T) of the grid and rewrite the table
    python scripts/fit_blt.py --check    # re-evaluate the table's objective values only

For every planning horizon T and participations m > 1 of the grid: 4 buffers minimising
``open_sensitivity2(m) * noise2(T)`` (:func:`dpcr.plans.factorization.fit_open_blt`), started
from the single-participation preset and from the fit for the previous m. The m = 1 presets
(``OPEN_BLT``) are kept as they are: stores bind their integer matrices. About 40 minutes on
one core.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parents[1] / "src" / "dpcr" / "plans" / "blt_presets.py"
_BLOCK = re.compile(r"(# --- fitted\n)(.*?)(# --- end fitted\n)", re.S)


def objective(blt: object, T: int, m: int) -> float:
    """Max std of a running count over T intervals, units of sigma_1 (infinite-matrix sens)."""
    return math.sqrt(blt.open_sensitivity2(m) * blt.noise2(T))  # type: ignore[attr-defined]


def _values(values: tuple[float, ...]) -> str:
    """A tuple literal at indent 8, one value per line when one line would exceed 100 chars."""
    one = "        (" + ", ".join(repr(float(v)) for v in values) + "),"
    if len(one) <= 100:
        return one
    inner = "".join(f"            {float(v)!r},\n" for v in values)
    return f"        (\n{inner}        ),"


def render(fits: dict[tuple[int, int], object]) -> str:
    lines = []
    for (m, T), blt in sorted(fits.items()):
        lines.append(f"    # m = {m}, T = {T}: max std {objective(blt, T, m):.4f} sigma_1")
        lines.append(f"    ({m}, {T}): (")
        lines.append(_values(blt.omega))  # type: ignore[attr-defined]
        lines.append(_values(blt.theta))  # type: ignore[attr-defined]
        lines.append("    ),")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print the table's values only")
    args = ap.parse_args(argv)
    from dpcr.plans.blt_presets import FIT_PARTICIPATIONS, OPEN_BLT, fitted
    from dpcr.plans.factorization import fit_open_blt

    if args.check:
        for m in FIT_PARTICIPATIONS:
            for T in sorted(OPEN_BLT):
                print(f"m = {m:3d}, T = {T:6d}: {objective(fitted(T, m), T, m):.4f}")
        return 0
    fits = {}
    for T in sorted(OPEN_BLT):
        previous = [OPEN_BLT[T]]
        for m in FIT_PARTICIPATIONS[1:]:
            blt = fit_open_blt(T, m, starts=previous)
            fits[(m, T)] = blt
            previous = [blt, OPEN_BLT[T]]
            print(f"m = {m:3d}, T = {T:6d}: {objective(blt, T, m):.4f}", flush=True)
    text = MODULE.read_text(encoding="utf-8")
    MODULE.write_text(_BLOCK.sub(lambda mt: mt.group(1) + render(fits) + mt.group(3), text),
                      encoding="utf-8")
    print(f"wrote {MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
