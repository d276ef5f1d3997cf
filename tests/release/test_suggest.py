"""``dpcr suggest`` / ``release.suggest()``: dropped shares per candidate bound (exact against a
brute force over unit histories, DP with the accounted ε), their labelling, and the CLI."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.release._suggest import (
    OPERATOR_ONLY,
    _noisy,
    count_histogram,
    delay_histograms,
)

from .suggest_data import DAY, _histories, _write


def _brute_k(days: list[list[float]], k: int) -> tuple[float, float]:
    total = sum(len(d) for d in days)
    dropped = sum(max(0, len(d) - k) for d in days)
    return dropped / total, sum(len(d) > k for d in days) / len(days)


def _brute_b(days: list[list[float]], bound_days: float) -> tuple[float, float]:
    total = sum(len(d) for d in days)
    late = [sum(t - d[0] > bound_days for t in d) for d in days]
    return sum(late) / total, sum(n > 0 for n in late) / len(days)


# --- exact figures against a brute force ------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "monthly_class"),
    [(1, "monthly"), (2, "monthly"), (3, "*")],
)
def test_exact_shares_equal_a_brute_force_over_unit_histories(
    tmp_path: Path, seed: int, monthly_class: str
) -> None:
    """Per class of a hybrid constraint (the monthly units in a listed class, or in the
    default class ``*``), every candidate's shares equal a count over the unit histories."""
    histories = _histories(seed)
    monthly = (
        '[constraint.classes.monthly]\ntime_bounded = "7d"\n'
        if monthly_class == "monthly"
        else '[constraint.default]\ntime_bounded = "7d"\n'
    )
    config = _write(
        tmp_path,
        histories,
        f'column = "kind"\n[constraint.classes.multi]\nat_most_k = 4\n{monthly}',
    )
    result = load_config(config).suggest(exact=True, ks=[1, 2, 3, 5, 8], bounds=[0, DAY, 9 * DAY])
    by = {c.name: c for c in result.classes}
    assert set(by) == {"multi", monthly_class}
    multi = [d for kind, d in histories if kind == "multi"]
    monthly_days = [d for kind, d in histories if kind == "monthly"]
    assert by["multi"].units == len(multi) and by[monthly_class].units == len(monthly_days)
    for row in by["multi"].rows:
        assert (row.dropped_mutations, row.dropped_units) == pytest.approx(
            _brute_k(multi, row.bound), abs=1e-12
        )
        assert row.dropped_mutations_std == 0 and row.current == (row.bound == 4)
    assert [r.bound for r in by[monthly_class].rows] == [0, DAY, 7 * DAY, 9 * DAY]
    for row in by[monthly_class].rows:
        assert (row.dropped_mutations, row.dropped_units) == pytest.approx(
            _brute_b(monthly_days, row.bound / DAY), abs=1e-12
        )
    assert result.combined is None and result.epsilon == 0


def test_exact_figures_are_labelled_operator_only_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, _histories(), "at_most_k = 4\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["suggest", str(config), "--exact"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == OPERATOR_ONLY
    assert "Guarantee" not in out and "±" not in out.split("\n")[3]
    assert main(["suggest", str(config), "--exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exact"] is True and data["operator_only"] == OPERATOR_ONLY
    assert data["epsilon"] is None and data["combined"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output folder, no file


# --- the DP figures: accounting -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "parts"),
    [("at_most_k = 4\n", 1),
     ('time_bounded = "7d"\n', 2),
     ('column = "kind"\n[constraint.classes.multi]\nat_most_k = 4\n'
      '[constraint.classes.monthly]\ntime_bounded = "7d"\n', 2)],
)  # fmt: skip
def test_the_suggest_epsilon_is_stated_and_added_to_the_release_guarantee(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], constraint: str, parts: int
) -> None:
    config = _write(tmp_path, _histories(), constraint)
    result = load_config(config).suggest(epsilon=0.25, rng=simulation_randomness(5))
    # at-most-k: one histogram at ε; time-bounded: two at ε/2; hybrid classes: in parallel
    assert 0.25 * (1 - 1e-6) <= result.epsilon <= 0.25
    assert result.release.epsilon == pytest.approx(2.0)
    assert result.combined is not None
    assert result.combined.epsilon >= result.release.epsilon + result.epsilon
    assert result.combined.epsilon == pytest.approx(2.25)
    text = "\n".join(result.lines())
    assert "ε = 0.25" in text and "(2.25, 0)-DP" in text and "SIMULATION" in text
    assert main(["suggest", str(config), "--epsilon", "0.25", "--simulate", "5"]) == 0
    assert capsys.readouterr().out.strip() == text
    del parts


def test_a_real_suggestion_draws_from_the_secure_source(tmp_path: Path) -> None:
    config = _write(tmp_path, _histories(), "at_most_k = 4\n")
    result = load_config(config).suggest()
    assert result.simulation is False and "SIMULATION" not in "\n".join(result.lines())
    assert result.epsilon == pytest.approx(0.1)


def _all_histories(max_units: int, max_n: int) -> list[list[int]]:
    return [list(c) for r in range(1, max_units + 1)
            for c in itertools.combinations_with_replacement(range(1, max_n + 1), r)]  # fmt: skip


def test_one_unit_changes_the_count_histogram_by_at_most_1_in_l1() -> None:
    """Brute force over every multiset of up to 4 units of 1..6 mutations and every unit's
    removal, with clamps below, at and above the largest count."""
    worst = 0
    for n in _all_histories(4, 6):
        for cap in (1, 3, 6, 9):
            h = count_histogram(np.array(n), cap)
            for i in range(len(n)):
                rest = count_histogram(np.array(n[:i] + n[i + 1 :]), cap)
                worst = max(worst, int(np.abs(h - rest).sum()))
    assert worst == 1


def test_one_unit_changes_the_delay_histograms_by_at_most_1_and_cap() -> None:
    """Every unit history of up to 6 mutations over 3 delay bins (the first in bin 0), with
    up to 2 other units: the span histogram moves by 1, the mutations by at most ``cap`` (and
    exactly ``cap`` is reached)."""
    vectors = [np.array(v) for v in itertools.product(range(4), repeat=3)
               if v[0] >= 1 and sum(v) <= 6]  # fmt: skip
    worst_g, worst_m = 0, {2: 0, 4: 0}
    for others in itertools.combinations(vectors[::5], 2):
        for v in vectors:
            for cap in (2, 4):
                rows = [*others, v]
                per_bin = np.array(rows)
                g, m = delay_histograms(per_bin.sum(axis=1), per_bin, cap)
                g2, m2 = delay_histograms(per_bin[:-1].sum(axis=1), per_bin[:-1], cap)
                worst_g = max(worst_g, int(np.abs(g - g2).sum()))
                worst_m[cap] = max(worst_m[cap], int(np.abs(m - m2).sum()))
    assert worst_g == 1 and worst_m == {2: 2, 4: 4}


def _log_pmf(x: int, scale: Fraction) -> float:
    """log P[X = x] of the discrete Laplace of ``scale`` (exact normalisation)."""
    q = math.exp(-1 / float(scale))
    return -abs(x) / float(scale) + math.log((1 - q) / (1 + q))


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, Fraction(1, 10)), (4, Fraction(1, 20))])
def test_the_noisy_histogram_is_epsilon_dp_by_an_exact_computation(
    sensitivity: int, epsilon: Fraction
) -> None:
    """The privacy loss of the released histogram, over every output on a wide grid, for the
    worst neighbouring pair (the whole L1 change in one bin, or spread over two), is at most
    the event's ε, which is at most the ε asked for (and reaches it to within the scale's
    rounding)."""
    base = np.array([3, 5, 0])
    _, event = _noisy(base, sensitivity, epsilon, simulation_randomness(0))
    assert event.epsilon <= float(epsilon) and event.epsilon >= float(epsilon) * (1 - 1e-6)
    grid = range(-3 * sensitivity - 5, 3 * sensitivity + 10)
    worst = 0.0
    for shift in ([sensitivity, 0, 0], [sensitivity - 1, 1, 0], [0, 0, -sensitivity]):
        other = base + np.array(shift)
        for y in itertools.product(grid, repeat=2):
            loss = sum(_log_pmf(y[i] - int(base[i]), event.scale)
                       - _log_pmf(y[i] - int(other[i]), event.scale) for i in range(2))  # fmt: skip
            loss += _log_pmf(0, event.scale) - _log_pmf(int(base[2] - other[2]), event.scale)
            worst = max(worst, abs(loss))
    assert worst <= event.epsilon * (1 + 1e-9)
    assert worst == pytest.approx(event.epsilon, rel=1e-9)  # (attained: the bound is tight)


@pytest.mark.parametrize("constraint", ["at_most_k = 4\n", 'time_bounded = "7d"\n'])
def test_the_dp_shares_are_near_the_exact_ones(tmp_path: Path, constraint: str) -> None:
    """Fixed seeds: every DP share lies within 6 of its stated stds of the exact share (the
    clamp changes nothing here: every unit has at most 11 mutations, below the cap)."""
    config = _write(tmp_path, _histories(units=3000), constraint)
    release = load_config(config)
    exact = release.suggest(exact=True).classes[0].rows
    noisy = release.suggest(epsilon=1.0, cap=40, rng=simulation_randomness(11)).classes[0].rows
    again = release.suggest(epsilon=1.0, cap=40, rng=simulation_randomness(11)).classes[0].rows
    other = release.suggest(epsilon=1.0, cap=40, rng=simulation_randomness(12)).classes[0].rows
    assert noisy == again and noisy != other  # (all noise comes from the seam's generator)
    for e, d in zip(exact, noisy, strict=True):
        assert abs(e.dropped_mutations - d.dropped_mutations) <= 6 * d.dropped_mutations_std
        assert abs(e.dropped_units - d.dropped_units) <= 6 * d.dropped_units_std
        assert d.dropped_mutations_std > 0 and d.predicted == e.predicted


def test_predicted_errors_are_the_plans_own_under_each_candidate(tmp_path: Path) -> None:
    import dataclasses

    import dpcr

    config = _write(tmp_path, _histories(), "at_most_k = 4\n")
    release = load_config(config)
    rows = release.suggest(exact=True, ks=[1, 4, 9]).classes[0].rows
    for row in rows:
        other = dataclasses.replace(release, constraint=dpcr.AtMostK(k=row.bound))
        plan = other.explain().predicted
        for name, err in row.predicted.items():
            assert (err.release_std, err.running_std, err.final_std) == (
                plan[name].release_std,
                plan[name].running_std,
                plan[name].final_std,
            )
    assert rows[0].predicted["n"].running_std < rows[2].predicted["n"].running_std


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--epsilon", "0"], ["epsilon"]),
     (["--epsilon", "nan"], ["epsilon"]),
     (["--k", "1,x"], ["--k"]),
     (["--k", "0"], ["candidates k"]),
     (["--bound", "7q"], ["--bound"]),
     (["--exact", "--simulate", "1"], ["--simulate"]),
     (["--cap", "0"], ["cap"]),
     (["--k", "40", "--cap", "10"], ["cap", "40"])],
)  # fmt: skip
def test_suggest_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: list[str]
) -> None:
    config = _write(tmp_path, _histories(), "at_most_k = 4\n")
    assert main(["suggest", str(config), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err


def test_suggest_on_a_missing_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["suggest", str(tmp_path / "none.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
