"""The HTML report: self-contained, public content only, numbers equal to the store's."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.release import stored_result
from e2e.helpers import mutations, write_config, write_jsonl


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    return write_config(tmp_path, on_error="quarantine")


def embedded(html: str) -> dict:  # type: ignore[type-arg]
    found = re.search(r'<script type="application/json" id="dpcr-data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(unescape(found.group(1)))  # type: ignore[no-any-return]


def test_run_writes_a_self_contained_public_report(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(cfg), "--until", "2025-01-10", "--quiet"]) == 0
    capsys.readouterr()
    html = (cfg.parent / "out" / "report.html").read_text()
    assert "<svg" in html and "Guarantee over the whole release" in html
    # self-contained: nothing is fetched (no src/href to anything but in-page anchors)
    assert not re.search(r'(src|href)="(?!#)', html)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    # public only: no operator diagnostics
    for secret in ("quarantined", "valid", "mutations kept", "operator"):
        assert secret not in html
    data = embedded(html)
    stored = stored_result(load_config(cfg))
    assert data["rows"] == stored.records()  # the store's numbers, exactly
    sections = re.findall(r'data-statistic="([^"]+)"', html)
    assert set(sections) == {"active", "zones[A]", "zones[B]", "zones[C]", "fares"}


def test_report_command_reads_only_the_store(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(cfg)]) == 2  # nothing released yet
    assert "run `dpcr run` first" in capsys.readouterr().err
    assert main(["run", str(cfg), "--until", "2025-01-10", "--quiet", "--no-report",
                 "--simulate", "3"]) == 0
    assert not (cfg.parent / "out" / "simulation" / "report.html").exists()
    out = cfg.parent / "r.html"
    assert main(["report", str(cfg), "--simulation", "-o", str(out)]) == 0
    assert "SIMULATION" in out.read_text()


@pytest.mark.slow
def test_report_renders_in_headless_chromium(
    cfg: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The report opens offline in a real browser: every section is in the rendered DOM, no
    page error is logged, and a screenshot is taken (kept as tmp_path/report.png)."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it from Debian)")
    assert main(["run", str(cfg), "--until", "2025-01-10", "--quiet"]) == 0
    capsys.readouterr()
    page = (cfg.parent / "out" / "report.html").resolve()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True)
    assert dom.stdout.count('class="statistic"') == 5 and dom.stdout.count("<svg") == 5
    assert "Uncaught" not in dom.stderr and "CONSOLE" not in dom.stderr
    shot = tmp_path / "report.png"
    subprocess.run([*flags, "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
