"""Small changelogs and configs for end-to-end tests."""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path
from typing import Any

DAY = "2025-01-{:02d}T{:02d}:00:00Z"


def mutations(n_entries: int = 30, days: int = 10, seed: int = 3) -> list[dict[str, Any]]:
    """A valid changelog in time order: tickets inserted, ridden, some deleted."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    seq = 0
    for e in range(n_entries):
        kind = "multi" if e % 3 else "monthly"
        row: dict[str, Any] | None = None
        day = rnd.randint(1, days)
        hour = rnd.randint(0, 20)
        for step in range(rnd.randint(1, 6)):
            ts = DAY.format(day, hour)
            seq += 1
            if row is None:
                op, after = "insert", {
                    "ticket_id": f"t{e}", "rider_id": f"r{e % 7}", "kind": kind,
                    "zone": rnd.choice("ABC"), "fare": round(rnd.uniform(1, 120), 2), "rides": 0,
                }
            elif step == 5 or rnd.random() < 0.1:
                op, after = "delete", None
            else:
                op, after = "update", dict(row, rides=row["rides"] + 1)
            out.append({"entry": f"t{e}", "ts": ts, "seq": seq, "op": op,
                        "before": row, "after": after})
            row = after
            if row is None:
                break
            hour += rnd.randint(1, 30)
            day, hour = day + hour // 24, hour % 24
            if day > days + 3:
                break
    out.sort(key=lambda m: (m["ts"], m["seq"]))
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def write_config(
    tmp: Path,
    *,
    source: str = 'format = "jsonl"\npath = "log.jsonl"',
    epsilon: float = 1.0,
    unit: str = "entry",
    on_error: str = "raise",
    extra_query: str = "",
    constraint: str | None = None,
    name: str = "dpcr.toml",
    plan: str | None = "disjoint",
) -> Path:
    constraint = constraint or textwrap.dedent(
        """
        column = "kind"
        [constraint.classes.multi]
        at_most_k = 4
        [constraint.classes.monthly]
        time_bounded = "3d"
        """
    )
    text = textwrap.dedent(
        """
        [source]
        {source}

        [privacy]
        unit = "{unit}"
        epsilon = {epsilon}

        [constraint]
        {constraint}

        [release]
        {plan}start = "2025-01-01T00:00:00Z"
        period = "1d"

        [[query]]
        name = "active"
        kind = "count"

        [[query]]
        name = "zones"
        kind = "histogram"
        column = "zone"
        keys = ["A", "B", "C"]

        [[query]]
        name = "fares"
        kind = "sum"
        column = "fare"
        lower = 0
        upper = 100
        grid = 0.01
        {extra_query}

        [output]
        dir = "out"
        on_error = "{on_error}"
        """
    ).format(source=source, unit=unit, epsilon=epsilon, constraint=constraint,
             on_error=on_error, extra_query=extra_query,
             plan=f'plan = "{plan}"\n' if plan else "")
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path


def releases_per_class(plan: dict[str, Any]) -> dict[str, int]:
    """From ``dpcr plan --json``: the most releases one unit of each class affects."""
    return {name: c["releases"] for name, c in plan["per_class"].items()}


def per_layer(plan: dict[str, Any]) -> dict[str, list[int]]:
    """From ``dpcr plan --json``: per class, the most releases per layer one unit affects."""
    return {name: c["per_layer"] for name, c in plan["per_class"].items()}


def empty_follower_release(tmp: Path, **follow: object) -> tuple[Any, Any]:
    """A daily release of a count over an empty wal2json changelog file in ``tmp``, and its
    ``[follow]`` settings (PostgreSQL, no lateness, ``follow`` added): a follower whose steps
    release zeros, for the follower's own behaviour."""
    from dpcr.cdc.follow import parse_follow
    from dpcr.config import parse_config

    (tmp / "c.jsonl").write_text("")
    release = parse_config({
        "source": {"format": "wal2json", "path": "c.jsonl", "key": "id", "table": "public.t"},
        "privacy": {"epsilon": 1.0}, "constraint": {"at_most_k": 3},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"}], "output": {"on_error": "quarantine"},
    }, base_dir=tmp)  # fmt: skip
    settings = parse_follow({"capture": "postgres", "slot": "s", "allowed_lateness": "0s",
                             **follow}, release.source)  # fmt: skip
    return release, settings
