"""The layering of the package (pyproject.toml, [tool.importlinter]) is checked on every run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    proc = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "src" / "dpcr").rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}
