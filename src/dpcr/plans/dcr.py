"""Disjoint continual release (DCR, paper section 4.4).

Release i (1-based) covers the time range (t_{i-1}, t_i]; the first covers (-inf, t_1]. A mutation
at exactly t_i belongs to release i. Times are microseconds since the epoch.

Either ``period`` (with ``start``: t_i = start + i * period, optionally up to ``end``) or an
explicit increasing tuple ``times`` is given.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dpcr.errors import ConfigError
from dpcr.plans.base import (
    Budgeting,
    Estimates,
    LayerBudget,
    Node,
    check_release_count,
    check_whole_periods,
    interval_series,
    sum_rows,
)
from dpcr.plans.counts import max_affected_by_class, reachable_runs

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.bounding.constraints import Constraint
    from dpcr.timeutil import Instant, Span
    from dpcr.tomltable import TomlTable


@dataclass(frozen=True, slots=True, kw_only=True)
class DisjointRelease:
    """Disjoint intervals (DCR); also the grid of base intervals of every other plan.

    ``start``/``end`` accept a timestamp string and ``period`` a duration string (``"7d"``).

    >>> DisjointRelease(start="2025-01-01", period="7d").interval(2)
    (1736294400000000, 1736899200000000)
    """

    kind: ClassVar[str] = "disjoint"
    mechanisms: ClassVar[tuple[str, ...]] = ("laplace", "gaussian")

    start: int | None = None
    period: int | None = None
    end: int | None = None
    times: tuple[int, ...] | None = None

    if TYPE_CHECKING:  # (what the constructor accepts; the fields hold µs)

        def __init__(
            self, *, start: Instant | None = None, period: Span | None = None,
            end: Instant | None = None, times: Sequence[Instant] | None = None,
        ) -> None: ...

    def __post_init__(self) -> None:
        from dpcr.timeutil import as_instant, normalize_fields

        normalize_fields(self, timestamps=("start", "end"), durations=("period",))
        if self.times is not None:
            object.__setattr__(self, "times", tuple(as_instant(t, "times") for t in self.times))
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
            if self.end is not None:
                check_whole_periods(self.start, self.period, self.end)
            check_release_count(self.release_count(), "the plan")

    @classmethod
    def from_toml(cls, table: TomlTable) -> DisjointRelease:
        """``[release]`` keys: ``times = [...]``, or ``start``, ``period`` and optional ``end``."""
        times = table.pop("times", None, types=(list,))
        if times is not None:
            return cls(times=tuple(table.pop_time_value(t, "times") for t in times))
        return cls(start=table.pop_time("start"), period=table.pop_span("period"),
                   end=table.pop_time("end", None))

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

    def count_until(self, until: int) -> int:
        """How many release times are at or before ``until`` (within the plan's end): the
        length of :meth:`release_times`, without listing them (O(1) for a periodic plan)."""
        if self.times is not None:
            return bisect.bisect_right(self.times, until)
        assert self.start is not None and self.period is not None
        last = until if self.end is None else min(self.end, until)
        return (last - self.start) // self.period if last >= self.start else 0

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

    # --- the plan protocol (dpcr.plans.base) ----------------------------------------------

    def schedule(self) -> DisjointRelease:
        return self

    def base_grid(self) -> DisjointRelease:
        return self

    def reporting_range(self, i: int) -> tuple[int | None, int]:
        return self.interval(i)

    def reporting_base(self, i: int) -> tuple[int, int]:
        return i, i

    def base_range(self, before: int, after: int) -> tuple[int, int]:
        return before + 1, after

    def due(self, before: int, after: int) -> list[Node]:
        return [(0, i) for i in range(before + 1, after + 1)]

    def exact(self, base: np.ndarray, first: int, nodes: Sequence[Node]) -> np.ndarray:
        return sum_rows(base, first, [(i, i) for _, i in nodes])

    def instance(self, node: Node) -> Node:
        return node

    def node_range(self, node: Node) -> tuple[int | None, int]:
        return self.interval(node[1])

    def participation(
        self, constraint: Constraint, *, reporting: int | None
    ) -> dict[str, Participation]:
        """Per class, the most releases one unit affects (Thm 4.1, 4.2; MostSpan for a time
        bound) among the first ``reporting`` releases (None: the whole plan), and for a time
        bound with explicit release times the reachable runs (the exact refinement for unlike
        instances; on a periodic grid every run of MostSpan consecutive releases is reachable,
        which the count says, and listing them would cost O(releases) per call)."""
        from dpcr.accounting.guarantee import Participation
        from dpcr.bounding.constraints import Hybrid, TimeBounded

        classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {
            "all": constraint
        }
        if reporting == 0:
            return {name: Participation(counts=(0,)) for name in classes}
        until = None if reporting is None else self.release_time(reporting)
        counts = max_affected_by_class(self, constraint, until=until)
        times = None
        if self.times is not None and any(isinstance(c, TimeBounded) for c in classes.values()):
            times = self.release_times(until)
        out: dict[str, Participation] = {}
        for name, con in classes.items():
            runs = None
            if isinstance(con, TimeBounded) and times:
                runs = tuple(reachable_runs(times, con.bound))
            out[name] = Participation(counts=(counts[name],), runs=runs)
        return out

    def budgeting(self, constraint: Constraint, *, clamped: bool = False) -> Budgeting:
        """Each release is one base interval: the per-interval clamp is the release's."""
        worst = max(p.total for p in self.participation(constraint, reporting=None).values())
        return Budgeting(layers=(LayerBudget(share=Fraction(1, max(1, worst))),))

    def estimate(
        self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates:
        """Running values: prefix sums of the released changes, variances summed (exact)."""
        change, var = interval_series(values, variances, n)
        return Estimates(
            change=change,
            estimate=np.cumsum(change, axis=0),
            change_var=var,
            estimate_var=np.cumsum(var),
        )

    def variances(self, layer_var: Sequence[float], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(change, running value) variances of reporting intervals ``1 .. n`` (as
        :meth:`estimate`'s)."""
        var = np.full(n, float(layer_var[0]))
        return var, np.cumsum(var)

    def describe(self) -> str:
        from dpcr.timeutil import format_duration, format_timestamp

        if self.times is not None:
            return f"disjoint continual release (DCR), {len(self.times)} explicit release times"
        assert self.start is not None and self.period is not None
        end = format_timestamp(self.end) if self.end is not None else "open-ended"
        return (
            f"disjoint continual release (DCR), every {format_duration(self.period)} from "
            f"{format_timestamp(self.start)} ({end})"
        )
