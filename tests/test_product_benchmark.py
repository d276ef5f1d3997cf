"""The peers of benchmarks/product.py compute dpcr's statistics: with their noise switched off,
each gives dpcr's exact daily values (the same check the benchmark asserts before it times
anything), here on a small changelog with mutations exactly at day boundaries."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _product():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("product", ROOT / "benchmarks" / "product.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["product"] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


def test_peers_give_dpcrs_exact_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    product = _product()
    generate = product.generate

    def on_the_edges(n: int, seed: int) -> dict[str, np.ndarray]:
        d = generate(n, seed)
        ts = d["ts"]  # time order: a row moved to the boundary just before it stays in order
        days = (ts - product.START_US) // product.DAY_US
        first = np.flatnonzero(np.diff(days) > 0)[::2] + 1  # every other day's first row
        ts[first] = product.START_US + days[first] * product.DAY_US
        return d

    monkeypatch.setattr(product, "generate", on_the_edges)
    paths = product.write_files(3000, 1, tmp_path)
    peers = [t for t in product.PEERS if t != "opendp" or importlib.util.find_spec("opendp")]
    exact = product.check_peers(peers, paths, tmp_path, timeout=300)
    assert any(exact["count"]) and any(exact["value"])
    # dpcr's count is the change in live rows: deletes make some days negative or smaller than
    # the number of kept mutations
    assert sum(exact["count"]) < 3000


def test_the_seq_variants_release_the_same_values(tmp_path: Path) -> None:
    """The changelog with a ``seq`` column (dpcr-parquet-seq, dpcr-jsonl-seq) holds the same
    mutations in the same order: dpcr's exact values are those of the file without it."""
    product = _product()
    paths = product.seq_files(product.write_files(3000, 1, tmp_path))
    exact = {t: product.dpcr_exact(product.config_path(t, paths, tmp_path, 0))
             for t in ("dpcr-parquet", "dpcr-parquet-seq", "dpcr-jsonl-seq")}  # fmt: skip
    assert exact["dpcr-parquet-seq"] == exact["dpcr-parquet"] == exact["dpcr-jsonl-seq"]
    assert any(exact["dpcr-parquet"]["count"])
