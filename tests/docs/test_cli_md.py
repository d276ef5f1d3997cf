"""docs/cli.md is generated from the parser: it fails here when they drift apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cli_reference_matches_the_parser() -> None:
    spec = importlib.util.spec_from_file_location("gen_cli_md", ROOT / "scripts" / "gen_cli_md.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == module.render(), "docs/cli.md is out of date: python scripts/gen_cli_md.py"
