"""``dpcr analyze region``: privacy region, tangents and profile of finite mechanisms."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcr.commands._analyze_spec import (
    _console,
    _esc,
    _fmt_float,
    _fmt_fraction,
    _fraction,
    _int,
    _json_float,
    _number,
    _Spec,
    _write,
    load_spec,
)
from dpcr.errors import ConfigError

_MAX_ROWS = 24  # tangent rows shown in the table (--json lists all)
#: The most rounds composed, over all mechanisms: exact rational arithmetic, whose numbers grow
#: with the rounds (randomized response on 3 values: about 1 s at 64 rounds, 15 s at 256); each
#: composition step is bounded too (:data:`dpcr.analysis.regions.MAX_LOSS_PAIRS`).
MAX_COMPOSE = 64


def _mechanism(table: object, where: str) -> tuple[Any, int]:
    """(FiniteMechanism, composition count) of one ``[mechanism]`` table."""
    from dpcr.analysis.regions import FiniteMechanism, randomized_response

    t = _Spec(table, where)
    count = _int(t.pop("compose", 1), f"{where}.compose", most=MAX_COMPOSE)
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
    if rounds > MAX_COMPOSE:
        raise ConfigError(
            f"the mechanisms compose {rounds} rounds in all, more than {MAX_COMPOSE} "
            "(docs/analysis.md); compose fewer"
        )
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

