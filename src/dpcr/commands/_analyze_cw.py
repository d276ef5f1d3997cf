"""``dpcr analyze cw-stream``: coupled-worlds privacy of a count over a sliding window."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
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
    _write,
    load_spec,
)
from dpcr.errors import ConfigError


def _cw_kernel(value: object, n: int) -> tuple[Any, str]:
    import numpy as np

    if isinstance(value, str):
        value = {"type": value}
    k = _Spec(value, "kernel")
    kind = k.pop("type", types=(str,))
    if kind == "count":
        k.done()
        return np.eye(n + 1), "exact count"
    if kind == "noisy_count":
        keep = _fraction(k.pop("keep"), "kernel.keep")
        k.done()
        kernel = float(keep) * np.eye(n + 1) + float(1 - keep) / (n + 1)
        return kernel, f"true count w.p. {keep}, else uniform on 0..{n}"
    if kind == "matrix":
        rows = k.pop("rows", types=(list,))
        k.done()
        if len(rows) != n + 1 or not all(isinstance(r, list) and r for r in rows):
            raise ConfigError(f"kernel.rows needs n + 1 = {n + 1} rows (one per window count)")
        exact = [[_fraction(v, f"kernel.rows[{i}][{j}]") for j, v in enumerate(r)]
                 for i, r in enumerate(rows)]
        for i, r in enumerate(exact):
            if len(r) != len(exact[0]) or sum(r, Fraction(0)) != 1:
                raise ConfigError(f"kernel.rows[{i}] must have {len(exact[0])} entries summing "
                                  "to exactly 1")
        return np.array([[float(v) for v in r] for r in exact]), "matrix kernel"
    raise ConfigError(f"kernel.type must be 'count', 'noisy_count' or 'matrix', got {kind!r}")


#: The largest window: the single-step analysis takes O(n³) operations (about 10 s at 500).
MAX_WINDOW = 256
#: The most steps reported (Theorem 4's bound is one row per step).
MAX_STEPS = 100_000


def cw_report(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Single-step quantities, Theorem 4's bound and the exact brute force for t = 1..steps."""
    from dpcr.analysis.cw import brute_force_stream, single_step

    s = _Spec(spec, "spec")
    title = str(s.pop("title", "coupled-worlds stream"))
    n = _int(s.pop("n"), "n", most=MAX_WINDOW)
    p = _fraction(s.pop("p"), "p")
    if "c" in s.data and "block" in s.data:
        raise ConfigError("give the replaced fraction as c or as block rows, not both")
    if "block" in s.data:
        block = _int(s.pop("block"), "block")
        c = Fraction(block, n)
    else:
        c = _fraction(s.pop("c"), "c")
        if c == 0 or (c * n).denominator != 1:
            raise ConfigError(f"c·n must be a positive whole number of rows; c={c}, n={n}")
        block = int(c * n)
    steps = _int(s.pop("steps", 1), "steps", most=MAX_STEPS)
    brute = s.pop("brute_force", True, types=(bool,))
    kernel, kernel_text = _cw_kernel(s.pop("kernel", "count"), n)
    s.done()
    bound = single_step(n=n, block=block, p=p, kernel=kernel)
    rows = []
    for t in range(1, steps + 1):
        eps_b, delta_b = bound.theorem4(t)
        row: dict[str, Any] = {"t": t, "bound_epsilon": eps_b, "bound_delta": delta_b}
        if brute:
            at = [eps_b] if math.isfinite(eps_b) else []
            exact, deltas = brute_force_stream(n=n, block=block, p=p, kernel=kernel, t=t,
                                               epsilons=at)
            row.update(exact_epsilon=exact.epsilon, exact_delta=exact.delta,
                       delta_at_bound=deltas[0] if deltas else None, seconds=exact.seconds)
        rows.append(row)
    return {
        "title": title, "n": n, "block": block, "c": str(c), "p": str(p), "kernel": kernel_text,
        "epsilon_max": bound.epsilon_max, "delta_max": bound.delta_max, "gamma": bound.gamma,
        "assumption_1": bound.assumption_1, "steps": rows,
    }


def _cmd_cw(args: argparse.Namespace) -> int:
    from dpcr.analysis.svg import curves_svg

    out = cw_report(load_spec(args.spec))
    rows = out["steps"]
    if args.svg:
        ts = [float(r["t"]) for r in rows]
        series: list[tuple[str, Sequence[float], Sequence[float]]] = []
        if "exact_epsilon" in rows[0]:
            series.append(("exact ε_t", ts, [r["exact_epsilon"] for r in rows]))
        finite = [r for r in rows if math.isfinite(r["bound_epsilon"])]
        if finite:
            series.append(("Theorem 4 bound", [float(r["t"]) for r in finite],
                           [r["bound_epsilon"] for r in finite]))
        _write(args.svg, curves_svg(series, title=out["title"], xlabel="steps t",
                                    ylabel="ε_t"))
    if args.json:
        def clean(v: Any) -> Any:
            return _json_float(v) if isinstance(v, float) else v

        print(json.dumps({k: ([{a: clean(b) for a, b in r.items()} for r in v]
                              if k == "steps" else clean(v)) for k, v in out.items()}, indent=1))
        return 0
    from rich.table import Table

    console = _console()
    console.print(f"[bold]Coupled-worlds stream[/bold]: {_esc(out['title'])}")
    console.print(
        f"  window n = {out['n']} Bernoulli({out['p']}) rows, c = {out['c']} ({out['block']} "
        f"rows replaced per step), mechanism: {_esc(out['kernel'])}; auxiliary information: "
        f"the last {out['n'] - out['block']} rows"
    )
    console.print(
        f"  one step: ε_max = {_fmt_float(out['epsilon_max'])}, δ_max = "
        f"{_fmt_float(out['delta_max'])}, γ = {_fmt_float(out['gamma'])}"
    )
    if not out["assumption_1"]:
        console.print(
            "  [yellow]Assumption 1 fails[/yellow]: no output is possible under every auxiliary "
            "value z, so γ = ∞ and Theorem 4 gives no finite bound"
        )
    table = Table(title="ε_t, δ_t after t steps: exact (brute force) vs Theorem 4")
    for col in ("t", "ε_t exact", "ε_t bound", "ratio", "δ_t exact", "δ_t bound",
                "δ(ε_t bound)"):
        table.add_column(col, justify="right")
    for r in rows:
        if "exact_epsilon" in r:
            exact_eps = r["exact_epsilon"]
            ratio = r["bound_epsilon"] / exact_eps if exact_eps > 0 else math.inf
            dab = r["delta_at_bound"]
            table.add_row(
                str(r["t"]), f"{exact_eps:.4f}", _fmt_float(r["bound_epsilon"], 4),
                _fmt_float(ratio, 3), f"{r['exact_delta']:.4g}", f"{r['bound_delta']:.4g}",
                "—" if dab is None else f"{dab:.4g}",
            )
        else:
            table.add_row(str(r["t"]), "—", _fmt_float(r["bound_epsilon"], 4), "—", "—",
                          f"{r['bound_delta']:.4g}", "—")
    console.print(table)
    if "seconds" in rows[0]:
        console.print(f"  brute force: {sum(r['seconds'] for r in rows):.2f} s in all; ratio = "
                      "bound ε_t / exact ε_t; δ(ε_t bound) = exact δ_t at the bound's ε")
    if args.svg:
        console.print(f"Wrote the plot to {_esc(args.svg)}")
    return 0

