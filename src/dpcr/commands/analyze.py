"""``dpcr analyze region|cw-stream|summary-privacy SPEC``: exact privacy analyses of small specs.

Each subcommand reads a small JSON (``.json``) or TOML (any other suffix) specification, prints
tables, optionally writes an SVG plot (``--svg OUT``) and prints JSON with ``--json``. The formats
are documented in docs/analysis.md; examples live in examples/analysis/. Probabilities are exact
rationals: write them as strings (``"3/4"``), integers, or floats (taken at their exact binary
value, so ``0.1`` does not sum with others to exactly 1).

Exit status: 0, or 1 when a region spec's ``[claim]`` is violated by the exact profile; errors in a
spec raise :class:`~dpcr.errors.ConfigError` (status 2).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcr.errors import ConfigError

_MAX_ROWS = 24  # tangent rows shown in the table (--json lists all)


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

    s = sub.add_parser(
        "summary-privacy",
        help="summary-statistic privacy Π of mechanisms and of their adaptive composition",
    )
    s.add_argument("spec", help="JSON or TOML specification (prior, secret, mechanisms)")
    s.add_argument("--svg", metavar="OUT", help="write exact Π and the bound against m as SVG")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_summary)


# --- spec reading ---------------------------------------------------------------------------------


def load_spec(path: str | Path) -> dict[str, Any]:
    """A specification file as a dict: JSON when the name ends in ``.json``, TOML otherwise."""
    import tomllib

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"specification {str(p)!r} does not exist") from None
    try:
        raw = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"{p}: not valid {kind}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the specification must be a table/object at the top level")
    return raw


class _Spec:
    """Typed access to one table of a spec; :meth:`done` refuses unknown keys (typos)."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a table/object, got {data!r}")
        self.data = dict(data)
        self.where = where

    def pop(self, key: str, default: Any = ..., *, types: tuple[type, ...] = ()) -> Any:
        if key not in self.data:
            if default is ...:
                raise ConfigError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data.pop(key)
        bad_bool = isinstance(value, bool) and bool not in types
        if types and (not isinstance(value, types) or bad_bool):
            names = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{self.where}.{key} must be {names}, got {value!r}")
        return value

    def done(self) -> None:
        if self.data:
            raise ConfigError(f"{self.where}: unknown key(s) {sorted(self.data)}")


def _fraction(value: object, where: str, *, probability: bool = True) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where} must be a number or a string like '3/4', got {value!r}")
    try:
        out = Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ConfigError(f"{where} is not a number: {value!r}") from None
    if probability and not 0 <= out <= 1:
        raise ConfigError(f"{where} must lie in [0, 1], got {value!r}")
    return out


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{where} must be finite and >= 0, got {value!r}")
    return float(value)


def _int(value: object, where: str, *, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{where} must be an integer >= {least}, got {value!r}")
    return value


def _fmt_fraction(value: Fraction, width: int = 22) -> str:
    """The exact fraction when it is short, else a 10-digit decimal marked ≈."""
    text = str(value)
    return text if len(text) <= width else f"≈{float(value):.10g}"


def _fmt_float(value: float, digits: int = 6) -> str:
    return "∞" if math.isinf(value) else f"{value:.{digits}g}"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _esc(value: object) -> str:
    from rich.markup import escape

    return escape(str(value))


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path!r}: {exc.strerror or exc}") from None


# --- region ---------------------------------------------------------------------------------------


def _mechanism(table: object, where: str) -> tuple[Any, int]:
    """(FiniteMechanism, composition count) of one ``[mechanism]`` table."""
    from dpcr.analysis.regions import FiniteMechanism, randomized_response

    t = _Spec(table, where)
    count = _int(t.pop("compose", 1), f"{where}.compose")
    rr = t.pop("randomized_response", None)
    if rr is not None:
        r = _Spec(rr, f"{where}.randomized_response")
        p = _fraction(r.pop("p_truth"), f"{where}.randomized_response.p_truth")
        k = _int(r.pop("k", 2), f"{where}.randomized_response.k", least=2)
        r.done()
        t.done()
        return randomized_response(p, k=k), count
    rows = t.pop("rows", types=(list,))
    if not all(isinstance(row, list) for row in rows):
        raise ConfigError(f"{where}.rows must be a list of rows (lists of probabilities)")
    neighbours = t.pop("neighbours", "all", types=(str, list))
    if isinstance(neighbours, list) and not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(i, int) for i in pair)
        for pair in neighbours
    ):
        raise ConfigError(f"{where}.neighbours must be 'all', 'adjacent' or [[x, x'], ...]")
    if isinstance(neighbours, str) and neighbours not in ("all", "adjacent"):
        raise ConfigError(f"{where}.neighbours must be 'all', 'adjacent' or pairs, got "
                          f"{neighbours!r}")
    symmetric = t.pop("symmetric", True, types=(bool,))
    inputs = t.pop("inputs", [], types=(list,))
    outputs = t.pop("outputs", [], types=(list,))
    t.done()
    mech = FiniteMechanism.from_rows(
        [[_fraction(v, f"{where}.rows[{i}][{j}]") for j, v in enumerate(row)]
         for i, row in enumerate(rows)],
        neighbours=neighbours,
        symmetric=symmetric,
        inputs=[str(x) for x in inputs],
        outputs=[str(y) for y in outputs],
    )
    return mech, count


def _max_profile(profiles: Sequence[Any]) -> Any:
    """Profile of the worst case over pairs: the upper hull of all their vertices."""
    import numpy as np

    from dpcr.analysis.regions import profile_of_points

    denom = 1
    for prof in profiles:
        for b, a in prof.vertices:
            denom = math.lcm(denom, b.denominator, a.denominator)
    bs = [int(b * denom) for prof in profiles for b, _ in prof.vertices]
    as_ = [int(a * denom) for prof in profiles for _, a in prof.vertices]
    return profile_of_points(np.array(bs, dtype=object), np.array(as_, dtype=object), denom)


def region_profile(spec: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(PrivacyProfile, description) of a region spec's mechanism or composition."""
    from dpcr.analysis.regions import loss_distribution, privacy_profile

    if ("mechanism" in spec) == ("mechanisms" in spec):
        raise ConfigError("a region spec needs exactly one of [mechanism] or [[mechanisms]]")
    if "mechanism" in spec:
        parts = [_mechanism(spec["mechanism"], "mechanism")]
    else:
        tables = spec["mechanisms"]
        if not isinstance(tables, list) or not tables:
            raise ConfigError("[[mechanisms]] must be a non-empty list of mechanism tables")
        parts = [_mechanism(m, f"mechanisms[{i}]") for i, m in enumerate(tables)]
    first = parts[0][0]
    for i, (mech, _) in enumerate(parts[1:], start=1):
        if mech.shape[0] != first.shape[0] or set(mech.neighbours) != set(first.neighbours):
            raise ConfigError(
                f"mechanisms[{i}] must have the same inputs and neighbour pairs as mechanisms[0] "
                "to be composed (each round sees the same pair of neighbouring inputs)"
            )
    rounds = sum(count for _, count in parts)
    if len(parts) == 1 and rounds == 1:
        profile = privacy_profile(first)
    else:
        per_pair = []
        for x, x_prime in first.neighbours:
            loss = None
            for mech, count in parts:
                ld = loss_distribution(mech, x, x_prime).power(count)
                loss = ld if loss is None else loss.compose(ld)
            if loss is not None:
                per_pair.append(loss.profile())
        profile = _max_profile(per_pair)
    info = {
        "components": [
            {"inputs": m.shape[0], "outputs": m.shape[1], "compose": c} for m, c in parts
        ],
        "neighbour_pairs": len(first.neighbours),
        "rounds": rounds,
    }
    return profile, info


def _cmd_region(args: argparse.Namespace) -> int:
    from dpcr.analysis.regions import region_polygon
    from dpcr.analysis.svg import curves_svg, region_svg

    spec = _Spec(load_spec(args.spec), "spec")
    title = str(spec.pop("title", Path(args.spec).stem))
    mech_part = {k: spec.pop(k) for k in ("mechanism", "mechanisms") if k in spec.data}
    report = _Spec(spec.pop("report", {}), "report")
    deltas = [_number(d, "report.deltas[]") for d in report.pop("deltas", [0.0], types=(list,))]
    epsilons = [_number(e, "report.epsilons[]") for e in report.pop("epsilons", [], types=(list,))]
    report.done()
    claim_raw = spec.pop("claim", None)
    claim: tuple[float, float] | None = None
    if claim_raw is not None:
        c = _Spec(claim_raw, "claim")
        claim = (_number(c.pop("epsilon"), "claim.epsilon"), _number(c.pop("delta", 0.0),
                                                                     "claim.delta"))
        c.done()
    spec.done()

    profile, info = region_profile(mech_part)
    tangents = profile.tangents()
    eps_at = [(d, profile.epsilon(d)) for d in deltas]
    delta_at = [(e, profile.delta(e)) for e in epsilons]
    verdict: dict[str, Any] | None = None
    if claim is not None:
        true_delta = profile.delta(claim[0])
        verdict = {"epsilon": claim[0], "delta": claim[1], "exact_delta": true_delta,
                   "holds": true_delta <= claim[1]}

    if args.svg:
        if claim is not None:
            line_eps, line_delta = claim
        else:
            d0 = deltas[0] if deltas else 0.0
            line_eps, line_delta = profile.epsilon(d0), d0
        _write(args.svg, region_svg(
            region_polygon(profile),
            epsilon=line_eps if math.isfinite(line_eps) else None,
            delta=line_delta,
            title=title,
        ))
    if args.profile_svg:
        finite = [e for e, _ in tangents if math.isfinite(e)]
        top = max([*finite, *epsilons, 0.5]) * 1.25
        grid = [top * i / 200 for i in range(201)]
        _write(args.profile_svg, curves_svg(
            [("δ(ε)", grid, profile.curve(grid))],
            title=title, xlabel="ε", ylabel="δ(ε)",
        ))

    if args.json:
        print(json.dumps({
            "title": title,
            **info,
            "delta_at_infinity": str(profile.delta_at_infinity),
            "tangents": [
                {"slope": str(s), "epsilon": e, "delta": str(d), "delta_float": float(d)}
                for s, (e, d) in zip([s for s in profile.slopes if s >= 1], tangents,
                                     strict=True)
            ],
            "epsilon_at_delta": [{"delta": d, "epsilon": _json_float(e)} for d, e in eps_at],
            "delta_at_epsilon": [{"epsilon": e, "delta": d} for e, d in delta_at],
            "claim": verdict,
        }, indent=1))
    else:
        _print_region(title, info, profile, tangents, eps_at, delta_at, verdict, args)
    return 0 if verdict is None or verdict["holds"] else 1


def _print_region(title: str, info: dict[str, Any], profile: Any,
                  tangents: list[tuple[float, Fraction]], eps_at: list[tuple[float, float]],
                  delta_at: list[tuple[float, float]], verdict: dict[str, Any] | None,
                  args: argparse.Namespace) -> None:
    from rich.table import Table

    console = _console()
    comps = " ∘ ".join(
        f"{c['inputs']}×{c['outputs']}" + (f"^{c['compose']}" if c["compose"] > 1 else "")
        for c in info["components"]
    )
    console.print(f"[bold]Privacy region[/bold]: {_esc(title)}")
    console.print(
        f"  mechanism {comps} ({info['rounds']} round(s)), {info['neighbour_pairs']} ordered "
        f"neighbour pairs (exact rationals)"
    )
    slopes = [s for s in profile.slopes if s >= 1]
    table = Table(title="Tangent (ε, δ) pairs")
    for col in ("#", "e^ε", "ε (rounded up)", "δ exact", "δ"):
        table.add_column(col, justify="right")
    for i, (s, (e, d)) in enumerate(zip(slopes, tangents, strict=True)):
        if i == _MAX_ROWS:
            table.add_row("…", f"{len(tangents) - _MAX_ROWS} more (--json lists all)", "", "",
                          "")
            break
        table.add_row(str(i + 1), _esc(_fmt_fraction(s)), f"{e:.6f}", _esc(_fmt_fraction(d)),
                      f"{float(d):.6g}")
    console.print(table)
    console.print(f"  δ(ε = ∞) = {_esc(_fmt_fraction(profile.delta_at_infinity))} (mass one "
                  "input puts where its neighbour puts none)")
    if eps_at or delta_at:
        t2 = Table(title="Privacy profile")
        for col in ("δ", "smallest ε with δ(ε) ≤ δ", "ε", "δ(ε)"):
            t2.add_column(col, justify="right")
        for i in range(max(len(eps_at), len(delta_at))):
            left = [f"{eps_at[i][0]:g}", _fmt_float(eps_at[i][1])] if i < len(eps_at) else ["", ""]
            right = ([f"{delta_at[i][0]:g}", f"{delta_at[i][1]:.6g}"] if i < len(delta_at)
                     else ["", ""])
            t2.add_row(*left, *right)
        console.print(t2)
    if verdict is not None:
        word = "[green]holds[/green]" if verdict["holds"] else "[bold red]VIOLATED[/bold red]"
        console.print(
            f"[bold]Claim[/bold] (ε={verdict['epsilon']:g}, δ={verdict['delta']:g}): {word}; "
            f"exact δ({verdict['epsilon']:g}) = {verdict['exact_delta']:.6g}"
        )
    for label, path in (("region", args.svg), ("profile", args.profile_svg)):
        if path:
            console.print(f"Wrote the {label} plot to {_esc(path)}")


# --- coupled worlds -------------------------------------------------------------------------------


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


def cw_report(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Single-step quantities, Theorem 4's bound and the exact brute force for t = 1..steps."""
    from dpcr.analysis.cw import brute_force_stream, single_step

    s = _Spec(spec, "spec")
    title = str(s.pop("title", "coupled-worlds stream"))
    n = _int(s.pop("n"), "n")
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
    steps = _int(s.pop("steps", 1), "steps")
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


# --- summary-statistic privacy -------------------------------------------------------------------


def _dist(value: object, where: str) -> dict[str, Fraction]:
    t = _Spec(value, where)
    return {str(k): _fraction(v, f"{where}.{k}") for k, v in t.data.items()}


def _kernel(value: object, where: str, thetas: Sequence[str]) -> dict[Hashable, Any]:
    t = _Spec(value, where)
    out: dict[Hashable, Any] = {}
    for theta in thetas:
        if theta not in t.data:
            raise ConfigError(f"{where} has no distribution for θ = {theta!r}")
        out[theta] = _dist(t.data.pop(theta), f"{where}.{theta}")
    t.done()
    return out


def summary_report(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Π_i of each mechanism, the exact Π of every prefix composition and Theorem 0.1's bound."""
    from dpcr.analysis.summary import (
        adaptive_component_privacy,
        composed_summary_privacy,
        composition_bound,
        summary_privacy,
    )

    s = _Spec(spec, "spec")
    title = str(s.pop("title", "summary-statistic privacy"))
    prior: dict[Hashable, Fraction] = {str(k): _fraction(v, f"prior.{k}")
                                        for k, v in _Spec(s.pop("prior"), "prior").data.items()}
    secret_t = _Spec(s.pop("secret"), "secret")
    secret: dict[Hashable, Hashable] = {str(k): str(v) for k, v in secret_t.data.items()}
    missing = sorted(str(t) for t in set(prior) - set(secret))
    if missing:
        raise ConfigError(f"secret gives no value g(θ) for θ in {missing}")
    tables = s.pop("mechanisms", types=(list,))
    s.done()
    if not tables:
        raise ConfigError("give at least one [[mechanisms]] table")
    thetas = [str(t) for t in prior]
    names: list[str] = []
    mechs: list[Any] = []
    comps: list[Fraction] = []
    kinds: list[str] = []
    prev_outputs: set[str] = set()
    for i, raw in enumerate(tables):
        m = _Spec(raw, f"mechanisms[{i}]")
        names.append(str(m.pop("name", f"M{i + 1}")))
        if ("kernel" in m.data) == ("after" in m.data):
            raise ConfigError(f"mechanisms[{i}] needs exactly one of 'kernel' or 'after'")
        if "kernel" in m.data:
            kern = _kernel(m.pop("kernel"), f"mechanisms[{i}].kernel", thetas)
            m.done()
            comps.append(summary_privacy(prior, secret, kern))
            mechs.append(lambda theta, hist, kern=kern: kern[theta])
            kinds.append("fixed")
            outputs = {o for d in kern.values() for o, q in d.items() if q}
        else:
            if i == 0:
                raise ConfigError("mechanisms[0] cannot use 'after': no earlier output exists")
            after_t = _Spec(m.pop("after"), f"mechanisms[{i}].after")
            m.done()
            after: dict[str, Any] = {str(o): _kernel(k, f"mechanisms[{i}].after.{o}", thetas)
                     for o, k in after_t.data.items()}
            lacking = sorted(prev_outputs - set(after))
            if lacking:
                raise ConfigError(f"mechanisms[{i}].after has no kernel for earlier output(s) "
                                  f"{lacking}")

            def adaptive(theta: Any, hist: tuple[Any, ...],
                         after: dict[str, Any] = after) -> Any:
                return after[str(hist[-1])][theta]

            mechs.append(adaptive)
            comps.append(adaptive_component_privacy(
                prior, secret, adaptive, [(o,) for o in sorted(prev_outputs)]))
            kinds.append("adaptive")
            outputs = {o for k in after.values() for d in k.values() for o, q in d.items() if q}
        prev_outputs = outputs
    blind: dict[Hashable, Fraction] = {}
    for theta, w in prior.items():
        blind[secret[theta]] = blind.get(secret[theta], Fraction(0)) + w
    prefixes = []
    for k in range(1, len(mechs) + 1):
        exact = composed_summary_privacy(prior, secret, mechs[:k])
        bound = composition_bound(prior, comps[:k])
        prefixes.append({"m": k, "exact": exact, "bound": bound, "bound_capped": min(bound, 1)})
    return {
        "title": title,
        "a": max(prior.values()), "b": min(prior.values()),
        "blind_guess": max(blind.values()),
        "mechanisms": [{"name": nm, "kind": k, "pi": pi}
                       for nm, k, pi in zip(names, kinds, comps, strict=True)],
        "prefixes": prefixes,
    }


def _cmd_summary(args: argparse.Namespace) -> int:
    from dpcr.analysis.svg import curves_svg

    out = summary_report(load_spec(args.spec))
    pre = out["prefixes"]
    if args.svg:
        ms = [float(r["m"]) for r in pre]
        _write(args.svg, curves_svg(
            [("exact Π", ms, [float(r["exact"]) for r in pre]),
             ("bound a·∏(Π_i/b) (capped at 1)", ms, [float(r["bound_capped"]) for r in pre])],
            title=out["title"], xlabel="mechanisms composed m", ylabel="Π",
        ))
    if args.json:
        def text(v: Any) -> Any:
            return str(v) if isinstance(v, Fraction) else v

        print(json.dumps({
            k: ([{a: text(b) for a, b in r.items()} for r in v] if isinstance(v, list)
                else text(v))
            for k, v in out.items()
        }, indent=1))
        return 0
    from rich.table import Table

    console = _console()
    console.print(f"[bold]Summary-statistic privacy[/bold]: {_esc(out['title'])}")
    console.print(
        f"  prior max a = {out['a']}, min b = {out['b']}; a blind guess of the secret succeeds "
        f"with probability {out['blind_guess']} ({float(out['blind_guess']):.4f}); tolerance 0"
    )
    t1 = Table(title="Mechanisms: Π_i = sup_ĝ P(ĝ(θ') = g(θ))")
    for col in ("#", "mechanism", "kind", "Π_i", "≈"):
        t1.add_column(col, justify="left" if col in ("mechanism", "kind") else "right")
    for i, m in enumerate(out["mechanisms"], start=1):
        t1.add_row(str(i), _esc(m["name"]), m["kind"] + (" (worst history)" if m["kind"] ==
                   "adaptive" else ""), _esc(_fmt_fraction(m["pi"])), f"{float(m['pi']):.4f}")
    console.print(t1)
    t2 = Table(title="Composition of the first m mechanisms: exact Π vs Theorem 0.1")
    for col in ("m", "exact Π", "≈", "bound a·∏(Π_i/b)", "≈", "bound / exact"):
        t2.add_column(col, justify="right")
    for r in pre:
        t2.add_row(str(r["m"]), _esc(_fmt_fraction(r["exact"])), f"{float(r['exact']):.4f}",
                   _esc(_fmt_fraction(r["bound"])), f"{float(r['bound']):.4f}"
                   + (" (>1)" if r["bound"] > 1 else ""),
                   f"{float(r['bound'] / r['exact']):.3f}")
    console.print(t2)
    if args.svg:
        console.print(f"Wrote the plot to {_esc(args.svg)}")
    return 0
