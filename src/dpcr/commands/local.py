"""``dpcr local-plan``: the table of continual local-DP protocols and their predicted errors."""

from __future__ import annotations

import argparse


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
    p.add_argument("--epsilon", type=float, required=True, help="total per-entry epsilon")
    p.add_argument("--population", type=int, required=True, help="number of entries n")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from dpcr.local import lifecycle_mutations, plan_protocols

    rows = plan_protocols(
        domain=args.domain,
        horizon=args.horizon,
        mutations=lifecycle_mutations(args.changes),
        epsilon=args.epsilon,
        population=args.population,
    )
    ref = next(r.predicted_mse for r in rows if r.protocol.name == "mutation/flat/grr")
    print(f"{'protocol':28} {'eps/node (level 0)':>18} {'pred. MSE':>12} {'vs paper':>10}")
    for r in rows:
        print(
            f"{r.protocol.name:28} {r.protocol.node_epsilon(0):18.4f} "
            f"{r.predicted_mse:12.4g} {r.predicted_mse / ref:10.2e}"
        )
    print(f"recommended: {rows[0].protocol.name}")
    return 0
