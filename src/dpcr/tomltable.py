"""A TOML table read key by key: missing keys, wrong types and leftover (unknown) keys are
ConfigErrors that name the table, the key and the fix. Plans read their own ``[release]`` keys
with it (``from_toml``), so a new plan brings its configuration with it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from dpcr.errors import ConfigError
from dpcr.timeutil import parse_duration, parse_timestamp

__all__ = ["TomlTable", "likely_key", "unknown_keys"]


def likely_key(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` is most likely a misspelling of (:func:`difflib.get_close_matches`,
    similarity at least 0.6), or None."""
    found = difflib.get_close_matches(key, sorted(set(known)), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_keys(where: str, unknown: Iterable[str], known: Iterable[str]) -> str:
    """One line naming every unknown key of ``where`` (``[privacy]``, ``[[alerts]] #2``), each
    with the known key it most likely misspells."""
    known = sorted(set(known))
    parts = []
    for key in sorted(unknown):
        match = likely_key(key, known)
        parts.append(f"{key!r} (did you mean {match!r}?)" if match else repr(key))
    return (
        f"unknown key(s) in {where}: {', '.join(parts)}; fix the spelling or remove the key "
        f"(known keys: {', '.join(known)}; docs/config.md)"
    )


class TomlTable:
    """A TOML table whose keys are consumed; leftovers are reported as unknown keys."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"[{where}] must be a table, got {type(data).__name__}")
        self.data = dict(data)
        self.where = where
        #: every key asked for, present or not (the known keys an unknown one may misspell)
        self.asked: list[str] = []

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def pop(self, key: str, default: Any = ..., *, types: tuple[type, ...] | None = None) -> Any:
        self.asked.append(key)
        if key not in self.data:
            if default is ...:
                typo = [k for k in self.data if likely_key(k, [key]) == key]
                if typo:  # (an unknown key that misspells it, rather than a missing key)
                    raise ConfigError(
                        f"unknown key {typo[0]!r} in [{self.where}]: did you mean {key!r}? "
                        "(docs/config.md)"
                    )
                raise ConfigError(f"[{self.where}] is missing the key {key!r}")
            return default
        value = self.data.pop(key)
        if types is not None and (
            (isinstance(value, bool) and bool not in types) or not isinstance(value, types)
        ):
            names = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{self.where}.{key} must be {names}, got {value!r}")
        return value

    def pop_time(self, key: str, default: Any = ...) -> Any:
        """A timestamp (µs since the epoch), or ``default`` when absent. The TOML value is an
        ISO 8601 string or a TOML date/datetime; a number is refused (:func:`_time`)."""
        raw = self.pop(key, default)
        if raw is default and default is not ...:
            return default
        return _time(raw, f"{self.where}.{key}")

    def pop_span(self, key: str, default: Any = ...) -> Any:
        """A duration (µs) written as ``"7d"`` or seconds, or ``default`` when absent."""
        raw = self.pop(key, default, types=(str, int))
        if raw is default and default is not ...:
            return default
        return parse_duration(raw, name=f"{self.where}.{key}")

    def pop_time_value(self, value: Any, key: str) -> int:
        """One timestamp of a list under ``key`` (as :meth:`pop_time`)."""
        return _time(value, f"{self.where}.{key}")

    def done(self) -> None:
        """Refuse the keys no one asked for: one line naming each, with the known key it most
        likely misspells."""
        if self.data:
            raise ConfigError(unknown_keys(f"[{self.where}]", self.data, self.asked))


def _time(raw: Any, name: str) -> int:
    """A time written in the config: a number is ambiguous (seconds? milliseconds? µs?) and
    ``0`` would mean 1970-01-01, so only ISO 8601 text or a TOML date/datetime is accepted (the
    Python API keeps integers: µs since the epoch)."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        raise ConfigError(
            f"{name} = {raw!r} is a number, which does not say which time it means; write an "
            "ISO 8601 time in quotes, e.g. \"2025-01-06T08:30:00Z\" (or a TOML date such as "
            "2025-01-06)"
        )
    return parse_timestamp(raw, name=name)
