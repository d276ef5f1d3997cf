"""Follow a live source and release every interval once the public clock closes it.

A :class:`Follower` runs a capture (:mod:`dpcr.cdc.postgres` or :mod:`dpcr.cdc.kafka`) into the
changelog file of ``[source]``. After every durable batch, and at least once a second while the
source is quiet, it reads the clock; when the clock has passed the end of the next interval, a
worker thread runs one release step over the file (:meth:`dpcr.ContinualRelease.run` with
``until`` = the clock, in one :class:`~dpcr.release.ReleaseSession`), which reads only the
complete lines the file gained since the last step (the incremental state, docs/changelog.md),
releases every node the clock closed, commits the store and then moves the incremental state
forward. The capture goes on while a step runs (DuckDB releases the interpreter while it
works), so heartbeats are written and read back on time and the next close is seen when it
happens; steps run one at a time, in interval order. The source is acknowledged only for what
is durable in the file, so a crash at any point loses nothing: the restarted follower continues
the file from the source's acknowledged position and the release from the store.

The clock (``[follow] clock``) is public, never the data:

* ``"wall"``: the follower's time minus ``allowed_lateness``. A change committed before an
  interval's end but captured after the interval was released is *late*: it is handled as the
  release loop handles every late record (docs/privacy.md) and counted in the operator
  diagnostics.
* ``"source"`` (PostgreSQL): the commit time of the last heartbeat the follower wrote into the
  server's WAL and read back from the slot, minus ``allowed_lateness``. Every change committed
  before that heartbeat is in the file when the heartbeat is read, so with a lateness above the
  server's commit-time skew no change is late, and what each interval holds does not depend on
  when the follower ran, stopped or crashed.

The store, its incremental state and the changelog file hold raw rows and per-unit state: they
are operator-only (created owner-only) and never published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dpcr.errors import ConfigError, DpcrError
from dpcr.timeutil import US_PER_SECOND, format_duration, format_timestamp
from dpcr.tomltable import TomlTable

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.release import ContinualRelease

__all__ = ["FollowSettings", "FollowStatus", "Follower", "load_follow", "parse_follow"]

Log = Callable[..., None]
_DRIVER_MODULES = ("psycopg2", "kafka")


@dataclass(frozen=True, slots=True)
class FollowSettings:
    """The ``[follow]`` table (docs/cdc.md). Times are in µs."""

    capture: Literal["postgres", "kafka"]
    plugin: Literal["wal2json", "pgoutput"] = "wal2json"
    clock: Literal["wall", "source"] = "wall"
    allowed_lateness: int = 5 * US_PER_SECOND
    heartbeat: int = US_PER_SECOND
    slot: str | None = None
    table: str | None = None
    bootstrap: str | None = None
    topic: str | None = None
    partition: int = 0
    group: str = "dpcr-follow"


def parse_follow(raw: Mapping[str, Any], source: Any) -> FollowSettings:
    """``[follow]`` checked against the ``[source]`` it fills."""
    t = TomlTable(raw, "follow")
    capture = t.pop("capture", types=(str,))
    clock = t.pop("clock", "wall", types=(str,))
    lateness = t.pop_span("allowed_lateness", 5 * US_PER_SECOND)
    heartbeat = t.pop_span("heartbeat", US_PER_SECOND)
    fmt = getattr(source, "format", None)
    if capture not in ("postgres", "kafka"):
        raise ConfigError(f"follow.capture must be 'postgres' or 'kafka', got {capture!r}")
    if clock not in ("wall", "source"):
        raise ConfigError(f"follow.clock must be 'wall' or 'source', got {clock!r}")
    want = "wal2json" if capture == "postgres" else "debezium"
    if fmt != want:
        raise ConfigError(
            f"[follow] capture = {capture!r} writes a {want} file: set [source] format = "
            f"{want!r} and path = the file the follower fills (got format {fmt!r})"
        )
    if capture == "postgres":
        plugin = t.pop("plugin", "wal2json", types=(str,))
        if plugin not in ("wal2json", "pgoutput"):
            raise ConfigError(f"follow.plugin must be 'wal2json' or 'pgoutput', got {plugin!r}")
        table = t.pop("table", getattr(source, "table", None), types=(str,))
        if table is None:
            raise ConfigError(
                "[follow] capture = 'postgres' needs the followed table: set [source] table "
                "= 'schema.table' (or follow.table)"
            )
        settings = FollowSettings(
            capture="postgres", plugin=plugin, clock=clock, allowed_lateness=lateness,
            heartbeat=max(heartbeat, 1000), slot=t.pop("slot", types=(str,)), table=table,
        )  # fmt: skip
    else:
        if clock == "source":
            raise ConfigError(
                "follow.clock = 'source' needs heartbeats in the followed stream, which a Kafka "
                "partition of Debezium events does not carry; use clock = 'wall' with an "
                "allowed_lateness above the connector's delay"
            )
        partition = t.pop("partition", 0, types=(int,))
        if partition < 0:
            raise ConfigError(f"follow.partition must be >= 0, got {partition}")
        settings = FollowSettings(
            capture="kafka", clock="wall", allowed_lateness=lateness,
            bootstrap=t.pop("bootstrap", types=(str,)), topic=t.pop("topic", types=(str,)),
            partition=partition, group=t.pop("group", "dpcr-follow", types=(str,)),
        )  # fmt: skip
    t.done()
    return settings


def load_follow(path: str | Path, release: ContinualRelease) -> FollowSettings:
    """The ``[follow]`` table of the TOML file ``path`` (whose release is ``release``)."""
    import tomllib

    raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    if "follow" not in raw:
        raise ConfigError(
            f"{path} has no [follow] table: dpcr follow needs capture = 'postgres' (with slot) "
            "or 'kafka' (with bootstrap and topic); see docs/cdc.md"
        )
    return parse_follow(raw["follow"], release.source)


@dataclass(slots=True)
class FollowStatus:
    """What the follower has done so far (the health line)."""

    started: float = field(default_factory=time.monotonic)
    captured: int = 0
    #: where the capture stands in the source: the LSN acknowledged last (PostgreSQL), or the
    #: next Kafka offset committed (None before the first batch)
    position: str | None = None
    watermark: int | None = None
    released: int | None = None  # intervals in the store (read when the follower starts)
    steps: int = 0
    last_lag: float | None = None
    late: int = 0
    quarantined: int = 0
    reconnects: int = 0


#: How the log names each ``[follow] clock``.
_CLOCK_NAMES = {"wall": "wall", "source": "source (database)"}


def _released(release: ContinualRelease, *, simulation: bool) -> int:
    """The intervals the store has released (0 without a store, or one this config cannot read:
    the first step reports why)."""
    from dpcr.errors import StoreError
    from dpcr.store import Store

    if not release.store_path.exists():
        return 0
    try:
        with Store(release.store_path, fingerprint=release.fingerprint(),
                   mode="simulation" if simulation else "release",
                   snapshot=True) as store:  # fmt: skip
            return store.source_state().interval
    except StoreError:
        return 0


def _describe(exc: BaseException) -> str:
    """What a lost source connection was, in words an operator can act on (the driver's message
    alone, e.g. "no COPY in progress", names neither the server nor what happened)."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    module = type(exc).__module__.split(".")[0]
    if module == "psycopg2":
        return f"lost or refused the PostgreSQL connection ({type(exc).__name__}: {text})"
    if module == "kafka":
        return f"the Kafka broker is unavailable ({type(exc).__name__}: {text})"
    return text


def _wall_us() -> int:
    return time.time_ns() // 1000


def _is_transient(exc: BaseException) -> bool:
    """A lost connection or a server error of the driver: worth reconnecting for."""
    if isinstance(exc, ConfigError):
        return False
    if isinstance(exc, DpcrError | ConnectionError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] in _DRIVER_MODULES


class Follower:
    """Capture ``follow``'s source into ``release``'s changelog file and release by the clock.

    ``log(event, **fields)`` receives ``released``, ``health``, ``reconnect``, ``complete``
    (a release with an ``end`` has released its last interval: the follower stops) and
    ``stopped`` events. ``rng`` None releases for real (the secure source); a seeded generator
    makes a simulation. ``after_step(result)`` is called by the worker after every step, once
    the step has committed and published (``dpcr follow`` writes the reports there).
    """

    def __init__(
        self,
        release: ContinualRelease,
        follow: FollowSettings,
        *,
        dsn: str | None = None,
        rng: Randomness | None = None,
        log: Log = lambda event, **fields: None,
        should_stop: Callable[[], bool] = lambda: False,
        health_every: float = 10.0,
        wall: Callable[[], int] = _wall_us,
        after_step: Callable[[Any], None] = lambda result: None,
    ) -> None:
        if release.on_error != "quarantine":
            raise ConfigError(
                "dpcr follow needs [output] on_error = 'quarantine': with 'raise', one bad "
                "record would stop every later release"
            )
        if follow.capture == "postgres" and dsn is None:
            raise ConfigError("following PostgreSQL needs a connection string")
        self.release = release
        self.follow = follow
        self.status = FollowStatus()
        self._dsn = dsn
        self._rng = rng
        self._log = log
        self._should_stop = should_stop
        self._complete = False
        self._health_every = health_every
        self._last_health = time.monotonic()
        self._wall = wall
        self.after_step = after_step
        self._schedule = release.plan.schedule()
        self._count = self._schedule.release_count()
        self._fatal: BaseException | None = None
        self._session = release.session()  # one connection and calibration for every step
        self.status.released = _released(release, simulation=rng is not None)
        self._log_lock = threading.Lock()
        self._wake = threading.Event()
        self._worker: threading.Thread | None = None
        self._closing = False

    def _stop(self) -> bool:
        return self._complete or self._fatal is not None or self._should_stop()

    def _emit(self, event: str, **fields: Any) -> None:
        with self._log_lock:  # the capture and the worker both log whole lines
            self._log(event, **fields)

    # --- the clock ----------------------------------------------------------------------------

    def clock(self) -> int | None:
        """The public clock now (µs), or None before the first heartbeat of a source clock."""
        if self.follow.clock == "wall":
            return self._wall() - self.follow.allowed_lateness
        if self.status.watermark is None:
            return None
        return min(self.status.watermark - self.follow.allowed_lateness, self._wall())

    def next_close(self) -> int | None:
        """The end of the next interval to release, or None when the schedule has ended."""
        index = (self.status.released or 0) + 1
        if self._count is not None and index > self._count:
            return None
        return int(self._schedule.release_time(index))

    # --- one tick -------------------------------------------------------------------------------

    def tick(self, captured: int, watermark: int | None, position: object = None) -> None:
        """Called after each durable batch and while quiet: release when the clock says so
        (by waking the worker while :meth:`run` runs; here and now otherwise)."""
        self.status.captured = captured
        if position is not None:
            self.status.position = str(position)
        if watermark is not None:
            self.status.watermark = watermark
        if self._worker is not None:
            self._wake.set()
        else:
            while self._step_if_due():  # a backlog is released a run's step at a time
                pass
        if time.monotonic() - self._last_health >= self._health_every:
            self._last_health = time.monotonic()
            self._emit("health", **self.health())

    def _step_if_due(self) -> bool:
        """One step when the clock has closed the next interval; whether it ran."""
        clock = self.clock()
        due = self.next_close()
        stepped = clock is not None and due is not None and clock >= due
        if stepped:
            assert clock is not None
            self.step(clock)
        if self.status.released is not None and self.next_close() is None and not self._complete:
            self._complete = True  # a release with an end: every interval is out
            self._emit("complete", released_intervals=self.status.released)
        return stepped

    def _work(self) -> None:
        """The worker: a step whenever the clock has closed an interval, until closed. A step
        that raises stops the follower (:meth:`run` raises it)."""
        while True:
            self._wake.wait(0.25)
            self._wake.clear()
            if self._closing:
                return
            try:
                while self._step_if_due() and not self._closing:
                    pass
            except BaseException:  # kept in self._fatal by step(); run() raises it
                return

    def step(self, clock: int) -> None:
        """One release step at ``clock``: every interval ending at or before it."""
        started, began = time.monotonic(), self._wall()
        published: list[int] = []

        def progress(stage: str, done: int, total: int) -> None:
            if stage == "publish" and done == total:
                published.append(self._wall())  # the release is out (the state follows)

        try:
            result = self._session.run(until=clock, rng=self._rng, progress=progress)
        except BaseException as exc:  # the store or the file refused: never retried blindly
            self._fatal = exc
            raise
        s = result.summary
        self.status.steps += 1
        self.status.released = int(s.get("released_intervals") or 0)
        bounding = result.diagnostics.get("bounding", {})
        changelog = result.diagnostics.get("changelog", {})
        self.status.late = int(bounding.get("late", 0))
        self.status.quarantined = sum(changelog.get("quarantined", {}).values())
        for warning in changelog.get("warnings", ()):  # (about the records this step read)
            self._emit("warning", level="warning", warning=warning)
        if bounding.get("dropped_warning"):  # (above constraint.warn_dropped, so far)
            self._emit("warning", level="warning", warning=bounding["dropped_warning"])
        new = int(s.get("new_intervals") or 0)
        if new:
            closed = int(self._schedule.release_time(self.status.released))
            opened = closed + self.follow.allowed_lateness  # when real time passed its close
            out = published[0] if published else self._wall()
            self.status.last_lag = max(0.0, (out - opened) / US_PER_SECOND)
            self._emit(
                "released", new_intervals=new, released_intervals=self.status.released,
                through=format_timestamp(closed), lag_s=round(self.status.last_lag, 3),
                clock=_CLOCK_NAMES[self.follow.clock],
                step_s=round(time.monotonic() - started, 3),
                clock_s=round(max(0.0, (began - opened) / US_PER_SECOND), 3),
                late=self.status.late,
                quarantined=self.status.quarantined,
            )  # fmt: skip
        self.after_step(result)

    def health(self) -> dict[str, Any]:
        st = self.status
        due = self.next_close()
        return {
            "captured": st.captured,
            "position": st.position,
            "uptime_s": round(time.monotonic() - st.started, 1),
            "clock": self.follow.clock,
            "watermark": format_timestamp(st.watermark) if st.watermark is not None else None,
            "released_intervals": st.released,
            "next_close": format_timestamp(due) if due is not None else None,
            "allowed_lateness": format_duration(self.follow.allowed_lateness),
            "last_lag_s": round(st.last_lag, 3) if st.last_lag is not None else None,
            "late": st.late,
            "quarantined": st.quarantined,
            "reconnects": st.reconnects,
        }

    # --- the loop -------------------------------------------------------------------------------

    def _capture(self, idle_exit: float | None) -> None:
        path = Path(self.release.source.path)
        f = self.follow
        if f.capture == "postgres":
            from dpcr.cdc import postgres

            assert self._dsn is not None and f.slot is not None and f.table is not None
            beat = f.heartbeat / US_PER_SECOND if f.clock == "source" else None
            postgres.capture(
                self._dsn, slot=f.slot, table=f.table, out=path, plugin=f.plugin,
                batching=postgres.Batching(idle_exit=idle_exit, heartbeat=beat, tick=0.25),
                should_stop=self._stop,
                on_batch=lambda st: self.tick(st.written, st.watermark, st.acknowledged),
            )  # fmt: skip
        else:
            from dpcr.cdc import kafka

            assert f.bootstrap is not None and f.topic is not None
            kafka.capture(
                f.bootstrap, topic=f.topic, partition=f.partition, out=path, group=f.group,
                batching=kafka.Batching(idle_exit=idle_exit), should_stop=self._stop,
                on_batch=lambda st: self.tick(st.written, None, st.committed),
            )  # fmt: skip

    def run(self, *, once: bool = False, idle_exit: float = 2.0) -> FollowStatus:
        """Follow until ``should_stop()``; with ``once``, until the source has been quiet for
        ``idle_exit`` seconds, then release what the clock closed and return."""
        with self._session:
            self._worker = threading.Thread(target=self._work, name="dpcr-release", daemon=True)
            self._worker.start()
            try:
                self._follow(once, idle_exit)
            finally:
                self._closing = True
                self._wake.set()
                self._worker.join()  # a running step ends (and commits) first
                self._worker = None
            if self._fatal is not None:
                raise self._fatal
            if once and not self._stop():
                self.tick(self.status.captured, self.status.watermark)
        self._emit("stopped", **self.health())
        return self.status

    def _follow(self, once: bool, idle_exit: float) -> None:
        backoff = 1.0
        while not self._stop():
            try:
                self._capture(idle_exit if once else None)
                backoff = 1.0
                if once:
                    break
            except Exception as exc:
                if exc is self._fatal or not _is_transient(exc) or once:
                    raise
                self.status.reconnects += 1
                self._emit("reconnect", level="warning", error=_describe(exc),
                          wait_s=backoff)  # fmt: skip
                deadline = time.monotonic() + backoff
                while time.monotonic() < deadline and not self._stop():
                    time.sleep(0.1)
                backoff = min(30.0, backoff * 2)

