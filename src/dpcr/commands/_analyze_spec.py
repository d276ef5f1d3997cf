"""Spec reading and output helpers shared by the ``dpcr analyze`` subcommands."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcr.errors import ConfigError


def load_spec(path: str | Path) -> dict[str, Any]:
    """A specification file as a dict: JSON when the name ends in ``.json``, TOML otherwise."""
    import tomllib

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"specification {str(p)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"specification {str(p)!r} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read the specification {str(p)!r} ({exc.strerror}); give a JSON or TOML file"
        ) from None
    try:
        raw = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"{p}: not valid {kind}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the specification must be a table/object at the top level")
    return raw


class _Spec:
    """Typed access to one table of a spec; :meth:`done` refuses unknown keys (typos)."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a table/object, got {data!r}")
        self.data = dict(data)
        self.where = where

    def pop(self, key: str, default: Any = ..., *, types: tuple[type, ...] = ()) -> Any:
        if key not in self.data:
            if default is ...:
                raise ConfigError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data.pop(key)
        bad_bool = isinstance(value, bool) and bool not in types
        if types and (not isinstance(value, types) or bad_bool):
            names = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{self.where}.{key} must be {names}, got {value!r}")
        return value

    def done(self) -> None:
        if self.data:
            raise ConfigError(f"{self.where}: unknown key(s) {sorted(self.data)}")


def _fraction(value: object, where: str, *, probability: bool = True) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where} must be a number or a string like '3/4', got {value!r}")
    try:
        out = Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ConfigError(f"{where} is not a number: {value!r}") from None
    if probability and not 0 <= out <= 1:
        raise ConfigError(f"{where} must lie in [0, 1], got {value!r}")
    return out


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{where} must be finite and >= 0, got {value!r}")
    return float(value)


def _int(value: object, where: str, *, least: int = 1, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{where} must be an integer >= {least}, got {value!r}")
    if most is not None and value > most:
        raise ConfigError(f"{where} must be at most {most:,} (docs/analysis.md), got {value!r}")
    return value


def _fmt_fraction(value: Fraction, width: int = 22) -> str:
    """The exact fraction when it is short, else a 10-digit decimal marked ≈."""
    text = str(value)
    return text if len(text) <= width else f"≈{float(value):.10g}"


def _fmt_float(value: float, digits: int = 6) -> str:
    return "∞" if math.isinf(value) else f"{value:.{digits}g}"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _esc(value: object) -> str:
    from rich.markup import escape

    return escape(str(value))


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path!r}: {exc.strerror or exc}") from None

