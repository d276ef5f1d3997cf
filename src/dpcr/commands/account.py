"""``dpcr account CONFIG``: the plan's per-unit guarantee under every composition method.

For every plan kind, the worst unit of each class composes the most instances of each layer it
can touch (all queries of one instance composed), the alert rules and, for an open-ended tree,
the tail; the plan's guarantee is the worst class (Thm 4.10). Every method of
:mod:`dpcr.accounting.accountants` is shown side by side at the budget δ; ``*`` marks the
tightest, which is what ``dpcr plan`` states (pure compositions are stated as pure ε-DP, δ = 0,
by basic composition). No data is read.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "account",
        help="the plan's per-unit guarantee under every composition method (reads no data)",
        description="Per class of the constraint and for the worst class, ε at the budget δ under "
        "basic, advanced, optimal (KOV), zCDP, RDP and PLD composition; '*' marks the tightest.",
    )
    p.add_argument("config", help="TOML configuration file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


def account_table(config: Any) -> dict[str, Any]:
    """The data ``dpcr account`` prints: per class, n, ε by method and the tightest."""
    from dpcr.accounting.accountants import ACCOUNTANTS, compare, stated_guarantee
    from dpcr.accounting.guarantee import with_selection
    from dpcr.release import calibrate

    delta = float(config.release_delta)  # the budget's less open keys' selection's
    cal = calibrate(config)
    classes: dict[str, Any] = {}
    for name, part in cal.participation.items():
        worst_unit = cal.worst_unit(name)
        by_method = compare(worst_unit, delta=delta)
        stated = with_selection(stated_guarantee(worst_unit, delta=delta),
                                config.selection_delta)
        finite = {m: e for m, e in by_method.items() if e is not None}
        classes[name] = {
            "releases": part.total,
            "epsilon": by_method,
            "tightest": min(finite, key=lambda m: finite[m]) if finite else None,
            "stated": {
                "epsilon": stated.epsilon,
                "delta": stated.delta,
                "method": stated.method,
            },
        }
    methods = list(ACCOUNTANTS)
    worst: dict[str, float | None] = {}
    for m in methods:
        values = [c["epsilon"][m] for c in classes.values()]
        worst[m] = None if any(v is None for v in values) else max(values, default=0.0)
    finite_worst = {m: e for m, e in worst.items() if e is not None}
    stated_worst = max((c["stated"] for c in classes.values()), key=lambda s: s["epsilon"])
    return {
        "delta": delta,
        "budget": {"epsilon": config.budget.epsilon, "delta": config.budget.delta},
        "mechanism": config.mechanism,
        "methods": methods,
        "classes": classes,
        "worst": {
            "epsilon": worst,
            "tightest": min(finite_worst, key=lambda m: finite_worst[m]) if finite_worst else None,
            "stated": stated_worst,
        },
    }


def _cell(value: float | None, best: bool) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.6g}{' *' if best else ''}"


def _run(args: argparse.Namespace) -> int:
    from dpcr.config import load_config

    table = account_table(load_config(args.config))
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    methods: list[str] = table["methods"]
    print(
        f"Per-unit ε at δ = {table['delta']:.3g} (budget ε = {table['budget']['epsilon']:g}), "
        f"{table['mechanism']} noise; * = tightest"
    )
    rows = [
        (f"class {name}", str(c["releases"]), c["epsilon"], c["tightest"])
        for name, c in table["classes"].items()
    ]
    rows.append(("worst class", "", table["worst"]["epsilon"], table["worst"]["tightest"]))
    header = ["", "releases", *methods]
    cells = [header] + [
        [label, n, *(_cell(eps[m], m == best) for m in methods)] for label, n, eps, best in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print(
            "  ".join(
                v.rjust(w) if i else v.ljust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    s = table["worst"]["stated"]
    print(f"Stated by dpcr plan: (ε = {s['epsilon']:.6g}, δ = {s['delta']:.3g})-DP [{s['method']}]")
    return 0
