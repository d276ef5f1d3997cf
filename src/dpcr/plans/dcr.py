"""Disjoint continual release (DCR, paper section 4.4).

Release i (1-based) covers the time range (t_{i-1}, t_i]; the first covers (-inf, t_1]. A mutation
at exactly t_i belongs to release i. Times are microseconds since the epoch.

Either ``period`` (with ``start``: t_i = start + i * period, optionally up to ``end``) or an
explicit increasing tuple ``times`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcr.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class DisjointRelease:
    start: int | None = None
    period: int | None = None
    end: int | None = None
    times: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.times is not None:
            if self.period is not None or self.start is not None:
                raise ConfigError("give either explicit release times or start + period, not both")
            if len(self.times) == 0:
                raise ConfigError("explicit release times must not be empty")
            if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
                raise ConfigError("explicit release times must be strictly increasing")
            object.__setattr__(self, "times", tuple(int(t) for t in self.times))
        else:
            if self.period is None or self.start is None:
                raise ConfigError("a disjoint release needs start and period (or explicit times)")
            if self.period <= 0:
                raise ConfigError(f"period must be > 0, got {self.period!r}")
            if self.end is not None and self.end < self.start + self.period:
                raise ConfigError("end must be at least one period after start")

    @property
    def is_periodic(self) -> bool:
        return self.times is None

    @property
    def bounded(self) -> bool:
        """True when the plan has a last release time."""
        return self.times is not None or self.end is not None

    def release_count(self) -> int | None:
        """Number of releases, or None for an open-ended periodic plan."""
        if self.times is not None:
            return len(self.times)
        if self.end is None:
            return None
        assert self.start is not None and self.period is not None
        return (self.end - self.start) // self.period

    def release_time(self, index: int) -> int:
        """t_index for index >= 1."""
        if index < 1:
            raise ConfigError(f"release index must be >= 1, got {index}")
        if self.times is not None:
            return self.times[index - 1]
        assert self.start is not None and self.period is not None
        return self.start + index * self.period

    def release_times(self, until: int | None = None) -> list[int]:
        """All release times t_i <= ``until`` (and within the plan's end)."""
        if self.times is not None:
            return [t for t in self.times if until is None or t <= until]
        assert self.start is not None and self.period is not None
        last = self.end
        if until is not None:
            last = until if last is None else min(last, until)
        if last is None:
            raise ConfigError("an open-ended plan needs `until` to list its release times")
        n = (last - self.start) // self.period if last >= self.start else 0
        return [self.start + i * self.period for i in range(1, n + 1)]

    def interval(self, index: int) -> tuple[int | None, int]:
        """(t_{i-1}, t_i]; the lower end is None for the first release."""
        hi = self.release_time(index)
        lo = None if index == 1 else self.release_time(index - 1)
        return lo, hi

    def interval_index(self, ts: np.ndarray) -> np.ndarray:
        """1-based release index of each timestamp (vectorised); beyond the last release: 0."""
        ts = np.asarray(ts, dtype=np.int64)
        if self.times is not None:
            found: np.ndarray = np.searchsorted(np.asarray(self.times, dtype=np.int64), ts) + 1
            found[found > len(self.times)] = 0
            return found.astype(np.int64)
        assert self.start is not None and self.period is not None
        offset = ts - self.start
        idx: np.ndarray = np.maximum(1, -((-offset) // self.period))
        count = self.release_count()
        if count is not None:
            idx[idx > count] = 0
        return idx.astype(np.int64)
