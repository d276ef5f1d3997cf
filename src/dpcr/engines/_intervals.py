"""Which reporting interval a timestamp falls in, as SQL: interval i covers (t_{i-1}, t_i], the
first also everything before it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def with_interval(rows: str, release_times: Sequence[int], *, beyond: bool = False) -> str:
    """SELECT of the rows of ``rows`` (with a ``ts``) and ``iv``, their interval: interval i
    covers (t_{i-1}, t_i], the first also everything before it. Equally spaced times by
    arithmetic, others by an as-of join with ``_dpcr_times``. ``beyond``: ``rows`` may hold
    rows after the last time (every row when there is none), whose ``iv`` is NULL."""
    if beyond and not release_times:
        return f"SELECT *, NULL::BIGINT AS iv FROM ({rows})"
    step = uniform_step(release_times)
    if step is not None:
        t1 = int(release_times[0])
        iv = f"(greatest(ts, {t1}) - {t1} + {step - 1}) // {step} + 1"
        if beyond:
            iv = f"CASE WHEN ts <= {int(release_times[-1])} THEN {iv} END"
        return f"SELECT *, {iv} AS iv FROM ({rows})"
    join = "ASOF LEFT JOIN" if beyond else "ASOF JOIN"
    return f"SELECT c.*, t.i AS iv FROM ({rows}) c {join} _dpcr_times t ON c.ts <= t.hi"


def uniform_step(release_times: Sequence[int]) -> int | None:
    """The common difference of ``release_times`` when they are equally spaced (at least two
    of them), else None."""
    if len(release_times) < 2:
        return None
    step = int(release_times[1]) - int(release_times[0])
    if step <= 0:
        return None
    diffs = np.diff(np.asarray(release_times, dtype=np.int64))
    return step if bool(np.all(diffs == step)) else None
