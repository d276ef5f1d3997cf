"""The subscription workload generator: deterministic, valid, and shaped like its story."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import duckdb
import pytest

from dpcr.changelog import JsonlSource, load

ROOT = Path(__file__).resolve().parents[2] / "examples" / "subscriptions"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("subscriptions_generate", ROOT / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_deterministic_valid_and_bounded_by_the_bundled_machine(
    gen: ModuleType, tmp_path: Path
) -> None:
    from dpcr.config import load_config

    a, b = tmp_path / "a", tmp_path / "b"
    truth = gen.generate(a, seed=5, scale=0.05)
    gen.generate(b, seed=5, scale=0.05)
    for name in gen.OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert truth == json.loads((a / "truth.json").read_text())
    assert truth["subscriptions"] == 1000
    # about 11 mutations per subscription at any scale
    assert 9 * 1000 < truth["mutations"] < 14 * 1000
    con = duckdb.connect()
    report = load(JsonlSource(path=str(a / "changelog.jsonl")), con, table="changelog")
    assert report.valid == truth["mutations"] and not report.quarantined
    settings = load_config(ROOT / "dpcr.toml")
    assert settings.constraint.k == 30  # the derived k the workload is built around
