"""A misspelt key is an unknown key with its likely spelling, in every table (issue 33,
point 6): never a missing key elsewhere, never a bare list of names."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import ConfigError


def base() -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": {"at_most_k": 3},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"},
                  {"name": "s", "kind": "sum", "column": "fare", "lower": 0, "upper": 10}],
        "output": {"dir": "out"},
    }  # fmt: skip


def _rename(raw: dict[str, Any], path: tuple[Any, ...], new: str) -> None:
    *parents, key = path
    table = raw
    for p in parents:
        table = table[p]
    table[new] = table.pop(key)


@pytest.mark.parametrize(
    ("path", "typo", "table"),
    [
        (("privacy", "epsilon"), "epsilion", "[privacy]"),  # required: was "missing 'epsilon'"
        (("release", "period"), "perod", "[release]"),  # required
        (("release", "plan"), "plna", "[release]"),  # optional
        (("query", 1, "upper"), "uper", "[query #2]"),
        (("query", 0, "kind"), "knid", "[query #1]"),
        (("output", "dir"), "dri", "[output]"),
        (("constraint", "at_most_k"), "at_most_kk", "[constraint]"),
        (("privacy",), "privcy", "[top level]"),
    ],
)
def test_a_misspelt_key_names_the_likely_spelling(
    tmp_path: Path, path: tuple[Any, ...], typo: str, table: str
) -> None:
    raw = copy.deepcopy(base())
    _rename(raw, path, typo)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, base_dir=tmp_path)
    message = str(err.value)
    assert f"{typo!r}" in message and table in message, message
    assert f"did you mean {path[-1]!r}?" in message, message
    assert "is missing" not in message and "\n" not in message


def test_source_engine_and_alert_typos_name_the_likely_spelling(tmp_path: Path) -> None:
    raw = base()
    raw["source"]["epoch_unt"] = "ms"
    with pytest.raises(ConfigError, match=r"'epoch_unt'.*did you mean 'epoch_unit'"):
        parse_config(raw, base_dir=tmp_path)
    raw = base()
    raw["source"]["fromat"] = raw["source"].pop("format")
    with pytest.raises(ConfigError, match="'fromat' in \\[source\\]: did you mean 'format'"):
        parse_config(raw, base_dir=tmp_path)
    raw = base()
    raw["engine"] = {"memory_limt": "1GB"}
    with pytest.raises(ConfigError, match=r"'memory_limt'.*did you mean 'memory_limit'"):
        parse_config(raw, base_dir=tmp_path)
    raw = base()
    raw["alerts"] = [{"name": "a", "statistic": "n", "what": "change", "threshold": 5,
                      "cutof": 3, "epsilon": 0.5}]  # fmt: skip
    with pytest.raises(ConfigError, match="'cutof' \\(did you mean 'cutoff'\\?\\)"):
        parse_config(raw, base_dir=tmp_path)


def test_an_unknown_key_without_a_likely_spelling_lists_the_known_keys(tmp_path: Path) -> None:
    raw = base()
    raw["output"]["colour"] = "blue"
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in \[output\]: 'colour'; .*"
                       r"known keys: dir, on_error, store"):  # fmt: skip
        parse_config(raw, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("table", "key"), [("source", "path"), ("output", "dir"), ("output", "store")]
)
def test_a_path_with_a_nul_character_is_one_error(tmp_path: Path, table: str, key: str) -> None:
    """(was: a ValueError traceback from the path's resolution or first use)"""
    raw = base()
    raw[table][key] = "lo\x00g"
    with pytest.raises(ConfigError, match=f"{table}.{key} contains a NUL character"):
        parse_config(raw, base_dir=tmp_path)
