"""A small TOML writer for the CLI fuzz: documents as dicts, including values no writer would
emit on purpose (NaN, infinities, huge integers, raw TOML dates), so that the fuzz can feed
``dpcr`` every type in every key.

>>> print(dumps({"a": 1, "t": {"x": float("nan"), "y": Raw("2025-01-01")}, "q": [{"n": "c"}]}))
a = 1
<BLANKLINE>
[t]
x = nan
y = 2025-01-01
<BLANKLINE>
[[q]]
n = "c"
<BLANKLINE>
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Raw", "dumps", "value"]

_BARE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Raw:
    """TOML text written as it is (a date, a malformed value)."""

    text: str


def key(name: object) -> str:
    text = str(name)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def value(v: Any) -> str:
    """One TOML value (dicts inline)."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _table(path: list[str], doc: dict[str, Any], out: list[str]) -> None:
    plain = {k: v for k, v in doc.items() if not isinstance(v, dict) and not _is_table_array(v)}
    for k, v in plain.items():
        out.append(f"{key(k)} = {value(v)}")
    for k, v in doc.items():
        if isinstance(v, dict):
            name = ".".join(key(p) for p in [*path, k])
            out += ["", f"[{name}]"]
            _table([*path, k], v, out)
        elif _is_table_array(v):
            name = ".".join(key(p) for p in [*path, k])
            for item in v:
                out += ["", f"[[{name}]]"]
                # nested tables of an array item are written inline
                out += [f"{key(a)} = {value(b)}" for a, b in item.items()]


def dumps(doc: dict[str, Any]) -> str:
    out: list[str] = []
    _table([], doc, out)
    while out and out[0] == "":
        out.pop(0)
    return "\n".join(out) + "\n"
