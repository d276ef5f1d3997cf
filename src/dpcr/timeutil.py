"""Time in dpcr: integers of microseconds since the Unix epoch (UTC).

Timestamps are parsed from ISO 8601 strings (``2025-01-06``, ``2025-01-06T08:30:00Z``,
``2025-01-06 08:30:00+01:00``; naive times are UTC) or epoch numbers (seconds, or milliseconds
when flagged). Durations are ``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"500ms"``, ``"250us"``
or combinations such as ``"1d12h"``, or an integer number of seconds.

>>> parse_duration("1d12h") == 36 * 3600 * 10**6
True
>>> format_timestamp(parse_timestamp("2025-01-06T08:30:00Z"))
'2025-01-06T08:30:00Z'
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any, TypeAlias

from dpcr.errors import ConfigError

#: What a time may be given as: µs since the epoch, an ISO 8601 string or a date(time).
Instant: TypeAlias = "int | str | _dt.date"
#: What a duration may be given as: µs, or a string like ``"7d"``.
Span: TypeAlias = "int | str"

US_PER_SECOND = 1_000_000
_UNITS = {
    "w": 7 * 86_400 * US_PER_SECOND,
    "d": 86_400 * US_PER_SECOND,
    "h": 3_600 * US_PER_SECOND,
    "m": 60 * US_PER_SECOND,
    "s": US_PER_SECOND,
    "ms": 1_000,
    "us": 1,
}
_DURATION_PART = re.compile(r"(\d+)(ms|us|w|d|h|m|s)")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def parse_duration(value: str | int, *, name: str = "duration") -> int:
    """Return a non-negative duration in microseconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a duration like '7d' or seconds, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{name} must be >= 0, got {value!r}")
        return check_span(value * US_PER_SECOND, name)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        pos, total = 0, 0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            total += int(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if text and pos == len(text):
            return check_span(total, name)
    raise ConfigError(
        f"{name} {value!r} is not a duration; write e.g. '7d', '12h', '1d12h', '30m' or seconds"
    )


def parse_timestamp(value: object, *, name: str = "timestamp") -> int:
    """Return microseconds since the epoch for an ISO 8601 string, datetime or epoch seconds."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{name} must be an ISO 8601 time or epoch seconds, got {value!r}")
    if isinstance(value, _dt.datetime):
        return datetime_to_us(value)
    if isinstance(value, _dt.date):
        return datetime_to_us(_dt.datetime(value.year, value.month, value.day))
    if isinstance(value, int):
        return check_instant(value * US_PER_SECOND, name)
    if isinstance(value, float):
        if not (math.isfinite(value) and MIN_US <= value * US_PER_SECOND <= MAX_US):
            raise ConfigError(f"{name} = {value!r} s is not a time in the years 1 to 9999")
        return check_instant(round(value * US_PER_SECOND), name)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            return datetime_to_us(_dt.datetime.fromisoformat(text))
        except ValueError:
            pass
    raise ConfigError(
        f"{name} {value!r} cannot be parsed; use ISO 8601 such as '2025-01-06T08:30:00Z'"
    )


#: Times dpcr accepts: years 1 to 9999 (what ISO 8601 and Python's datetime represent), in µs.
MIN_US = -62_135_596_800 * US_PER_SECOND
MAX_US = 253_402_300_799 * US_PER_SECOND + 999_999
#: The longest duration accepted (a period, window or time bound): 1000 years, in µs.
MAX_SPAN_US = 1000 * 366 * 86_400 * US_PER_SECOND


def check_instant(value: int, name: str) -> int:
    """``value`` (µs since the epoch) if it lies in years 1 to 9999, else a ConfigError."""
    if not MIN_US <= value <= MAX_US:
        raise ConfigError(
            f"{name} = {value!r} µs is outside the years 1 to 9999; give an ISO 8601 time such "
            "as '2025-01-06T08:30:00Z'"
        )
    return value


def check_span(value: int, name: str) -> int:
    """``value`` (µs) if it is a duration from 0 to 1000 years, else a ConfigError."""
    if not 0 <= value <= MAX_SPAN_US:
        raise ConfigError(
            f"{name} must be a duration from 0 to 1000 years, got {value!r} µs; write e.g. '7d'"
        )
    return value


def datetime_to_us(value: _dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * US_PER_SECOND + delta.microseconds


def us_to_datetime(us: int) -> _dt.datetime:
    """The UTC datetime of ``us`` µs since the epoch (years 1 to 9999, else a ConfigError)."""
    check_instant(int(us), "time")
    return _EPOCH + _dt.timedelta(microseconds=int(us))


def format_timestamp(us: int) -> str:
    """ISO 8601 in UTC with a trailing Z; microseconds only when non-zero. A value outside the
    years 1 to 9999 (which validation keeps out of the data) prints as raw µs, never fails."""
    if not MIN_US <= int(us) <= MAX_US:
        return f"{int(us)}us"
    text = us_to_datetime(us).isoformat()
    return text.replace("+00:00", "Z")


def format_duration(us: int) -> str:
    """Compact form, e.g. ``7d`` or ``1d12h``."""
    if us == 0:
        return "0s"
    parts = []
    rest = int(us)
    for unit in ("d", "h", "m", "s", "ms", "us"):
        size = _UNITS[unit]
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def as_instant(value: Any, name: str) -> Any:
    """A plan's time field: an int is already µs since the epoch (checked to lie in years
    1 to 9999); a string, date or datetime is parsed (:func:`parse_timestamp`). Anything else is
    returned for the plan's own check."""
    if isinstance(value, str | _dt.date):
        return parse_timestamp(value, name=name)
    if isinstance(value, int) and not isinstance(value, bool):
        return check_instant(value, name)
    return value


def as_span(value: Any, name: str) -> Any:
    """A plan's duration field: an int is already µs (checked: 0 to 1000 years); a string like
    ``"7d"`` is parsed."""
    if isinstance(value, str):
        return parse_duration(value, name=name)
    if isinstance(value, int) and not isinstance(value, bool):
        return check_span(value, name)
    return value


def normalize_fields(
    obj: object, *, timestamps: tuple[str, ...] = (), durations: tuple[str, ...] = ()
) -> None:
    """Convert the named fields of a frozen dataclass in place (from ``__post_init__``)."""
    for name in timestamps:
        object.__setattr__(obj, name, as_instant(getattr(obj, name), name))
    for name in durations:
        object.__setattr__(obj, name, as_span(getattr(obj, name), name))
