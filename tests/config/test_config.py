from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.queries import Count, Histogram, Sum
from dpcr.timeutil import parse_duration, parse_timestamp


def base() -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": {"at_most_k": 3},
        "release": {"start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"}],
    }


def test_minimal_config_defaults(tmp_path: Path) -> None:
    cfg = parse_config(base(), base_dir=tmp_path)
    assert cfg.unit == "entry" and cfg.unit_column is None
    assert cfg.constraint == AtMostK(k=3)
    assert cfg.plan.period == parse_duration("1d")
    assert cfg.plan.start == parse_timestamp("2025-01-01T00:00:00Z")
    assert cfg.mechanism == "laplace" and cfg.on_error == "quarantine"
    assert str(cfg.source.path) == str((tmp_path / "log.jsonl").resolve())
    assert cfg.store_path == tmp_path / "out" / "store.sqlite"
    assert isinstance(cfg.queries[0], Count)


def test_full_config(tmp_path: Path) -> None:
    raw = base()
    raw["privacy"] = {"unit": "rider_id", "epsilon": 2, "delta": 1e-6, "mechanism": "gaussian"}
    raw["constraint"] = {
        "column": "kind",
        "classes": {"multi": {"at_most_k": 12}, "monthly": {"time_bounded": "31d"}},
        "default": {"at_most_k": 2},
    }
    raw["query"] = [
        {
            "name": "fares",
            "kind": "sum",
            "column": "fare",
            "lower": 0,
            "upper": 100,
            "grid": 0.5,
            "weight": 2,
        },
        {
            "name": "zones",
            "kind": "histogram",
            "column": "zone",
            "keys": ["A", "B"],
            "unknown": "other",
            "where": {"status": "active"},
        },
    ]
    raw["output"] = {"dir": "o", "store": "s.sqlite", "on_error": "quarantine"}
    cfg = parse_config(raw, base_dir=tmp_path, until="2025-06-01")
    assert cfg.unit == "rider_id"
    assert isinstance(cfg.constraint, Hybrid)
    assert cfg.constraint.classes["monthly"] == TimeBounded(bound=parse_duration("31d"))
    assert cfg.constraint.default == AtMostK(k=2)
    fares, zones = cfg.queries
    assert isinstance(fares, Sum) and fares.l1_sensitivity == 200
    assert isinstance(zones, Histogram) and zones.keys == ("A", "B", "other")
    assert cfg.weights == (2.0, 1.0)
    assert cfg.until == parse_timestamp("2025-06-01")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("privacy"), r"missing the key 'privacy'"),
        (lambda r: r["privacy"].update(epsilon=0), r"epsilon must be a number in \[1e-6, 1e6\)"),
        (lambda r: r["privacy"].update(epsilon=1e-14), r"noise drowns"),
        (lambda r: r["privacy"].update(epsilon=1e6), r"no privacy to state"),
        (lambda r: r["privacy"].update(epsilon="1"), r"privacy.epsilon must be int or float"),
        (lambda r: r["privacy"].update(mechanism="gaussian"), r"needs privacy.delta > 0"),
        (lambda r: r["privacy"].update(colour="red"), r"unknown key\(s\) in \[privacy\]"),
        (lambda r: r.update(constraint={}), r"exactly one of at_most_k"),
        (lambda r: r.update(constraint={"at_most_k": 0}), r"k from 1 to 10\^6"),
        (lambda r: r.update(constraint={"time_bounded": "3 weeks"}), r"not a duration"),
        (lambda r: r["release"].update(period="0d"), r"period must be > 0"),
        (lambda r: r["release"].update(start="yesterday"), r"cannot be parsed"),
        (lambda r: r.update(query=[]), r"at least one"),
        (lambda r: r["query"].append({"name": "n", "kind": "count"}), r"distinct"),
        (lambda r: r["query"].append({"name": "m", "kind": "median"}), r"histogram or events"),
        (
            lambda r: r["query"].append(
                {"name": "s", "kind": "sum", "column": "x", "lower": 0, "upper": 1, "grid": 0.3}
            ),
            r"not a multiple of grid",
        ),
        (
            lambda r: r["query"].append(
                {"name": "h", "kind": "histogram", "column": "x", "keys": []}
            ),
            r"declare the histogram's keys",
        ),
        (lambda r: r["output"] if False else r.update(output={"on_error": "ignore"}), r"on_error"),
    ],
)
def test_bad_configs_name_the_key_and_fix(tmp_path: Path, mutate: Any, message: str) -> None:
    raw = base()
    mutate(raw)
    with pytest.raises(ConfigError, match=message):
        parse_config(raw, base_dir=tmp_path)


def test_fingerprint_changes_with_what_was_promised(tmp_path: Path) -> None:
    a = parse_config(base(), base_dir=tmp_path)
    raw = base()
    raw["privacy"]["epsilon"] = 2.0
    b = parse_config(raw, base_dir=tmp_path)
    raw = base()
    raw["output"] = {"dir": "elsewhere"}
    c = parse_config(raw, base_dir=tmp_path)
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == c.fingerprint()


def test_source_table_is_validated_when_the_config_is_read(tmp_path: Path) -> None:
    raw = base()
    raw["source"] = {"format": "jsonl", "path": "x.jsonl", "colour": "red"}
    with pytest.raises(ConfigError, match="colour"):
        parse_config(raw, base_dir=tmp_path)
    raw["source"] = {"format": "xml", "path": "x.xml"}
    with pytest.raises(ConfigError, match="not supported"):
        parse_config(raw, base_dir=tmp_path)


def test_tree_height_is_derived_from_a_known_end(tmp_path: Path) -> None:
    from dpcr.plans import TreeRelease

    raw = base()
    raw["release"] = {"plan": "tree", "start": "2025-01-01", "period": "1d", "end": "2025-02-06"}
    plan = parse_config(raw, base_dir=tmp_path).plan
    assert isinstance(plan, TreeRelease) and plan.height == 6  # 36 days: 2^5 < 36 <= 2^6
    raw["release"] = {"plan": "tree", "start": "2025-01-01", "period": "1d"}
    growing = parse_config(raw, base_dir=tmp_path).plan
    assert isinstance(growing, TreeRelease) and growing.height is None
    raw["release"] = {
        "plan": "tree",
        "start": "2025-01-01",
        "period": "1d",
        "end": "2025-02-06",
        "height": 3,
    }
    fixed = parse_config(raw, base_dir=tmp_path).plan
    assert isinstance(fixed, TreeRelease) and fixed.height == 3
