"""``dpcr analyze cw-finite``: exact coupled-worlds privacy of a finite mechanism on finite rows."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from dpcr.commands._analyze_spec import (
    _console,
    _esc,
    _fmt_float,
    _fraction,
    _int,
    _json_float,
    _Spec,
    load_spec,
)
from dpcr.errors import ConfigError

#: The most steps reported (each is one exact enumeration, itself capped by its size).
MAX_STEPS = 16
#: The most rows in a window or a block (the enumeration covers K^rows assignments, at most 2^18).
MAX_ROWS = 18


def _kernel(value: object, values: int, n: int) -> tuple[Any, str]:
    from dpcr.analysis.cw_finite import WindowMechanism

    if isinstance(value, str):
        value = {"type": value}
    k = _Spec(value, "kernel")
    kind = k.pop("type", types=(str,))
    top = n * (values - 1)
    if kind == "sum":
        k.done()
        eye = [[int(i == s) for i in range(top + 1)] for s in range(top + 1)]
        return WindowMechanism.of_sum(values=values, n=n, rows=eye), "the exact sum"
    if kind == "noisy_sum":
        keep = _fraction(k.pop("keep"), "kernel.keep")
        k.done()
        text = f"the true sum w.p. {keep}, else uniform on 0..{top}"
        return WindowMechanism.noisy_sum(values=values, n=n, keep=keep), text
    if kind in ("sum_matrix", "window_matrix"):
        rows = k.pop("rows", types=(list,))
        k.done()
        exact = [
            [_fraction(v, f"kernel.rows[{i}][{j}]") for j, v in enumerate(r)]
            if isinstance(r, list)
            else [_fraction(r, f"kernel.rows[{i}]")]
            for i, r in enumerate(rows)
        ]
        if kind == "sum_matrix":
            return WindowMechanism.of_sum(values=values, n=n, rows=exact), "a kernel of the sum"
        return (
            WindowMechanism(values=values, n=n, probabilities=tuple(tuple(r) for r in exact)),
            "a kernel of the database",
        )
    raise ConfigError(
        f"kernel.type must be 'sum', 'noisy_sum', 'sum_matrix' or 'window_matrix', got {kind!r}"
    )


def _blocks(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list of block ids, got {value!r}")
    return tuple(_int(b, f"{where}[{i}]", least=0) for i, b in enumerate(value))


def _layouts(s: _Spec) -> tuple[list[Any], str]:
    """The layouts for t = 1..steps (one custom layout: all its databases), and a description."""
    from dpcr.analysis.cw_finite import Layout

    kind = s.pop("layout", "sliding-window", types=(str, dict))
    block = _int(s.pop("block", 1), "block", most=MAX_ROWS)
    if isinstance(kind, dict):
        lay = _Spec(kind, "layout")
        dbs = lay.pop("databases", types=(list,))
        databases = tuple(_blocks(db, f"layout.databases[{i}]") for i, db in enumerate(dbs))
        aux = _blocks(lay.pop("aux", []), "layout.aux")
        lay.done()
        layout = Layout(block=block, databases=databases, aux=aux)
        return [layout], f"{len(databases)} databases of blocks {[list(d) for d in databases]}"
    steps = _int(s.pop("steps", 1), "steps", most=MAX_STEPS)
    if kind == "sliding-window":
        n = _int(s.pop("n"), "n", most=MAX_ROWS)
        layouts = [Layout.sliding_window(n=n, block=block, steps=t) for t in range(1, steps + 1)]
        return layouts, f"sliding window of {n} rows, {block} replaced per step"
    if kind == "private-blocks":
        layouts = [Layout.private_blocks(block=block, steps=t) for t in range(1, steps + 1)]
        return layouts, "X_i = (s_i, p_i, s_{i+1}), each database owns p_i (Figure 2 (4))"
    raise ConfigError(f"layout must be 'sliding-window', 'private-blocks' or a table, got {kind!r}")


def _slope_text(value: Fraction | None) -> str | None:
    return None if value is None else str(value)


def cw_finite_report(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Theorem 4's bound and the exact CW privacy for each composed layout of the spec."""
    from dpcr.analysis.cw_finite import RowDistribution, check_theorem4

    s = _Spec(spec, "spec")
    title = str(s.pop("title", ""))
    dist = s.pop("distribution", types=(list,))
    rows = RowDistribution.of([_fraction(v, f"distribution[{i}]") for i, v in enumerate(dist)])
    layouts, layout_text = _layouts(s)
    mech, kernel_text = _kernel(s.pop("kernel", "sum"), rows.values, layouts[0].n)
    s.done()
    out_rows = []
    for layout in layouts:
        c = check_theorem4(rows, mech, layout)
        eps_b = c.step.theorem4(c.t)[0]
        out_rows.append(
            {
                "t": c.t,
                "setting": c.setting,
                "owners": list(layout.owners()),
                "exact_epsilon": c.exact.epsilon,
                "exact_slope": str(c.exact.slope),
                "exact_delta": str(c.exact.delta),
                "bound_epsilon": eps_b,
                "bound_slope": _slope_text(c.bound_slope),
                "bound_delta": str(c.bound_delta),
                "delta_at_bound": _slope_text(c.delta_at_bound),
                "holds": c.holds,
                "epsilon_max": c.step.epsilon_max,
                "delta_max": str(c.step.delta_max),
                "gamma": c.step.gamma,
                "assumption_1": c.step.assumption_1,
            }
        )
    return {
        "title": title,
        "distribution": [str(p) for p in rows.probabilities],
        "n": layouts[0].n,
        "block": layouts[0].block,
        "layout": layout_text,
        "kernel": kernel_text,
        "steps": out_rows,
    }


def _cmd_cw_finite(args: argparse.Namespace) -> int:
    out = cw_finite_report(load_spec(args.spec))
    rows = out["steps"]
    if args.json:

        def clean(v: Any) -> Any:
            return _json_float(v) if isinstance(v, float) else v

        data = {k: v for k, v in out.items() if k != "steps"}
        data["steps"] = [{a: clean(b) for a, b in r.items()} for r in rows]
        print(json.dumps(data, indent=1))
        return 0
    from rich.table import Table

    console = _console()
    title = f": {_esc(out['title'])}" if out["title"] else ""
    console.print(f"[bold]Coupled worlds, finite rows[/bold]{title}")
    console.print(
        _esc(
            f"  rows i.i.d. with Pr[value] = {', '.join(out['distribution'])}; databases of "
            f"{out['n']} rows in blocks of {out['block']}: {out['layout']}"
        )
    )
    console.print(f"  mechanism on each database: {_esc(out['kernel'])}")
    first = rows[0]
    console.print(
        f"  one step: ε_max = {_fmt_float(first['epsilon_max'])}, δ_max = {first['delta_max']},"
        f" γ = {_fmt_float(first['gamma'])}"
    )
    if not first["assumption_1"]:
        console.print(
            "  [yellow]Assumption 1 fails[/yellow]: some output is possible under one auxiliary "
            "value z and not another, so γ = ∞ and Theorem 4 bounds only t = 1"
        )
    table = Table(title="ε_t, δ_t of the composed G: exact (enumeration) vs Theorem 4")
    for col in ("t", "ε_t exact", "ε_t bound", "δ_t exact", "δ_t bound", "δ(ε_t bound)", "bound"):
        table.add_column(col, justify="right")
    for r in rows:
        dab = r["delta_at_bound"]
        verdict = "holds" if r["holds"] else "[red]BELOW EXACT[/red]"
        if r["setting"] is None:
            verdict += " (not proved for this layout)"
        table.add_row(
            str(r["t"]),
            f"{r['exact_epsilon']:.6g}",
            _fmt_float(r["bound_epsilon"]),
            r["exact_delta"],
            r["bound_delta"],
            "—" if dab is None else dab,
            verdict,
        )
    console.print(table)
    owners = rows[-1]["owners"]
    lonely = [i + 1 for i, own in enumerate(owners) if not own]
    console.print(
        "  every database owns a private block"
        if not lonely
        else f"  databases without a private block: {lonely}"
    )
    if any(math.isinf(r["bound_epsilon"]) for r in rows):
        console.print("  ε_t bound ∞: the theorem gives no finite ε there")
    return 0
