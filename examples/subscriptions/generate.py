#!/usr/bin/env python3
"""Generate the synthetic subscription changelog of the bounding-bias example.

A year (2025-01-01 .. 2025-12-31, UTC) of a ``subscriptions(sub_id, status, plan, seats)`` table:

* a subscription is inserted as ``trial`` (60 %) or ``active``; a trial converts to ``active``
  after 14 days (70 %) or is ``cancelled``;
* while active it changes seats (rate by plan: basic rarely, pro monthly, team about weekly with
  a heavy tail of daily seat churn), changes plan, pauses (``paused`` for 7-60 days, then
  ``active`` again) and is eventually ``cancelled``; a cancelled subscription is deleted 30 days
  later;
* about 2 % of cancelled subscriptions are reactivated (``cancelled -> active``), a move the
  state machine of ``dpcr.toml`` does not allow.

The state machine in ``dpcr.toml`` (trial stays 2, {active, paused} stays 24: derived k = 30)
drops every mutation of a subscription after its first disallowed move or exhausted allowance,
which leaves it frozen in its last kept state: the bias ``benchmarks/bounding_bias.py`` measures.

At ``--scale 1``: 20,000 subscriptions and about 220,000 mutations. Outputs in ``--out``
(default ``examples/subscriptions/data``): ``changelog.jsonl`` (the canonical changelog, epoch
seconds) and ``truth.json`` (the unbounded year-end values of the three queries). Same ``--seed``
and ``--scale``: byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DAY = 86_400
YEAR_START = 1_735_689_600  # 2025-01-01T00:00:00Z, epoch seconds
YEAR_END = 1_767_225_600  # 2026-01-01T00:00:00Z
OUTPUTS = ("changelog.jsonl", "truth.json")

PLANS = ("basic", "pro", "team")
PLAN_P = (0.5, 0.3, 0.2)
SEAT_CAP = 50  # the sum query clamps seats to [0, 50]
# per-day hazards while active
SEAT_RATE = {"basic": 1 / 100, "pro": 1 / 12}
TEAM_SEAT_MEAN = 1 / 3  # team: lognormal rate with this mean
PLAN_RATE = 1 / 240
PAUSE_RATE = 1 / 120
CANCEL_RATE = 1 / 220
REACTIVATE_P = 0.02


def _seats(rng: np.random.Generator, plan: str) -> int:
    if plan == "basic":
        return 1
    if plan == "pro":
        return int(rng.integers(1, 4))
    return int(rng.integers(3, 41))


def _history(rng: np.random.Generator, start: float) -> list[tuple[float, dict | None]]:
    """One subscription's rows after each mutation (None: deleted), with their times (days)."""
    plan = str(rng.choice(PLANS, p=PLAN_P))
    row = {"status": "trial" if rng.random() < 0.6 else "active", "plan": plan,
           "seats": _seats(rng, plan)}  # fmt: skip
    out: list[tuple[float, dict | None]] = [(start, dict(row))]
    t = start
    if row["status"] == "trial":
        if rng.random() < 0.1:  # a seat change during the trial
            row["seats"] = max(1, row["seats"] + int(rng.choice([-1, 1])))
            out.append((t + rng.uniform(0, 14), dict(row)))
        t += 14
        row["status"] = "active" if rng.random() < 0.7 else "cancelled"
        out.append((t, dict(row)))
    team_rate = float(rng.lognormal(np.log(TEAM_SEAT_MEAN) - 0.5, 1.0))
    reactivated = False
    while row["status"] != "cancelled":
        seat_rate = team_rate if row["plan"] == "team" else SEAT_RATE[str(row["plan"])]
        rates = np.array([seat_rate, PLAN_RATE, PAUSE_RATE, CANCEL_RATE])
        t += float(rng.exponential(1 / rates.sum()))
        if t > 400:
            return out
        what = int(rng.choice(4, p=rates / rates.sum()))
        if what == 0:
            step = int(rng.choice([-2, -1, 1, 2]))
            row["seats"] = min(SEAT_CAP + 10, max(1, int(row["seats"]) + step))
        elif what == 1:
            new = str(rng.choice([p for p in PLANS if p != row["plan"]]))
            row["plan"], row["seats"] = new, _seats(rng, new)
        elif what == 2:
            row["status"] = "paused"
            out.append((t, dict(row)))
            t += float(rng.uniform(7, 60))
            row["status"] = "cancelled" if rng.random() < 0.2 else "active"
        else:
            row["status"] = "cancelled"
        out.append((t, dict(row)))
        if row["status"] == "cancelled" and not reactivated and rng.random() < REACTIVATE_P:
            reactivated = True
            t += float(rng.uniform(1, 25))
            row["status"] = "active"
            out.append((t, dict(row)))
    out.append((t + 30, None))
    return out


def generate(out_dir: Path, *, seed: int = 2025, scale: float = 1.0) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    n = round(20_000 * scale)
    starts = np.sort(rng.uniform(0, 365, size=n))
    events: list[tuple[int, int, dict | None, dict | None]] = []  # ts, sub, before, after
    truth = {"active": 0, "basic": 0, "pro": 0, "team": 0, "seats": 0, "live": 0}
    for sub, start in enumerate(starts):
        before: dict | None = None
        last: dict | None = None
        for day, row in _history(rng, float(start)):
            ts = YEAR_START + int(day * DAY)
            if ts >= YEAR_END:
                break
            after = None if row is None else {"sub_id": sub, **row}
            events.append((ts, sub, before, after))
            before = last = after
        if last is not None:
            truth["live"] += 1
            if last["status"] == "active":
                truth["active"] += 1
                truth[str(last["plan"])] += 1
                truth["seats"] += min(SEAT_CAP, int(last["seats"]))
    events.sort(key=lambda e: (e[0], e[1]))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "changelog.jsonl", "w", encoding="utf-8") as f:
        for seq, (ts, sub, b, a) in enumerate(events, start=1):
            op = "insert" if b is None else ("delete" if a is None else "update")
            record = {"entry": str(sub), "ts": ts, "seq": seq, "op": op, "before": b, "after": a}
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    truth["subscriptions"], truth["mutations"] = n, len(events)
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    return truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--if-missing", action="store_true",
                        help="do nothing when every output already exists")  # fmt: skip
    args = parser.parse_args(argv)
    if args.if_missing and all((args.out / name).exists() for name in OUTPUTS):
        return 0
    truth = generate(args.out, seed=args.seed, scale=args.scale)
    subs, muts = truth["subscriptions"], truth["mutations"]
    print(f"{subs:,} subscriptions, {muts:,} mutations -> {args.out}")
    print(f"year-end truth: {truth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
