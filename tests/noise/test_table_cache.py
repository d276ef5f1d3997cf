"""Inversion tables kept in a folder: the same floors and draws as computed ones, and anything
that is not exactly the table's file is a cold cache."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpcr.noise import _fast as fast
from dpcr.noise import discrete_gaussian, discrete_laplace, simulation_randomness, table_cache
from dpcr.noise._tables import InversionTable

#: Laplace scales of the three table shapes (|X| table; geometric high part and digits) and a
#: Gaussian variance.
LAPLACE = (Fraction(600), Fraction(7, 3), Fraction(60000))
GAUSS = Fraction(360000)


@pytest.fixture(autouse=True)
def _cold() -> None:
    """Every test starts without the process's tables (they are kept per parameter)."""
    fast._laplace_plan.cache_clear()
    fast._gaussian_table.cache_clear()


def _draws(seed: int) -> list[np.ndarray]:
    rng = simulation_randomness(seed)
    out = [discrete_laplace(s, size=20000, rng=rng) for s in LAPLACE]
    return [*out, discrete_gaussian(GAUSS, size=20000, rng=rng)]


def _computes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the tables whose floors are computed from their bounds."""
    calls: list[int] = []
    floors: Callable[..., list[int]] = InversionTable._floors

    def counted(self: InversionTable, p: int, indices: range | list[int]) -> list[int]:
        if p == 64 and isinstance(indices, range):
            calls.append(self.m)
        return floors(self, p, indices)

    monkeypatch.setattr(InversionTable, "_floors", counted)
    return calls


def test_tables_read_from_the_folder_are_the_computed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    computed = _computes(monkeypatch)
    plain = _draws(3)
    cold = len(computed)
    assert cold >= 5  # (|X|, geometric top and digits, Gaussian)
    fast._laplace_plan.cache_clear()
    fast._gaussian_table.cache_clear()
    with table_cache(tmp_path / "noise"):
        first = _draws(3)
        assert len(computed) == 2 * cold  # a cold folder: every table computed, then written
        files = sorted((tmp_path / "noise").iterdir())
        assert len(files) == cold
        assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
        assert (tmp_path / "noise").stat().st_mode & 0o777 == 0o700
        fast._laplace_plan.cache_clear()
        fast._gaussian_table.cache_clear()
        again = _draws(3)
    assert len(computed) == 2 * cold  # every table read, none computed
    for a, b, c in zip(plain, first, again, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def _one_table(folder: Path) -> tuple[Path, np.ndarray]:
    return _one_table_of(folder, Fraction(600))


def _rebuilt(folder: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, int]:
    fast._laplace_plan.cache_clear()
    computed = _computes(monkeypatch)
    with table_cache(folder):
        floors = fast._laplace_plan(Fraction(600)).table.floors
    return floors, len(computed)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # a floor changed
        lambda b: b[:-8],  # a floor missing
        lambda b: b + b"\0" * 8,  # one too many
        lambda b: b"",
    ],
)
def test_a_file_that_is_not_exactly_the_table_is_a_cold_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[bytes], bytes]
) -> None:
    path, truth = _one_table(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    floors, computed = _rebuilt(tmp_path, monkeypatch)
    assert computed == 1
    np.testing.assert_array_equal(floors, truth)
    floors, computed = _rebuilt(tmp_path, monkeypatch)  # (the file was replaced)
    assert computed == 0
    np.testing.assert_array_equal(floors, truth)


def test_a_signed_file_of_unsorted_floors_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    path, truth = _one_table(tmp_path)
    data = path.read_bytes()
    body_at = len(data) - 8 * truth.size
    header = data[: body_at - 32]
    body = bytearray(data[body_at:])
    body[:8], body[8:16] = body[8:16], body[:8]  # two floors swapped, the digest made anew
    path.write_bytes(header + hashlib.sha256(header + bytes(body)).digest() + bytes(body))
    floors, computed = _rebuilt(tmp_path, monkeypatch)
    assert computed == 1
    np.testing.assert_array_equal(floors, truth)


def test_another_tables_file_under_the_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, truth = _one_table(tmp_path / "a")
    other, _ = _one_table_of(tmp_path / "b", Fraction(601))
    path.write_bytes(other.read_bytes())  # a whole, signed file of another scale
    floors, computed = _rebuilt(tmp_path / "a", monkeypatch)
    assert computed == 1
    np.testing.assert_array_equal(floors, truth)


def _one_table_of(folder: Path, scale: Fraction) -> tuple[Path, np.ndarray]:
    fast._laplace_plan.cache_clear()
    with table_cache(folder):
        table = fast._laplace_plan(scale).table
    (path,) = folder.iterdir()
    return path, table.floors.copy()


def test_no_folder_writes_nothing_and_a_link_is_not_followed(tmp_path: Path) -> None:
    fast._laplace_plan(Fraction(600))
    assert not any(tmp_path.iterdir())
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "noise").symlink_to(target)
    fast._laplace_plan.cache_clear()
    with table_cache(tmp_path / "noise"):
        fast._laplace_plan(Fraction(600))
    assert not any(target.iterdir())
