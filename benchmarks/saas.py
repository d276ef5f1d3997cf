"""A SaaS ``subscriptions`` changelog (issue 32): sign-ups, plan changes and cancellations over a
year; the application never deletes a row.

Run: .venv/bin/python benchmarks/saas.py OUT.jsonl [--subscriptions N] [--seed S]

Each subscription is inserted (status ``active``, a plan and its monthly amount) on a uniform
day of 2025, changes plan with probability 0.3 (a second time with 0.1) and is cancelled
(status ``cancelled``, amount 0) with probability 0.4, each move a uniform number of days after
the last. So a subscription has 1 to 4 mutations, one insert and no delete: it satisfies
``at_most_k = 4, inserts = 1, deletes = 0``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PLANS = {"basic": 20, "pro": 60, "team": 200}
YEAR = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(day: float) -> str:
    return (YEAR + timedelta(days=day)).strftime("%Y-%m-%dT%H:%M:%SZ")


def subscriptions(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The mutations of ``n`` subscriptions, in time order."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        day = rng.uniform(0, 364)
        plan = rng.choice(list(PLANS))
        row = {"id": f"s{i}", "plan": plan, "status": "active", "amount": PLANS[plan]}
        out.append({"entry": row["id"], "ts": _iso(day), "op": "insert", "before": None,
                    "after": row})  # fmt: skip
        moves = ["plan"] * (rng.random() < 0.3) + ["plan"] * (rng.random() < 0.1)
        moves += ["cancel"] * (rng.random() < 0.4)
        for move in moves:
            day += rng.uniform(1, 120)
            if day >= 364:
                break
            if move == "plan":
                plan = rng.choice([p for p in PLANS if p != plan])
                new = dict(row, plan=plan, amount=PLANS[plan])
            else:
                new = dict(row, status="cancelled", amount=0)
            out.append({"entry": row["id"], "ts": _iso(day), "op": "update", "before": row,
                        "after": new})  # fmt: skip
            row = new
            if move == "cancel":
                break
    out.sort(key=lambda m: m["ts"])
    for seq, m in enumerate(out):
        m["seq"] = seq
        yield m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--subscriptions", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with args.out.open("w", encoding="utf-8") as fh:
        for m in subscriptions(args.subscriptions, args.seed):
            fh.write(json.dumps(m) + "\n")


if __name__ == "__main__":
    main()
