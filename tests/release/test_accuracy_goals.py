"""The accuracy goals of issue 15, on the errors `dpcr plan` predicts (benchmarks/accuracy.py
prints the full table; docs/benchmarks.md records it). Exact variances: no tolerance is needed
beyond the stated bounds, and each bound is tight enough that a regression fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.plans.factorization import lower_bound

ROOT = Path(__file__).resolve().parents[2]
T = 1 << 16


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "benchmarks" / "accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("kind", "goal"), [("rescaled", 1.05), ("blt", 1.10)])
def test_gaussian_running_counts_near_the_lower_bound(kind: str, goal: float) -> None:
    std = _bench().sigma1_units(T, kind, dpcr.AtMostK(k=1))
    assert std <= goal * lower_bound(T)
    assert std >= lower_bound(T)  # a bound no mechanism beats: the computation is sane


def test_rescaled_is_refused_for_at_most_k_anywhere() -> None:
    assert _bench().sigma1_units(64, "rescaled", dpcr.AtMostK(k=4)) is None


def test_pure_dp_sixteen_ary_tree_within_43_and_the_2_5x_claim() -> None:
    bench = _bench()
    con = dpcr.AtMostK(k=1)

    def std(c: str) -> float:
        s = bench.settings(T=T, mechanism="laplace", constraint=con, plan=bench.grid(T, c))
        return float(s.explain().predicted["n"].running_std)

    wide, binary = std("16"), std("2")
    assert wide <= 43.0
    assert 2.4 <= (binary / wide) ** 2 <= 2.6
