"""kill -9 at random moments of real runs (every plan kind, appends and --until steps): nothing
released is ever lost, changed or duplicated, and the next run completes the release."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpcr.config import load_config
from dpcr.store import Store
from e2e.helpers import mutations, write_config, write_jsonl

RELEASES = {
    "disjoint": 'plan = "disjoint"\n',
    "tree": 'plan = "tree"\nend = "2025-01-17T00:00:00Z"\n',
    "window": 'plan = "window"\nwindow = "3d"\n',
}


def snapshot(cfg: Path) -> dict[tuple[str, str, int, int], int]:
    config = load_config(cfg)
    if not config.store_path.exists():
        return {}
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        return {(r.query, r.key, r.layer, r.index): r.value for r in store.released()}


def run(cfg: Path, until: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "dpcr.cli", "run", str(cfg), "--until", until, "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.parametrize("plan", sorted(RELEASES))
def test_random_kills_lose_change_or_duplicate_nothing(tmp_path: Path, plan: str) -> None:
    rnd = random.Random(plan)
    log = mutations(n_entries=300, days=14, seed=5)
    cfg = write_config(tmp_path, plan=None)
    cfg.write_text(cfg.read_text().replace('period = "1d"\n', 'period = "1d"\n' + RELEASES[plan]))
    kept: dict[tuple[str, str, int, int], int] = {}
    kills, steps, duration = 0, 0, 1.0
    for day in range(3, 16, 2):
        until = f"2025-01-{day:02d}T00:00:00Z"
        write_jsonl(tmp_path / "log.jsonl", [m for m in log if m["ts"] < until])  # appends
        steps += 1
        killed_here = 0
        for _ in range(10):  # three kills at random moments of a run, then one that completes
            if killed_here == 3:
                break
            proc = run(cfg, until)
            time.sleep(rnd.uniform(0.02, 0.9) * duration)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                killed_here += 1
            proc.wait()
            now = snapshot(cfg)
            assert {k: now[k] for k in kept} == kept, "a released value changed or vanished"
            kept = now
        kills += killed_here
        started = time.monotonic()
        done = run(cfg, until)
        _, err = done.communicate(timeout=120)
        duration = time.monotonic() - started  # the next kills fall inside a run this long
        assert done.returncode == 0, err.decode()
        now = snapshot(cfg)
        assert {k: now[k] for k in kept} == kept
        kept = now
    assert kills >= 2 * steps  # the runs were really interrupted (3 per step when possible)
    assert kept  # and the release went on
