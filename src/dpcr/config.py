"""The TOML configuration of a continual release (documented in docs/config.md).

Parsing is strict: unknown keys, missing keys and wrong types are ConfigErrors that name the key
and the fix. The parsed :class:`ReleaseConfig` is immutable.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, SimpleConstraint, TimeBounded
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.engines import EngineConfig
from dpcr.errors import ConfigError
from dpcr.plans import PLAN_TYPES, ReleasePlan
from dpcr.queries import DERIVED_KINDS, QUERY_KINDS, DerivedKind, Query
from dpcr.release import CONSISTENCY_MODES, NOISES, Budget, Consistency, ContinualRelease
from dpcr.svt.rules import parse_alerts
from dpcr.timeutil import parse_duration, parse_timestamp
from dpcr.tomltable import TomlTable

__all__ = ["Budget", "ReleaseConfig", "load_config", "parse_config"]

MECHANISMS = tuple(NOISES)
PLANS = tuple(PLAN_TYPES)
#: The parsed configuration is the release itself.
ReleaseConfig = ContinualRelease


_Table = TomlTable


def load_config(path: str | Path, *, until: str | None = None) -> ContinualRelease:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        base_dir = path.resolve().parent
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{str(path)!r} is a folder; give the TOML configuration file (e.g. dpcr.toml)"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{str(path)!r} is not a TOML text file (not UTF-8; a store or another binary "
            "file?); give the TOML configuration file (e.g. dpcr.toml)"
        ) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (pathlib)
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"cannot read the config file {str(path)!r} ({reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(raw, base_dir=base_dir, until=until)


def _no_nul(path: str, key: str) -> str:
    """``path``, refused when it holds a NUL character (no file system path can)."""
    if "\x00" in path:
        raise ConfigError(f"{key} contains a NUL character (\\u0000), which no path can hold")
    return path


def _absolute(path: Path) -> str:
    """``path`` made absolute with its symlinks resolved; a symlink loop is left for the run's
    source check to name (resolving it would raise here)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)


def parse_config(
    raw: Mapping[str, Any], *, base_dir: Path, until: str | None = None
) -> ContinualRelease:
    """The TOML document as a :class:`ContinualRelease` (paths relative to ``base_dir``)."""
    top = _Table(raw, "top level")
    source_table = dict(_Table(top.pop("source"), "source").data)
    if "path" in source_table and isinstance(source_table["path"], str):
        source_table["path"] = _absolute(base_dir / _no_nul(source_table["path"], "source.path"))
    from dpcr.changelog import from_config as source_from_config

    source = source_from_config(source_table)  # validated now; reads no data
    if "follow" in top.data:  # read by `dpcr follow`; checked here so every command refuses it
        from dpcr.cdc.follow import parse_follow

        parse_follow(top.pop("follow"), source)

    unit, budget, mechanism = _parse_privacy(_Table(top.pop("privacy"), "privacy"))
    constraint, on_exhausted, warn_dropped = _parse_constraint_table(top.pop("constraint"))
    release_table = _Table(top.pop("release"), "release")
    objective = release_table.pop("objective", "worst", types=(str,))
    split = release_table.pop("weights", None, types=(str,))
    if split not in (None, "auto"):
        raise ConfigError(
            f"release.weights must be \"auto\" (the planner splits the budget across the "
            f"queries), got {split!r}; a query's own share is [[query]] weight"
        )
    plan, auto, planning = _parse_plan(release_table)

    queries, weights, consistency, derived = _parse_queries(top.pop("query"), split=bool(split))
    alerts = parse_alerts(top.pop("alerts", None), queries, None if unit == "entry" else unit)
    out_dir, store_path, on_error = _parse_output(_Table(top.pop("output", {}), "output"),
                                                  base_dir)  # fmt: skip
    engine = _parse_engine(top.pop("engine", None))
    top.done()

    until_us = parse_timestamp(until, name="--until") if until is not None else None
    release = ContinualRelease(
        source=source,
        unit=unit,
        constraint=constraint,
        plan=plan,
        queries=tuple(queries),
        derived=tuple(derived),
        # the planner splits the budget with the plan when both are "auto" (below)
        weights=None if split and auto else "auto" if split else tuple(weights),
        consistency=consistency,
        noise=NOISES[mechanism],
        budget=budget,
        output_dir=out_dir,
        store=store_path,
        on_error="quarantine" if on_error == "quarantine" else "raise",
        until=until_us,
        alerts=alerts,
        engine=engine,
        on_exhausted=on_exhausted,
        warn_dropped=warn_dropped,
        horizon=planning,
        objective=objective,
    )
    if auto:
        from dpcr.release import choose_plan

        release = choose_plan(release, split=split == "auto")
    return release


def _parse_privacy(privacy: _Table) -> tuple[str, Budget, str]:
    """``[privacy]``: the unit, the budget and the mechanism's name."""
    unit = privacy.pop("unit", "entry", types=(str,))
    budget = Budget(
        epsilon=privacy.pop("epsilon", types=(int, float)),
        delta=privacy.pop("delta", 0.0, types=(int, float)),
        selection_delta=privacy.pop("selection_delta", None, types=(int, float)),
    )
    mechanism = privacy.pop("mechanism", "laplace", types=(str,))
    privacy.done()
    if mechanism not in NOISES:
        raise ConfigError(
            f"privacy.mechanism must be one of {list(MECHANISMS)}, got {mechanism!r}"
        )
    return unit, budget, mechanism


def _parse_constraint_table(raw: Any) -> tuple[Constraint, Any, Any]:
    """``[constraint]``: the constraint, ``on_exhausted`` and ``warn_dropped`` (checked where
    they are used)."""
    on_exhausted = "freeze"
    if isinstance(raw, dict) and "on_exhausted" in raw:
        raw = dict(raw)
        on_exhausted = raw.pop("on_exhausted")
    warn_dropped = 0.05  # (operator-only: see ReleaseSettings.warn_dropped)
    if isinstance(raw, dict) and "warn_dropped" in raw:
        raw = dict(raw)
        warn_dropped = raw.pop("warn_dropped")
    nested = raw.get("state_machine") if isinstance(raw, dict) else None
    if isinstance(nested, dict) and "on_exhausted" in nested:
        raise ConfigError(
            "on_exhausted belongs to [constraint], not [constraint.state_machine]: write it "
            "right under [constraint], before the [constraint.state_machine] table"
        )
    return _parse_constraint(raw, "constraint", allow_hybrid=True), on_exhausted, warn_dropped


def _parse_queries(
    raw: Any, *, split: bool
) -> tuple[list[Query], list[float], dict[str, Consistency], list[DerivedKind]]:
    """The ``[[query]]`` tables: the queries, their weights, their consistency modes and the
    derived statistics. ``split``: the planner splits the budget (no query may name a weight)."""
    queries: list[Query] = []
    weights: list[float] = []
    consistency: dict[str, Consistency] = {}
    if not isinstance(raw, list) or not raw:
        raise ConfigError("declare the statistics as [[query]] tables (at least one)")
    derived: list[DerivedKind] = []
    for i, item in enumerate(raw, start=1):
        table = _Table(item, f"query #{i}")
        if isinstance(item, dict) and isinstance(item.get("kind"), str) \
                and item["kind"] in DERIVED_KINDS:
            derived.append(_parse_derived(table))
            continue
        con = _parse_consistency(table, str(item.get("name", f"#{i}")))
        query, weight = _parse_query(table)
        if con.modes:
            consistency[query.name] = con
        queries.append(query)
        weights.append(weight)
        if split and "weight" in item:
            raise ConfigError(
                f"query {query.name!r} has a weight, and release.weights = \"auto\" splits the "
                "budget itself: remove one of them"
            )
    return queries, weights, consistency, derived


def _parse_output(output: _Table, base_dir: Path) -> tuple[Path, Path, str]:
    """``[output]``: the public folder, the store's path and ``on_error``."""
    out_dir = base_dir / _no_nul(output.pop("dir", "out", types=(str,)), "output.dir")
    store = output.pop("store", None, types=(str,))
    if store:
        _no_nul(store, "output.store")
    store_path = (base_dir / store) if store else out_dir / "store.sqlite"
    on_error = output.pop("on_error", "quarantine", types=(str,))
    output.done()
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(
            f"output.on_error must be one of ['raise', 'quarantine'], got {on_error!r}"
        )
    return out_dir, store_path, on_error


def _parse_engine(raw: Any) -> EngineConfig:
    """``engine = "spark"``, or the table ``[engine]`` with ``name`` and ``[engine.spark]``
    (``master`` and Spark settings); absent: DuckDB."""
    if raw is None:
        return EngineConfig()
    if isinstance(raw, str):
        return EngineConfig(name=raw)
    return EngineConfig.from_toml(raw)


def _parse_simple(table: _Table) -> SimpleConstraint:
    k = table.pop("at_most_k", None, types=(int,))
    bound = table.pop("time_bounded", None, types=(str, int))
    machine = table.pop("state_machine", None, types=(dict,))
    limits = {op: table.pop(op, None, types=(int,)) for op in ("inserts", "deletes", "updates")}
    immutable = table.pop("immutable", None, types=(list,))
    if [k, bound, machine].count(None) != 2:
        table.done()  # (a misspelt key is named first)
        raise ConfigError(
            f"[{table.where}] needs exactly one of at_most_k = K, time_bounded = '30d' or a "
            f"[{table.where}.state_machine] table"
        )
    table.done()
    given: dict[str, Any] = {op: n for op, n in limits.items() if n is not None}
    if immutable is not None:
        if not all(isinstance(c, str) for c in immutable):
            raise ConfigError(f"{table.where}.immutable must be a list of column names")
        given["immutable"] = tuple(immutable)
    if given and k is None:
        raise ConfigError(
            f"[{table.where}] {', '.join(given)} limit an entry's lifecycle under at_most_k; "
            "add at_most_k = K (a state machine states its lifecycle itself)"
        )
    if given:
        if "inserts" not in given:
            raise ConfigError(
                f"[{table.where}] per-entry limits and immutable columns start with inserts = 1 "
                "(each entry inserted once), e.g. at_most_k = 4, inserts = 1, deletes = 1"
            )
        return OpLimits(limit=k, inserts=given["inserts"], deletes=given.get("deletes", 1),
                        updates=given.get("updates"), immutable=given.get("immutable", ()))
    if k is not None:
        return AtMostK(k=k)
    if machine is not None:
        return _parse_state_machine(_Table(machine, f"{table.where}.state_machine"))
    return TimeBounded(bound=parse_duration(bound, name=f"{table.where}.time_bounded"))


def _parse_state_machine(table: _Table) -> StateMachine:
    """``[constraint.state_machine]``: see docs/config.md, "State machines"."""

    def names(key: str, default: Any = ...) -> tuple[str, ...]:
        value = table.pop(key, default, types=(list,))
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{table.where}.{key} must be a list of state names, got {value!r}")
        return tuple(value)

    column = table.pop("column", types=(str,))
    initial = names("initial")
    terminal = names("terminal", [])
    transitions = table.pop("transitions", [], types=(list,))
    values = table.pop("values", None, types=(dict,))
    buckets = table.pop("buckets", None, types=(dict,))
    allowance = table.pop("allowance", {}, types=(dict,))
    table.done()
    if values is not None and not all(isinstance(v, str) for v in values.values()):
        raise ConfigError(f"{table.where}.values maps column values to state names (text)")
    return StateMachine(
        column=column,
        initial=initial,
        transitions=tuple(transitions),
        terminal=terminal,
        values=values,
        buckets=buckets,
        allowance=allowance,
    )


def _parse_constraint(data: Any, where: str, *, allow_hybrid: bool) -> Constraint:
    table = _Table(data, where)
    if allow_hybrid and "column" in table.data:
        column = table.pop("column", types=(str,))
        classes_raw = _Table(table.pop("classes"), f"{where}.classes")
        classes = {
            str(name): _parse_simple(_Table(value, f"{where}.classes.{name}"))
            for name, value in classes_raw.data.items()
        }
        default_raw = table.pop("default", None)
        default = _parse_simple(_Table(default_raw, f"{where}.default")) if default_raw else None
        table.done()
        return Hybrid(column=column, classes=classes, default=default)
    return _parse_simple(table)


def _parse_plan(table: _Table) -> tuple[ReleasePlan, bool, int | None]:
    """``[release]``: ``plan`` names the type (:data:`dpcr.plans.PLAN_TYPES`), which reads the
    rest of the table itself (``from_toml``; docs/config.md, "[release]"); ``"auto"`` (the
    default) reads a disjoint grid and lets the planner choose (:func:`dpcr.release.choose_plan`).
    Also returns ``planning_horizon`` (open-ended releases: the intervals predictions and the
    choice look at)."""
    from dpcr.plans.factorization_plan import MAX_HORIZON

    kind = table.pop("plan", "auto", types=(str,))
    if kind != "auto" and kind not in PLAN_TYPES:
        raise ConfigError(
            f"release.plan must be one of {[*PLAN_TYPES, 'auto']}, got {kind!r}"
        )
    planning = None
    if kind != "factorization":  # a factorization plan reads it itself
        planning = table.pop("planning_horizon", None, types=(int,))
    plan = PLAN_TYPES["disjoint" if kind == "auto" else kind].from_toml(table)
    table.done()
    if kind == "factorization":
        planning = getattr(plan, "planning_horizon", None)
    elif planning is not None:
        if getattr(plan, "end", None) is not None:
            raise ConfigError(
                "release.planning_horizon is for open-ended releases; this release has "
                "release.end (remove one of them)"
            )
        if isinstance(planning, bool) or not 1 <= planning <= MAX_HORIZON:
            raise ConfigError(
                f"release.planning_horizon must be 1 .. {MAX_HORIZON} base intervals, "
                f"got {planning!r}"
            )
    return plan, kind == "auto", planning


def _parse_consistency(table: _Table, name: str) -> Consistency:
    modes = table.pop("consistency", [], types=(list,))
    if not all(isinstance(m, str) for m in modes):
        raise ConfigError(
            f"query {name!r}: consistency must be a list of mode names from "
            f"{list(CONSISTENCY_MODES)}, got {modes!r}"
        )
    total = table.pop("total", None, types=(str,))
    try:
        return Consistency(modes=tuple(modes), total=total)
    except ConfigError as exc:
        raise ConfigError(f"query {name!r}: {exc}") from None


def _parse_derived(table: _Table) -> DerivedKind:
    """A ``[[query]]`` of a kind computed from released values (:data:`DERIVED_KINDS`): it
    names its inputs and takes no weight, where or consistency (it costs no budget)."""
    name = table.pop("name", types=(str,))
    derived = DERIVED_KINDS[table.pop("kind", types=(str,))].from_toml(table, name=name)
    table.done()
    return derived


def _parse_query(table: _Table) -> tuple[Query, float]:
    name = table.pop("name", types=(str,))
    kind = table.pop("kind", types=(str,))
    raw_weight = table.pop("weight", 1.0, types=(int, float))
    if not 1e-6 <= raw_weight <= 1e6:  # (NaN fails; a huge integer too, before float())
        raise ConfigError(f"query {name!r}: weight must be from 1e-6 to 1e6, got {raw_weight}")
    weight = float(raw_weight)
    where = table.pop("where", {}, types=(dict,))
    reader = QUERY_KINDS.get(kind)
    if reader is None:
        *kinds, last = (k for k in QUERY_KINDS if k != "exhausted")
        raise ConfigError(
            f"query {name!r}: kind must be {', '.join(kinds)} or {last} (or exhausted), "
            f"got {kind!r}"
        )
    query: Query = reader.from_toml(table, name=name, where=where)
    table.done()
    return query, weight
