"""Generated valid configurations for timing and fuzzing ``dpcr plan`` (importable by any test).

``valid_configs(seed, n)`` returns ``n`` TOML texts, the same ones for the same seed. Each is a
release ``dpcr plan`` accepts: every plan kind (auto, disjoint, tree, window, factorization
sqrt/rescaled/blt), both mechanisms, ε from 1e-3 to 1e3 and δ from 1e-12 to 0.1 (log-uniform),
at most k from 1 to 1000, time bounds and hybrid constraints, periods from 1 s to a year,
horizons from 1 interval to the plan's limit (10^6 reporting intervals, 65,536 for a
factorization) or open-ended, 1 to 8 queries (counts, sums with ranges up to 10^9 grid steps,
histograms with up to 1,000 keys, exhausted counts) and alert rules. The source path is
``changelog.jsonl`` beside the config (``dpcr plan`` reads no data: it need not exist).

>>> texts = valid_configs(0, 3)
>>> len(texts), texts == valid_configs(0, 3)
(3, True)
"""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["valid_configs"]

#: The limits the generator reaches (dpcr.plans.base.MAX_RELEASES, factorization MAX_HORIZON).
MAX_INTERVALS = 10**6
MAX_FACTORIZATION = 1 << 16
_PERIODS = {
    "1s": 1,
    "30s": 30,
    "1m": 60,
    "15m": 900,
    "1h": 3600,
    "6h": 21600,
    "1d": 86400,
    "7d": 604800,
    "30d": 2592000,
    "365d": 31536000,
}
_START = 1_704_067_200  # 2024-01-01T00:00:00Z, in seconds


def _log_uniform(rnd: random.Random, lo: float, hi: float) -> float:
    return float(10 ** rnd.uniform(math.log10(lo), math.log10(hi)))


def _count(rnd: random.Random, hi: int) -> int:
    """An integer from 1 to ``hi``, log-uniform (small and huge values equally often)."""
    return max(1, min(hi, round(_log_uniform(rnd, 1, hi))))


def _on_grid(steps: int, grid: float) -> float | int:
    """``steps`` multiples of ``grid`` as the decimal number it is (no float rounding)."""
    from decimal import Decimal

    value = Decimal(steps) * Decimal(repr(grid))
    return int(value) if value == value.to_integral_value() else float(value)


def _iso(seconds: int) -> str:
    import datetime as dt

    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    return str(v)


def _table(name: str, items: dict[str, Any], *, array: bool = False) -> str:
    head = f"[[{name}]]" if array else f"[{name}]"
    return "\n".join([head, *(f"{k} = {_value(v)}" for k, v in items.items())]) + "\n"


def _simple(rnd: random.Random, period: int) -> dict[str, Any]:
    if rnd.random() < 0.6:
        return {"at_most_k": _count(rnd, 1000)}
    bound = max(1, round(period * _log_uniform(rnd, 0.01, 300)))
    return {"time_bounded": f"{min(bound, 3650 * 86400)}s"}


def _constraint(rnd: random.Random, period: int) -> str:
    if rnd.random() < 0.8:
        return _table("constraint", _simple(rnd, period))
    out = _table("constraint", {"column": "kind"})
    for name in rnd.sample(["a", "b", "c"], rnd.randint(1, 3)):
        out += _table(f"constraint.classes.{name}", _simple(rnd, period))
    if rnd.random() < 0.5:
        out += _table("constraint.default", _simple(rnd, period))
    return out


def _release(rnd: random.Random, mechanism: str) -> tuple[str, int]:
    kinds = ["auto", "disjoint", "tree", "window"] + (
        ["factorization"] if mechanism == "gaussian" else []
    )
    kind = rnd.choice(kinds)
    name = rnd.choice(list(_PERIODS))
    period = _PERIODS[name]
    start = _START + rnd.randrange(0, 730) * 86400
    table: dict[str, Any] = {"plan": kind, "start": _iso(start), "period": name}
    limit = MAX_FACTORIZATION if kind == "factorization" else MAX_INTERVALS
    open_ended = rnd.random() < 0.3 and (kind != "factorization" or rnd.random() < 0.5)
    n = _count(rnd, limit)
    if start + n * period > 253_402_300_799:  # beyond the year 9999
        n = (253_402_300_799 - start) // period
    if kind == "window":  # a multiple of period / d: at most 12 base intervals per period
        d = rnd.choice([1, 1, 2, 3, 4, 12]) if period % 12 == 0 else 1
        table["window"] = f"{period // d * _count(rnd, 60)}s"
    elif kind == "tree":
        table["branching"] = rnd.choice([2, 3, 4, 8, 16])
        if rnd.random() < 0.3:
            table["height"] = rnd.randint(1, 20)
        table["estimator"] = rnd.choice(["honaker", "plain"])
    elif kind == "factorization":
        table["factorization"] = rnd.choice(["sqrt", "rescaled", "blt"])
        if table["factorization"] != "blt":
            open_ended = False
        if open_ended and rnd.random() < 0.5:
            table["planning_horizon"] = _count(rnd, MAX_FACTORIZATION)
        if table["factorization"] == "blt" and rnd.random() < 0.3:
            table["fit_participations"] = _count(rnd, 64)
    if not open_ended:
        if kind == "factorization" and rnd.random() < 0.5:
            table["horizon"] = n
        else:
            table["end"] = _iso(start + n * period)
    elif kind in ("auto", "disjoint", "tree") and rnd.random() < 0.3:
        table["planning_horizon"] = _count(rnd, MAX_FACTORIZATION)
    return _table("release", table), period


def _queries(rnd: random.Random) -> tuple[str, list[str]]:
    out, counts = "", []
    for i in range(rnd.randint(1, 8)):
        kind = rnd.choice(["count", "count", "sum", "histogram", "exhausted"])
        q: dict[str, Any] = {"name": f"q{i}", "kind": kind}
        if kind == "sum":
            grid = rnd.choice([1, 0.5, 0.01, 10])
            steps = _count(rnd, 10**9)
            below = _count(rnd, steps) if rnd.random() < 0.3 else 0
            q.update(
                column="v", lower=_on_grid(-below, grid), upper=_on_grid(steps, grid), grid=grid
            )
        elif kind == "histogram":
            q.update(column="zone", keys=[f"k{j}" for j in range(_count(rnd, 1000))])
            if rnd.random() < 0.3:
                q["unknown"] = "other"
        elif kind == "count":
            counts.append(q["name"])
            if rnd.random() < 0.3:
                q["where"] = {"zone": ["A", "B"]}
        if rnd.random() < 0.3:
            q["weight"] = _log_uniform(rnd, 0.1, 10)
        out += _table("query", q, array=True)
    return out, counts


def _alerts(rnd: random.Random, counts: list[str], epsilon: float, delta: float) -> str:
    out = ""
    for i in range(rnd.randint(1, 2)):
        what = rnd.choice(["running", "window"])
        rule: dict[str, Any] = {
            "name": f"a{i}",
            "statistic": rnd.choice(counts),
            "what": what,
            "threshold": _count(rnd, 10**6),
            "cutoff": _count(rnd, 20),
            "epsilon": epsilon * rnd.uniform(0.01, 0.2),
        }
        if what == "window":
            rule["window"] = _count(rnd, 30)
        if delta > 0 and rnd.random() < 0.3:  # the rules' δ stays well inside the budget's
            rule["delta"] = delta * _log_uniform(rnd, 1e-3, 0.1)
        if rnd.random() < 0.3:
            rule["numeric"] = True
        out += _table("alerts", rule, array=True)
    return out


def _config(rnd: random.Random) -> str:
    mechanism = rnd.choice(["laplace", "gaussian"])
    epsilon = _log_uniform(rnd, 1e-3, 1e3)
    privacy: dict[str, Any] = {"epsilon": epsilon, "mechanism": mechanism}
    if mechanism == "gaussian" or rnd.random() < 0.3:
        privacy["delta"] = _log_uniform(rnd, 1e-12, 0.1)
    entry = rnd.random() < 0.8
    if not entry:
        privacy = {"unit": "uid", **privacy}
    release, period = _release(rnd, mechanism)
    queries, counts = _queries(rnd)
    # the row-rescaled square root is proven for one interval per unit and for runs only
    rescaled = 'factorization = "rescaled"' in release
    constraint = _table("constraint", {"at_most_k": 1}) if rescaled else _constraint(rnd, period)
    text = _table("source", {"format": "jsonl", "path": "changelog.jsonl"})
    text += _table("privacy", privacy) + constraint + release + queries
    if entry and counts and rnd.random() < 0.2:
        text += _alerts(rnd, counts, epsilon, privacy.get("delta", 0.0))
    return text


def valid_configs(seed: int, n: int) -> list[str]:
    """``n`` generated TOML configurations that ``dpcr plan`` accepts (the same for a seed)."""
    rnd = random.Random(seed)
    return [_config(rnd) for _ in range(n)]
