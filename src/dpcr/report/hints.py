"""Hints ``dpcr plan`` prints about a plan's predicted noise, from the plan alone.

A statistic is only worth publishing when its values are well above its noise, and the plan
predicts the noise (``PlanReport.predicted``) before any data is read. The values themselves
are private, but the scale of one row's contribution is public: 1 for a count, a histogram's
key or the exhausted count, and the clamp's largest magnitude ``max(|lower|, |upper|)`` for a
sum. When the half-width of a statistic's 95 % interval for its running value (the worst over
the horizon; about 1.96 standard deviations where the plan does not compute the interval) is
what :data:`NOISE_HINT_ROWS` or more rows would contribute, the plan prints one hint line for it:
unless the statistic is well above that many rows, what is published is noise (ε = 0.01 on a
table of 16,000 rows, say). The rule reads nothing but the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, PlanReport

__all__ = ["NOISE_HINT_ROWS", "noise_hint_lines"]

#: A statistic whose running value's 95 % half-width is what this many rows contribute (or
#: more) gets a hint.
NOISE_HINT_ROWS = 10_000


def noise_hint_lines(settings: ContinualRelease, report: PlanReport) -> list[str]:
    """One ``hint:`` line per statistic whose predicted noise is :data:`NOISE_HINT_ROWS` rows'
    contribution or more (module docstring)."""
    from dpcr.queries import Sum

    lines = []
    for q in settings.queries:
        err = report.predicted.get(q.name)
        if err is None:
            continue
        width = err.running_half_width
        if width is None:
            width = 1.96 * err.running_std
        scale = (
            float(max(map(abs, q.steps_range)) * q.unit_scale) if isinstance(q, Sum) else 1.0
        )
        if scale <= 0 or width < NOISE_HINT_ROWS * scale:
            continue
        at = f" at {scale:g}, the clamp's largest value" if isinstance(q, Sum) else ""
        lines.append(
            f"hint: {q.name}: the 95 % interval of its running value is ±{width:,.0f} from the "
            f"noise alone (the contribution of {width / scale:,.0f} rows{at}): unless it is "
            f"well above that, what is published is noise (ε = {settings.budget.epsilon:g}). Raise "
            "privacy.epsilon, lengthen release.period, choose a plan for running values "
            "(docs/choosing-a-plan.md) or release fewer statistics"
        )
    return lines
