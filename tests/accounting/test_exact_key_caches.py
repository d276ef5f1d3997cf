"""The guarantees and costs accounting remembers (a continual release's filter meets the same
few compositions at every step) are keyed by :func:`dpcr.accounting.events.exact_key`: equal
events whose fields differ in type (``1``, ``1.0``, ``True``, ``Fraction(1)``; ``0.0`` and
``-0.0``) never share an entry, so a remembered answer is the one computing gives, and an event
that computing refuses is still refused."""

from __future__ import annotations

from fractions import Fraction

import pytest

import dpcr.accounting.accountants as accountants
import dpcr.accounting.guarantee as guarantee
from dpcr._lastused import LastUsed
from dpcr.accounting import events as ev
from dpcr.accounting.events import DpEvent, exact_key
from dpcr.accounting.guarantee import Participation, PrivacyFilter
from dpcr.errors import BudgetExhaustedError, ConfigError

LAP = ev.DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))
SUM = ev.DiscreteLaplaceEvent(scale=Fraction(1000), sensitivity=Fraction(100))
DG = ev.DiscreteGaussianEvent(sigma2=Fraction(50), sensitivity2=Fraction(1))

EVENTS: list[DpEvent] = [
    LAP,
    ev.ComposedEvent(events=(LAP, SUM)),
    ev.SelfComposedEvent(event=ev.ComposedEvent(events=(LAP, SUM)), count=3),
    ev.ComposedEvent(
        events=(ev.SelfComposedEvent(event=LAP, count=2), ev.PureDpEvent(epsilon=0.25))
    ),
    DG,
    ev.SelfComposedEvent(event=DG, count=7),
    ev.ComposedEvent(events=(DG, LAP, ev.ZcdpEvent(rho=0.01))),
    ev.LaplaceEvent(scale=4.0),
    ev.GaussianEvent(sigma=3.0),
    ev.RandomizedResponseEvent(epsilon=1.0, buckets=3),
    ev.ComposedEvent(events=()),
]


def test_equal_events_of_other_field_types_have_other_keys() -> None:
    spelt = [ev.PureDpEvent(epsilon=1), ev.PureDpEvent(epsilon=1.0), ev.PureDpEvent(epsilon=True),
             ev.PureDpEvent(epsilon=Fraction(1))]  # fmt: skip
    assert len({exact_key(e) for e in spelt}) == 4
    assert exact_key(ev.PureDpEvent(epsilon=0.0)) != exact_key(ev.PureDpEvent(epsilon=-0.0))
    assert exact_key(ev.SelfComposedEvent(event=LAP, count=2)) != exact_key(
        ev.SelfComposedEvent(event=LAP, count=3)
    )
    # the same types and values: one key, however the objects were made
    made_again = (
        ev.DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1)),
        ev.DiscreteLaplaceEvent(scale=Fraction(1000), sensitivity=Fraction(100)),
    )
    assert exact_key(ev.ComposedEvent(events=(LAP, SUM))) == exact_key(
        ev.ComposedEvent(events=made_again)
    )
    assert exact_key(ev.ComposedEvent(events=(LAP, SUM))) != exact_key(
        ev.ComposedEvent(events=(SUM, LAP))
    )


def test_an_event_of_another_class_is_not_keyed() -> None:
    class Other(ev.PureDpEvent):
        pass

    assert exact_key(Other(epsilon=1.0)) is None
    assert exact_key(ev.ComposedEvent(events=(LAP, Other(epsilon=1.0)))) is None
    assert exact_key(ev.ApproxDpEvent(epsilon=1.0, delta=1e-9)) is not None


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_a_remembered_guarantee_is_the_computed_one(
    delta: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
    for event in EVENTS:
        try:
            computed = accountants._stated(event, delta=delta)
        except Exception as exc:  # (zCDP at δ = 0): refused every time, nothing kept
            for _ in range(2):
                with pytest.raises(type(exc)):
                    accountants.stated_guarantee(event, delta=delta)
            continue
        first = accountants.stated_guarantee(event, delta=delta)
        again = accountants.stated_guarantee(event, delta=delta)
        assert first == again == computed
    assert accountants._STATED  # (the test means something: answers were kept)
    # the same guarantees, computed again without the entries
    for key, kept in list(accountants._STATED.entries.items()):
        monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
        event = next(e for e in EVENTS if exact_key(e) == key[0])
        assert accountants.stated_guarantee(event, delta=delta) == kept


def test_the_kept_guarantees_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accountants, "_STATED", LastUsed(3))
    for count in range(1, 11):
        accountants.stated_guarantee(ev.SelfComposedEvent(event=LAP, count=count), delta=0.0)
        assert len(accountants._STATED) <= 3


def test_a_refused_event_is_refused_after_an_equal_one_was_costed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guarantee, "_COSTS", LastUsed(1024))
    monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
    good, bad = ev.PureDpEvent(epsilon=1), ev.PureDpEvent(epsilon=True)
    assert good == bad  # (equal dataclasses: a cache keyed by == would take one for the other)
    guard = PrivacyFilter(epsilon_budget=10.0, delta_budget=0.0)
    counts = {"all": Participation(counts=(2,))}
    assert guard.check([[good, good]], counts).epsilon == 2.0
    for _ in range(2):
        with pytest.raises(ConfigError, match="epsilon must be a number"):
            guarantee._cost(bad)
        with pytest.raises(ConfigError, match="epsilon must be a number"):
            guard.check([[bad, bad]], counts)


def test_a_filter_checks_the_same_after_its_answers_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A growing layer (a session's steps) gives, step by step, what a filter with nothing
    kept gives; the step over budget is refused every time."""
    monkeypatch.setattr(guarantee, "_COSTS", LastUsed(1024))
    monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
    event = ev.ComposedEvent(events=(LAP, SUM))
    guard = PrivacyFilter(epsilon_budget=0.85, delta_budget=0.0)
    for k, ok in ((1, True), (3, True), (5, False)):
        counts = {"all": Participation(counts=(k,))}
        for n in range(1, 12):
            layer = [event] * n
            if ok or n < k:
                got = guard.check([layer], counts)
                monkeypatch.setattr(guarantee, "_COSTS", LastUsed(1024))
                monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
                assert guard.check([layer], counts) == got
                assert got.epsilon == pytest.approx(0.2 * min(n, k))
            else:
                for _ in range(2):
                    with pytest.raises(BudgetExhaustedError, match="over the budget"):
                        guard.check([layer], counts)
