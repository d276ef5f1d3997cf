"""The parent side of the CLI fuzz: a few worker processes (tests/cli/fuzz_worker.py) run the
cases one at a time while a watchdog kills any worker whose case runs past its time limit or
past the memory cap; the worker is then replaced and the case recorded as a hang (or as out of
memory)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dpcr

__all__ = ["run_pool"]

TESTS = Path(__file__).resolve().parents[1]
SRC = Path(dpcr.__file__).resolve().parents[1]


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _Worker:
    def __init__(self, log: Path) -> None:
        read, write = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPCR_PG")}
        env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS)])
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.fuzz_worker", "--serve", str(write)],
                stdin=subprocess.PIPE, stdout=err, stderr=err, pass_fds=(write,), env=env,
                start_new_session=True, cwd=tempfile.gettempdir(),
            )  # fmt: skip
        os.close(write)
        self.read = read
        self.buffer = b""

    def send(self, seed: int, index: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{seed} {index}\n".encode())
        self.proc.stdin.flush()

    def receive(self, timeout: float, memory_cap: int) -> tuple[str, Any]:
        """("ok", result) | ("hang", seconds) | ("memory", bytes) | ("crash", status)."""
        started = time.monotonic()
        peak = 0
        while b"\n" not in self.buffer:
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                return "hang", time.monotonic() - started
            ready, _, _ = select.select([self.read], [], [], min(left, 0.25))
            rss = _rss(self.proc.pid)
            peak = max(peak, rss)
            if rss > memory_cap:
                return "memory", rss
            if ready:
                chunk = os.read(self.read, 1 << 20)
                if not chunk:
                    return "crash", self.proc.wait()
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        result = json.loads(line)
        result["peak_rss"] = peak
        return "ok", result

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.read)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self.kill()


def run_pool(
    cases: list[tuple[int, int]],
    *,
    workers: int = 2,
    timeout: float = 60.0,
    memory_cap: int = 5 << 29,
    fresh_above: int = 1 << 30,
    log: Path | None = None,
) -> list[dict[str, Any]]:
    """Run every ``(seed, index)``; one result per case, in the order given. A worker whose
    resident memory passed ``fresh_above`` is replaced after its case, so that every case's
    ``peak_rss`` (sampled 4 times a second) is its own, not a predecessor's."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(cases)):
        todo.put(i)
    results: list[dict[str, Any] | None] = [None] * len(cases)
    log = log or Path(tempfile.gettempdir()) / "dpcr-fuzz-workers.log"  # workers' own output
    log.write_bytes(b"")

    def serve() -> None:
        worker = _Worker(log)
        try:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                seed, index = cases[i]
                worker.send(seed, index)
                status, value = worker.receive(timeout, memory_cap)
                if status == "ok":
                    results[i] = value
                    if value["peak_rss"] > fresh_above:  # the next case starts from a fresh
                        worker.close()  # process, so that its peak is its own
                        worker = _Worker(log)
                    continue
                results[i] = {"seed": seed, "index": index, status: value, "steps": []}
                worker.kill()
                worker = _Worker(log)
        finally:
            worker.close()

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [
        r if r is not None else {"seed": s, "index": i, "lost": True, "steps": []}
        for r, (s, i) in zip(results, cases, strict=True)
    ]
