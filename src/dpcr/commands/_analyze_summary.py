"""``dpcr analyze summary-privacy``: summary-statistic privacy and its composition."""

from __future__ import annotations

import argparse
import json
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from dpcr.commands._analyze_spec import (
    _console,
    _esc,
    _fmt_fraction,
    _fraction,
    _Spec,
    _write,
    load_spec,
)
from dpcr.errors import ConfigError


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
