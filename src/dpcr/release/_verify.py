"""A full check of what a release's runs check only in part (``dpcr verify``).

A run checks, besides the new records it reads, only a bounded part of what earlier runs
consumed (:mod:`dpcr.changelog.position`: the size, the last partial block and a few full
blocks in turn) so that a step costs what is new. :func:`verify` checks all of it, and writes
nothing:

* the store: every released value and ledger row against the head recorded at the last commit
  (as every run does when it opens the store), and every commit of the values of open
  histograms' candidate keys against the chain of their digests (a run checks the newest);
* the source: every byte earlier runs consumed against the position the store holds (a line
  file: each block's SHA-256 against the digests kept beside the state, or, when those are
  missing or stale, all of them against the position's root; a Parquet file: its rows' hashes);
  a SQLite log is checked record by record by every run already;
* the public outputs: every file of the public folder against the store's released values
  (:mod:`dpcr.release._published`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dpcr.errors import RewrittenError, StoreError

if TYPE_CHECKING:
    from dpcr.changelog.parquet_position import ParquetPosition
    from dpcr.changelog.position import BlockPosition, FilePosition
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState, Store

__all__ = ["Finding", "verify"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One check of :func:`verify`: what was checked (``store``, ``source`` or ``outputs``),
    whether it is ``intact``, and one line saying what was found."""

    what: str
    intact: bool
    detail: str


def verify(settings: ReleaseSettings, *, simulation: bool = False) -> tuple[Finding, ...]:
    """Check the store, everything earlier runs consumed of the source, and the public outputs
    (module docstring). A difference is a finding that is not ``intact``; what cannot be checked
    at all (no store, a source that cannot be read, a store in use) raises a
    :class:`~dpcr.errors.DpcrError` other than :class:`~dpcr.errors.RewrittenError`."""
    from dpcr.store import Store

    if not settings.store_path.exists():
        raise StoreError(f"no store at {settings.store_path}: nothing was released to verify")
    try:
        store = Store(
            settings.store_path,
            fingerprint=settings.fingerprint(),
            mode="simulation" if simulation else "release",
            rebind=False,  # (verify writes nothing)
        )
    except RewrittenError as exc:
        return (Finding(what="store", intact=False, detail=str(exc)),)
    with store:
        state = store.source_state()
        released = store.released_count()
        findings = [
            _chain(settings, store) or Finding(
                what="store",
                intact=True,
                detail=(
                    f"{released} released values and their ledger match the head recorded at the "
                    "last commit"
                ),
            ),
            _source(settings, state),
            _outputs(settings, store, simulation=simulation),
        ]
    return tuple(findings)


def _chain(settings: ReleaseSettings, store: Store) -> Finding | None:
    """The finding of a chain of the candidates head that differs from its rows (None: intact)."""
    fault = store.chain_fault()
    if fault is None:
        return None
    return Finding(what="store", intact=False, detail=(
        f"{settings.store_path}: the unpublished values of open histograms no longer match the "
        f"commits that wrote them ({fault}): the store was edited or is corrupt. Restore it from "
        "the newest backup `dpcr verify` finds intact (docs/store.md) before the next run: a run "
        "checks only the newest commit and would select keys by the edited values"
    ))  # fmt: skip


def _source(settings: ReleaseSettings, state: SourceState) -> Finding:
    from dpcr.changelog.parquet_position import parse_parquet_token
    from dpcr.changelog.position import SourceRewritten, parse_token
    from dpcr.release._source import REWRITTEN, check_source, positioned

    if not state.records:
        return Finding(what="source", intact=True, detail="no record consumed yet")
    path, _parquet = positioned(settings)
    position, parquet = parse_token(state.digest), parse_parquet_token(state.digest)
    if path is None or (position is None and parquet is None):
        return Finding(
            what="source",
            intact=True,
            detail=(f"{state.records} records consumed, checked record by record by every run"),
        )
    check_source(settings)
    try:
        if position is not None:
            detail = _line_file(settings, path, position)
        elif parquet is not None:
            detail = _parquet_file(settings, path, parquet)
    except SourceRewritten as exc:
        return Finding(what="source", intact=False, detail=f"{REWRITTEN} ({exc})")
    except OSError as exc:
        raise StoreError(f"cannot read the source {str(path)!r} ({exc.strerror})") from None
    return Finding(what="source", intact=True, detail=detail)


def _line_file(
    settings: ReleaseSettings, path: Path, position: FilePosition | BlockPosition
) -> str:
    from dpcr.changelog.position import BLOCK, BlockPosition, advance, load_blocks, root_of
    from dpcr.release._outputs import source_blocks

    size = position.size
    blocks = source_blocks(settings)
    advance(path, size, check=position, blocks=blocks, every=True, save=False)
    detail = f"the {size} bytes earlier runs consumed are unchanged"
    if isinstance(position, BlockPosition):
        k = size // BLOCK
        kept = load_blocks(blocks).digests
        if len(kept) < k or root_of(kept[:k]) != position.root:
            detail += (
                " (the block digests kept beside the state are missing or stale: the next "
                "run re-hashes every consumed byte)"
            )
    return detail


def _parquet_file(settings: ReleaseSettings, path: Path, parquet: ParquetPosition) -> str:
    import duckdb

    from dpcr.changelog.parquet_position import parquet_position
    from dpcr.changelog.position import SourceRewritten
    from dpcr.release._outputs import source_blocks

    con = duckdb.connect()
    try:
        parquet_position(con, path, check=parquet, blocks=source_blocks(settings), save=False)
    except duckdb.Error as exc:  # (not a Parquet file any more, or truncated)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceRewritten(f"it is not readable as Parquet: {first}") from None
    finally:
        con.close()
    return f"the {parquet.rows} rows earlier runs consumed are unchanged"


def _outputs(settings: ReleaseSettings, store: Store, *, simulation: bool) -> Finding:
    from dpcr.release._layout import remnants
    from dpcr.release._outputs import PUBLIC_FILES, legacy_dir, public_dir
    from dpcr.release._published import verify_published

    folders = [public_dir(settings, simulation=simulation)]
    if not simulation:
        folders.append(legacy_dir(settings))
    cut: list[Path] = []
    try:
        verify_published(settings, store, folders, PUBLIC_FILES,
                         remnants(settings, store, simulation=simulation, found=cut))  # fmt: skip
    except RewrittenError as exc:
        return Finding(what="outputs", intact=False, detail=str(exc))
    if cut:
        return Finding(what="outputs", intact=False, detail=(
            f"{', '.join(str(p) for p in cut)}: empty or cut short (what a power cut leaves of "
            "the file the store gives, which the next run writes again whole)"))  # fmt: skip
    return Finding(
        what="outputs",
        intact=True,
        detail=f"the public files in {folders[0]} show only what the store holds",
    )
