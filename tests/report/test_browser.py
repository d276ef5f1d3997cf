"""The demo's report in a real browser (headless Chromium): every section and chart renders, the
embedded data parses in the page, no request leaves the page and the console stays clean.

Requests are observed through a recording HTTP proxy that Chromium must use for everything,
loopback included; a canary page (an external image and a console error) proves that both
detectors see what they should. Chromium's own service traffic (update checks, sign-in) goes to
Google hosts and is not the page's; it is told apart by host. The screenshot is kept as a test
artefact in ``$DPCR_ARTIFACTS`` (default ``out/test-artifacts/``).
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.report.html import SECTIONS

from .helpers import ROOT, demo, embedded

pytestmark = pytest.mark.slow

#: Chromium's own background services, which no page of ours names.
BROWSER_HOSTS = re.compile(r"(^|\.)(google\.com|googleapis\.com|gstatic\.com|gvt1\.com)(:\d+)?$")
STATISTICS = 5  # active_tickets, tickets_by_zone[A|B|C], active_fares


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def _record(self) -> None:
        self.seen.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_CONNECT = _record

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _host(request: str) -> str:
    target = request.split("://", 1)[-1]
    return target.split("/", 1)[0]


def _chromium(tmp: Path, proxy_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it from Debian)")
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--no-first-run", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", f"--proxy-server={proxy_url}",
             "--proxy-bypass-list=<-loopback>", "--enable-logging=stderr", "--v=0"]
    return subprocess.run([*flags, *args], capture_output=True, text=True, timeout=180,
                          check=True)


#: Appended to a copy of a report: writes where the first statistic's chart lies in the first
#: screen (top and bottom in CSS pixels) into the DOM that --dump-dom prints.
_FIRST_CHART = (
    "<script>(function(){var r=document.querySelector('section.statistic svg')"
    ".getBoundingClientRect();document.body.setAttribute('data-first-chart',"
    "r.top+' '+r.bottom);})();</script>"
)


def _page_requests(seen: list[str]) -> list[str]:
    return [r for r in seen if not BROWSER_HOSTS.search(_host(r))]


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_the_detectors_see_requests_and_console_errors(
    tmp_path: Path, proxy: tuple[str, list[str]]
) -> None:
    url, seen = proxy
    canary = tmp_path / "canary.html"
    canary.write_text('<!DOCTYPE html><img src="http://dpcr-canary.invalid/x.png">'
                      '<script>console.error("dpcr-canary")</script>', encoding="utf-8")
    run = _chromium(tmp_path, url, "--dump-dom", canary.as_uri())
    assert any("dpcr-canary.invalid" in r for r in _page_requests(seen))
    assert any("dpcr-canary" in line for line in _console(run.stderr))


@pytest.mark.parametrize("simulation", [False, True], ids=["release", "simulation"])
def test_demo_report_renders_offline_in_headless_chromium(
    tmp_path: Path, proxy: tuple[str, list[str]], capsys: pytest.CaptureFixture[str],
    simulation: bool,
) -> None:
    cfg = demo(tmp_path)
    args = ["--simulate", "7"] if simulation else []
    assert main(["run", str(cfg), "--until", "2026-01-01", "--quiet", *args]) == 0
    capsys.readouterr()
    out = tmp_path / "out" / ("simulation" if simulation else "public")
    page = (out / "report.html").resolve()
    data = embedded(page.read_text(encoding="utf-8"))
    assert data["summary"]["released_intervals"] == 52

    url, seen = proxy
    dom = _chromium(tmp_path, url, "--dump-dom", page.as_uri())
    html = dom.stdout
    for name in SECTIONS:
        assert f'<section id="{name}">' in html, name
    assert html.count('class="statistic"') == STATISTICS
    # every statistic's running value and change, and the budget
    assert html.count("<svg") == 2 * STATISTICS + 1
    # per chart of a statistic the published (and the true) series; the budget: worst and
    # each class
    assert html.count('class="series"') == 2 * STATISTICS * (2 if simulation else 1) + 3
    assert html.count('class="band"') == 2 * STATISTICS
    # the page's script parsed the embedded data: the browser read every row
    assert f'data-rows="{len(data["rows"])}"' in html
    assert ("SIMULATION" in html) == simulation
    assert _console(dom.stderr) == []
    assert _page_requests(seen) == []

    # the first screen (1400 x 900) shows a chart of a statistic
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _FIRST_CHART + "</body>"),
                     encoding="utf-8")  # fmt: skip
    dom = _chromium(tmp_path, url, "--window-size=1400,900", "--dump-dom", probe.as_uri())
    top = re.search(r'data-first-chart="([-0-9.]+) ([-0-9.]+)"', dom.stdout)
    assert top is not None, "the probe did not run"
    assert float(top[1]) >= 0 and float(top[2]) <= 900, top.group(0)

    artefacts = Path(os.environ.get("DPCR_ARTIFACTS", ROOT / "out" / "test-artifacts"))
    artefacts.mkdir(parents=True, exist_ok=True)
    shot = artefacts / f"report-{'simulation' if simulation else 'release'}.png"
    shot.unlink(missing_ok=True)
    run = _chromium(tmp_path, url, "--window-size=1100,2400", f"--screenshot={shot}",
                    page.as_uri())
    assert shot.stat().st_size > 20_000
    assert _console(run.stderr) == []
    assert _page_requests(seen) == []
    # the operator report (owner-only, never published) rendered too, for the artefacts
    private = tmp_path / "out" / "operator" / (
        "simulation-report.html" if simulation else "report.html")
    shot = artefacts / f"operator-report-{'simulation' if simulation else 'release'}.png"
    shot.unlink(missing_ok=True)
    run = _chromium(tmp_path, url, "--window-size=1400,900", f"--screenshot={shot}",
                    private.resolve().as_uri())
    assert shot.stat().st_size > 10_000
    assert _console(run.stderr) == []
    assert _page_requests(seen) == []
