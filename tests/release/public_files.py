"""Public files with their released values masked, for comparing two releases byte by byte.

Every public file is a function of the public clock, the plan and the released values
(docs/ARCHITECTURE: "Public is a function of the clock, the plan and the released values"). Two
releases with the same plan and clock may therefore differ only where a released value (or
something computed from it) is written; :func:`normalise` replaces exactly those places:

* ``releases.csv`` / ``.json``: the value columns (``change``, ``estimate``, their 95 %
  bounds);
* ``alerts.csv`` / ``.json``: every row (which answers exist depends on the answers: a rule
  halts after its cutoff); the CSV header stays;
* ``summary.json`` and ``release-head.json``: ``store_head`` (a hash of the released values)
  and, per alert rule, every field but its parameters;
* ``report.html``: the same fields inside ``<script id="dpcr-data">``, and the numbers of the
  charts, value tables and latest-value lines of the statistics and alerts sections (drawn from
  the values), and the table of alerts.

Paths under the release's own folder are written as ``<ROOT>`` (the folder is the operator's
choice, not the data's). Everything else, the standard deviations and the plan included, must be
equal byte for byte.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["MASK", "VALUE_FIELDS", "normalise", "snapshot"]

MASK = "<value>"
#: Fields that hold a released value or a function of released values.
VALUE_FIELDS = frozenset({
    "change", "estimate", "change_lo", "change_hi", "estimate_lo", "estimate_hi", "value",
    "above", "store_head",
})  # fmt: skip
_NUMBER = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
_DATA = re.compile(r'(<script type="application/json" id="dpcr-data">)(.*?)(</script>)', re.S)
_VALUE_SECTION = re.compile(
    r'(<section class="statistic"[^>]*>|<section id="alerts">)(.*?)(?=<section |</body>)', re.S
)
_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_ALERT_TABLE = re.compile(r'<table class="alerts">.*?</table>', re.S)
_ANSWERS = re.compile(r"<p>[^<]*answers above threshold[^<]*</p>")
_CELL = re.compile(r"<td>([^<]*)</td>")
_LATEST = re.compile(r'<p class="latest">.*?</p>', re.S)


def _mask(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _alerts(v)
            if k == "alerts"
            else MASK
            if k in VALUE_FIELDS and v is not None
            else _mask(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_mask(x) for x in node]
    return node


def _alerts(node: Any) -> Any:
    """Alert answers are released values, and so are their number and when a rule halts: the
    rows are masked whole; per rule, only the rule's parameters stay."""
    if isinstance(node, list):
        return MASK if node else []
    if isinstance(node, dict):
        return {
            rule: {k: v if k in ("cutoff", "epsilon", "delta") else MASK for k, v in fields.items()}
            if isinstance(fields, dict)
            else MASK
            for rule, fields in node.items()
        }
    return node


def _json(text: str) -> str:
    return json.dumps(_mask(json.loads(text)), indent=1, sort_keys=True)


def _csv(text: str) -> str:
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        return text
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_mask(rows))
    return out.getvalue()


def _numbers(text: str) -> str:
    return _NUMBER.sub("#", text)


def _section(m: re.Match[str]) -> str:
    # the table of ⊤ answers is there only when there is one: its presence is an answer too
    body = _ALERT_TABLE.sub("", m.group(2))
    body = _ANSWERS.sub(lambda p: _numbers(p.group(0)), body)
    body = _SVG.sub(lambda s: _numbers(s.group(0)), body)
    body = _LATEST.sub(lambda s: _numbers(s.group(0)), body)  # a statistic's latest value
    body = _CELL.sub(lambda c: f"<td>{_numbers(c.group(1))}</td>", body)
    return m.group(1) + body


def _html(text: str) -> str:
    text = _DATA.sub(lambda m: m.group(1) + _json(m.group(2)) + m.group(3), text)
    return _VALUE_SECTION.sub(_section, text)


def normalise(name: str, data: bytes, root: Path) -> bytes:
    """``data`` (the file ``name``) with its released values masked and ``root`` as <ROOT>."""
    text = data.decode("utf-8")
    text = text.replace(str(root.resolve()), "<ROOT>").replace(str(root), "<ROOT>")
    if name.startswith("alerts."):
        text = text.splitlines()[0] if name.endswith(".csv") else MASK
    elif name.endswith(".json"):
        text = _json(text)
    elif name.endswith(".csv"):
        text = _csv(text)
    elif name.endswith(".html"):
        text = _html(text)
    return text.encode("utf-8")


def snapshot(folder: Path, root: Path, *, skip: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> normalised bytes), except the top-level
    names in ``skip``."""
    out: dict[str, bytes] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if rel.parts[0] in skip or path.is_dir():
            continue
        out[rel.as_posix()] = normalise(path.name, path.read_bytes(), root)
    return out
