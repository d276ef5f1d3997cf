"""docs/choosing-a-plan.md shows what `dpcr plan` prints for each configuration it shows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_plan_tables_match_dpcr_plan() -> None:
    path = ROOT / "scripts" / "gen_plan_tables.py"
    spec = importlib.util.spec_from_file_location("gen_plan_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = (ROOT / "docs" / "choosing-a-plan.md").read_text(encoding="utf-8")
    assert doc.count("<!-- plan: ") == len(module.SCENARIOS)
    assert doc == module.render(doc), (
        "docs/choosing-a-plan.md is out of date: python scripts/gen_plan_tables.py")
