"""The layout of a release's folders, checked before a run writes anything: no symbolic link
where dpcr writes, no world-writable output folder, and no public output the store cannot
account for; a release's public files from the layout before ``public/`` are moved into it
(:mod:`dpcr.release._outputs` says what each folder holds)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr._fs import ensure_dir, refuse_link, refuse_world_writable
from dpcr.release._outputs import (
    PUBLIC_FILES,
    PUBLIC_MODES,
    Published,
    as_published,
    legacy_dir,
    log,
    operator_dir,
    public_dir,
    public_texts,
    published_path,
    quiet_path,
    source_blocks,
    state_path,
    table_texts,
)
from dpcr.release._published import verify_published
from dpcr.release._rows import intervals_cache

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = ["check_layout", "check_published", "power_cut_remnant", "remnants",
           "stored_texts"]


def check_layout(settings: ReleaseSettings, *, simulation: bool) -> None:
    """Refuse, before anything is written, a symbolic link where dpcr writes (the public,
    simulation and operator folders and their files, the state folder, the intervals cache) and
    an output folder every local user may write to."""
    out = Path(settings.output_dir)
    refuse_world_writable(out, "the outputs")
    operator = operator_dir(settings, create=False)
    state = state_path(settings)
    paths = [operator, public_dir(settings, simulation=simulation), state.parent,
             intervals_cache(settings)]  # fmt: skip
    paths += [public_dir(settings, simulation=simulation) / name for name in PUBLIC_FILES]
    paths += [legacy_dir(settings) / name for name in PUBLIC_FILES]
    paths += [operator / name for name in ("scratch", "duckdb-tmp", "diagnostics.json",
                                           "quarantine.jsonl", "report.html",
                                           "simulation-report.html",
                                           "follow-health.json")]  # fmt: skip
    paths += [settings.quarantine_path, state, state.with_name(state.name + ".wal"),
              source_blocks(settings), published_path(settings), quiet_path(settings)]  # fmt: skip
    for path in paths:
        refuse_link(path)


def check_published(
    settings: ReleaseSettings, store: Any, *, simulation: bool
) -> Published | None:
    """Refuse when public outputs exist that this store cannot account for
    (:mod:`dpcr.release._published`), then move a release's public files from the layout
    before ``public/`` into it. Files whose bytes are those a run of this store wrote, at a head
    the store still holds (:func:`~dpcr.release._outputs.record_published`), are accounted for
    without being parsed. A file that cannot be parsed is accounted for when it is what a power
    cut leaves of the file the store gives now (:func:`power_cut_remnant`): the run writes it
    again (:func:`dpcr.release._stored.publish`), as it writes a missing one. Returns the
    files when each is byte for byte one a run of this store wrote
    (:func:`~dpcr.release._outputs.as_published`: their bytes, to which the run's publishing
    appends its rows), else None (also when files were moved: the run reads them again)."""
    folders = [public_dir(settings, simulation=simulation)]
    if not simulation:
        folders.append(legacy_dir(settings))
    found = as_published(settings, store, folders)
    if found is None:
        verify_published(settings, store, folders, PUBLIC_FILES,
                         remnants(settings, store, simulation=simulation))  # fmt: skip
    if not simulation and _migrate(settings):
        found = None
    return found


def remnants(
    settings: ReleaseSettings, store: Any, *, simulation: bool, found: list[Path] | None = None
) -> Callable[[Path, bytes], bool]:
    """Whether a public file's bytes are what a power cut left of the file the store gives now
    (:func:`power_cut_remnant`; the store's files rendered on the first call); ``found``
    collects the paths of those that are."""
    stored: dict[Path, bytes] = {}

    def remnant(path: Path, data: bytes) -> bool:
        if not stored:
            stored.update(stored_texts(settings, store, simulation=simulation))
        whole = stored.get(path)
        if whole is None or not power_cut_remnant(data, whole):
            return False
        if found is not None:
            found.append(path)
        return True

    return remnant


#: The unit in which a file system writes a file's data and its size: what a power cut leaves
#: of a file replaced without an fsync is cut at a multiple of it (or reads as zeros there).
BLOCK = 4096


def power_cut_remnant(data: bytes, whole: bytes) -> bool:
    """Whether ``data`` is what a power cut can leave of a file whose bytes were ``whole``,
    written and renamed into place without an fsync: empty, cut short at a block boundary, or
    with blocks that read as zeros (their data never reached the disk). A file cut anywhere
    else (an edit, a copy stopped halfway) is not."""
    n = len(data)
    if n > len(whole) or (n != len(whole) and n % BLOCK):
        return False
    zeros = bytes(BLOCK)
    for at in range(0, n, BLOCK):
        part = data[at : at + BLOCK]
        if part != whole[at : at + BLOCK] and part != zeros[: len(part)]:
            return False
    return True


def stored_texts(settings: ReleaseSettings, store: Any, *, simulation: bool) -> dict[Path, bytes]:
    """The bytes of every public file a run writes, as the store gives them now (path ->
    bytes; the files :func:`dpcr.release._stored.publish` writes after the store's last run,
    byte for byte); empty before the first run."""
    from dpcr.release._rows import released_rows
    from dpcr.release._summary import public_summary
    from dpcr.svt.pipeline import ALERT_FIELDS, alert_rows, alert_totals

    summary = store.last_run()
    summary.pop("operator", None)
    if not summary:
        return {}
    rows = released_rows(settings, store, store.source_state().interval)
    public = public_summary(settings, summary, alert_totals(settings, store))
    texts = public_texts(settings, rows, public, head=store.recorded_head())
    if settings.alerts:
        texts |= table_texts(public_dir(settings, simulation=simulation), "alerts",
                             ALERT_FIELDS, alert_rows(settings, store))  # fmt: skip
    return {path: text.encode("utf-8") for path, text in texts.items()}


def _migrate(settings: ReleaseSettings) -> bool:
    """Move the public files of the layout before ``public/`` (directly in ``output.dir``) into
    ``public/``, with one notice; True when there were any. The store accounts for every value
    they show (checked first); a file ``public/`` holds already supersedes the old one, which
    is removed."""
    old, new = legacy_dir(settings), public_dir(settings, simulation=False)
    names = [n for n in PUBLIC_FILES if os.path.lexists(old / n)]
    if not names:
        return False
    ensure_dir(new, PUBLIC_MODES[0])
    for name in names:
        if os.path.lexists(new / name):
            (old / name).unlink()
        else:
            os.replace(old / name, new / name)
    log.warning(
        f"notice: moved the public files ({', '.join(names)}) from {old} into {new}, which holds "
        f"only what may be published: publish {new} from now on, never {old} itself "
        "(docs/store.md)"
    )
    return True
