"""``dpcr local-plan``: the table of continual local-DP protocols and their predicted errors."""

from __future__ import annotations

import argparse


def _fanouts(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fanouts like 2,4,8, got {text!r}") from None
    if not out or min(out) < 2:
        raise argparse.ArgumentTypeError(f"every fanout must be >= 2, got {text!r}")
    return out


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "local-plan",
        help="rank local-DP protocols for evolving entries by predicted error",
        description="Predicted MSE of every continual local-DP protocol at the last period, "
        "for a synthetic workload of the given shape (no data is read).",
    )
    p.add_argument("--domain", type=int, required=True, help="number of values |R|")
    p.add_argument("--horizon", type=int, required=True, help="number of periods T")
    p.add_argument(
        "--changes", type=int, default=2, help="value changes per entry (plus insert and delete)"
    )
    p.add_argument(
        "--bound",
        type=int,
        metavar="B",
        help="B-time-bounded entries: every mutation within B periods of the insertion (any "
        "number of them; --changes then only shapes the workload model); default: at most "
        "changes + 2 mutations",
    )
    p.add_argument("--epsilon", type=float, required=True, help="total per-entry epsilon")
    p.add_argument("--population", type=int, required=True, help="number of entries n")
    p.add_argument(
        "--fanout",
        type=_fanouts,
        default="2",
        metavar="C,C,...",
        help="tree fanouts to consider",
    )
    p.add_argument(
        "--window",
        type=int,
        metavar="W",
        help="rank for the histogram's change over the last W periods (window protocols "
        "against differences of prefix estimates)",
    )
    p.add_argument(
        "--step", type=int, default=1, metavar="P", help="with --window: release every P periods"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from dpcr.errors import ConfigError
    from dpcr.local import lifecycle_mutations, plan_protocols

    if args.step != 1 and args.window is None:
        raise ConfigError("--step needs --window")
    rows = plan_protocols(
        domain=args.domain,
        horizon=args.horizon,
        mutations=None if args.bound is not None else lifecycle_mutations(args.changes),
        bound=args.bound,
        changes=args.changes,
        epsilon=args.epsilon,
        population=args.population,
        fanouts=args.fanout,
        window=args.window,
        step=args.step,
    )
    if args.bound is not None:
        constraint = f"every mutation within {args.bound} periods of the insertion"
    else:
        constraint = f"at most {lifecycle_mutations(args.changes)} mutations"
    answer = "histogram" if args.window is None else f"change over {args.window} periods"
    print(f"constraint: {constraint}; answer: {answer}")
    ref = next(r.predicted_mse for r in rows if r.protocol.name == "mutation/flat/grr")
    print(f"{'protocol':34} {'eps/node (level 0)':>18} {'pred. MSE':>12} {'vs paper':>10}")
    for r in rows:
        print(
            f"{r.protocol.name:34} {r.protocol.node_epsilon(0):18.4f} "
            f"{r.predicted_mse:12.4g} {r.predicted_mse / ref:10.2e}"
        )
    print(f"recommended: {rows[0].protocol.name}")
    return 0
