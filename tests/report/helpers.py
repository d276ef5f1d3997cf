"""Reading reports back: the embedded data, the visible tables, the demo at a small scale."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import unescape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "transit"


def embedded(html: str) -> dict[str, Any]:
    """The report's ``<script id="dpcr-data">`` JSON, parsed as a browser would (no unescaping:
    the text of a script element is taken verbatim)."""
    found = re.search(r'<script type="application/json" id="dpcr-data">(.*?)</script>', html, re.S)
    if found is None:
        raise AssertionError("no embedded data in the report")
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def section(html: str, name: str) -> str:
    """The HTML of ``<section id=name>`` (sections of the report do not nest in each other,
    except the statistics' own)."""
    found = re.search(rf'<section id="{name}">(.*?)</section>(?=<section id=|<p class="note" '
                      r'id="dpcr-check")', html, re.S)
    if found is None:
        raise AssertionError(f"no section {name!r}")
    return found.group(1)


def table_rows(fragment: str) -> list[list[str]]:
    """The body cells of every table in ``fragment``, as text."""
    return [
        [unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for body in re.findall(r"<tbody>(.*?)</tbody>", fragment, re.S)
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


def demo(work: Path) -> Path:
    """The bundled demo's data at scale 0.02 (about 20,000 mutations over 2025) and its config
    writing to ``work/out``."""
    subprocess.run(
        [sys.executable, str(DEMO / "generate.py"), "--out", str(work / "data"),
         "--scale", "0.02", "--quiet", "--serial"],
        check=True,
    )
    config = (DEMO / "dpcr.toml").read_text(encoding="utf-8")
    path = work / "dpcr.toml"
    path.write_text(config.replace('dir = "../../out"', 'dir = "out"'), encoding="utf-8")
    return path
