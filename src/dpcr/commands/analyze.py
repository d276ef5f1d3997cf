"""``dpcr analyze region|cw-stream|cw-finite|summary-privacy SPEC``: exact privacy analyses.

Each subcommand reads a small JSON (``.json``) or TOML (any other suffix) specification, prints
tables, optionally writes an SVG plot (``--svg OUT``) and prints JSON with ``--json``. The formats
are documented in docs/analysis.md; examples live in examples/analysis/. Probabilities are exact
rationals: write them as strings (``"3/4"``), integers, or floats (taken at their exact binary
value, so ``0.1`` does not sum with others to exactly 1).

Exit status: 0, or 1 when a region spec's ``[claim]`` is violated by the exact profile; errors in a
spec raise :class:`~dpcr.errors.ConfigError` (status 2).

This module registers the parsers; each subcommand lives in a private module
(``_analyze_region``, ``_analyze_cw``, ``_analyze_cw_finite``, ``_analyze_summary``) on top of
the spec-reading and output helpers in ``_analyze_spec``.
"""

from __future__ import annotations

import argparse

from dpcr.commands._analyze_cw import _cmd_cw, cw_report
from dpcr.commands._analyze_cw_finite import _cmd_cw_finite, cw_finite_report
from dpcr.commands._analyze_region import _cmd_region, region_profile
from dpcr.commands._analyze_spec import load_spec
from dpcr.commands._analyze_summary import _cmd_summary, summary_report

__all__ = [
    "cw_finite_report",
    "cw_report",
    "load_spec",
    "region_profile",
    "register",
    "summary_report",
]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="exact privacy analyses of small specifications (regions, coupled worlds, "
        "summary statistics)",
        description="Exact privacy analyses of small JSON/TOML specifications "
        "(formats: docs/analysis.md; examples: examples/analysis/).",
    )
    sub = p.add_subparsers(dest="analysis", required=True)

    r = sub.add_parser(
        "region",
        help="privacy region, tangent (ε, δ) pairs and profile δ(ε) of a finite mechanism",
    )
    r.add_argument("spec", help="JSON or TOML specification of the mechanism")
    r.add_argument("--svg", metavar="OUT", help="write the privacy region as SVG")
    r.add_argument("--profile-svg", metavar="OUT", help="write the profile δ(ε) as SVG")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=_cmd_region)

    c = sub.add_parser(
        "cw-stream",
        help="coupled-worlds privacy of a count over a sliding window: Theorem 4 vs exact",
    )
    c.add_argument("spec", help="JSON or TOML specification of the stream")
    c.add_argument("--svg", metavar="OUT", help="write exact ε_t and the bound against t as SVG")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=_cmd_cw)

    f = sub.add_parser(
        "cw-finite",
        help="exact coupled-worlds privacy of a finite mechanism on finite i.i.d. rows "
        "(sliding windows, private blocks): Theorem 4 vs exact",
    )
    f.add_argument("spec", help="JSON or TOML specification (row distribution, layout, kernel)")
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.set_defaults(func=_cmd_cw_finite)

    s = sub.add_parser(
        "summary-privacy",
        help="summary-statistic privacy Π of mechanisms and of their adaptive composition",
    )
    s.add_argument("spec", help="JSON or TOML specification (prior, secret, mechanisms)")
    s.add_argument("--svg", metavar="OUT", help="write exact Π and the bound against m as SVG")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_summary)
