"""The ρ of Gaussian calibrations kept beside the store (``<store>.calibrations``): what the
search of :func:`dpcr.release._calibrate.largest_rho` found for a release's plan and for the
candidate plans its report ranks, so that later processes of the release start from it.

One line ``<key> <ρ as float.hex>`` per calibration. The key is a SHA-256 of everything the
search depends on (the calibration's in-process key, what else it reads of the settings) and of
the source of the code that computes it, with numpy's and Python's versions. The file holds no
data; a missing, damaged, stale or linked file is only a cold cache. The calibration computes
the guarantee from a kept ρ as after a search and refuses it beyond the budget.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
import sys
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = ["calibrations_cache", "keep_rho", "kept_key", "kept_rho", "save_calibrations"]


#: The code whose source a kept ρ depends on (besides the key): the accounting, the
#: calibration and the participation it composes, the noise's rounding.
_CODE = ("dpcr.accounting", "dpcr.mechanisms", "dpcr.release._calibrate",
         "dpcr.release._participation")
#: The form of the keys of ``<store>.calibrations`` (a new form makes every kept ρ a miss).
_KEPT_FORM = "dpcr-calibration-1"
#: The most entries one ``<store>.calibrations`` keeps (the newest).
_KEPT_MOST = 256
#: Per cache file: the kept ρ as read (and written) by this process, and those found by this
#: process that are not written yet (:func:`save_calibrations`).
_KEPT_READ: dict[Path, dict[str, float]] = {}
_KEPT_NEW: dict[Path, dict[str, float]] = {}


def calibrations_cache(store: Path) -> Path:
    """``<store>.calibrations``: the Gaussian searches' ρ beside the store (module docstring;
    no data)."""
    return store.with_name(store.name + ".calibrations")


@functools.cache
def _code_digest() -> str | None:
    """The SHA-256 of the source of :data:`_CODE`, with numpy's and Python's versions (the
    FFTs and floats the accounting computes with); None when a source file cannot be read
    (then nothing is kept)."""
    import numpy

    digest = hashlib.sha256(f"{numpy.__version__}\n{sys.version}\n".encode())
    try:
        for name in _CODE:
            module = importlib.import_module(name)
            path = Path(str(module.__file__))
            files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
            for file in files:
                digest.update(f"{file.name}\n".encode() + file.read_bytes())
    except (OSError, TypeError):
        return None
    return digest.hexdigest()


def kept_key(settings: ReleaseSettings, key: str) -> str | None:
    """The key of a calibration's ρ in ``<store>.calibrations``: its in-process ``key``, what
    else the search reads of the settings, and the code (None: not kept; Laplace noise has
    no search)."""
    if settings.mechanism != "gaussian":
        return None
    code = _code_digest()
    if code is None:
        return None
    extra = repr((tuple(bool(getattr(q, "open", False)) for q in settings.queries),
                  settings.owner is not None, settings.budget.delta))  # fmt: skip
    return hashlib.sha256(f"{_KEPT_FORM}\n{code}\n{key}\n{extra}".encode()).hexdigest()


def _read_kept(path: Path) -> dict[str, float]:
    """The entries of the cache file at ``path``: one ``<key> <ρ as float.hex>`` per line
    (a line that does not parse, such as one cut short, is skipped; a missing or unreadable
    file holds none)."""
    from dpcr._fs import read_nofollow
    from dpcr.errors import DpcrError

    try:
        text = read_nofollow(path).decode("ascii")
    except (DpcrError, ValueError):
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        with suppress(ValueError):
            key, value = line.split(" ")
            rho = float.fromhex(value)
            if len(key) == 64 and math.isfinite(rho) and rho > 0:
                out[key] = rho
    return out


def kept_rho(store: Path, key: str | None) -> float | None:
    """The ρ kept for ``key`` beside ``store`` (or found by this process), if any."""
    if key is None:
        return None
    path = calibrations_cache(store)
    new = _KEPT_NEW.get(path, {})
    if key in new:
        return new[key]
    if path not in _KEPT_READ:
        _KEPT_READ[path] = _read_kept(path)
    return _KEPT_READ[path].get(key)


def keep_rho(store: Path, key: str | None, rho: float) -> None:
    if key is not None:
        _KEPT_NEW.setdefault(calibrations_cache(store), {})[key] = rho


def save_calibrations(store: Path) -> None:
    """Write the ρ this process found for the release at ``store`` to ``<store>.calibrations``
    (with those kept there, the newest :data:`_KEPT_MOST`), once the store exists. Only a
    cache: a file that cannot be written is left as it is."""
    from dpcr._fs import write_atomic
    from dpcr.errors import DpcrError

    path = calibrations_cache(store)
    new = _KEPT_NEW.get(path)
    if not new or not store.exists():
        return
    entries = {**_read_kept(path), **new}
    newest = dict(list(entries.items())[-_KEPT_MOST:])
    with suppress(DpcrError, OSError):  # (a full disk, a link there: not written)
        write_atomic(path, "".join(f"{k} {v.hex()}\n" for k, v in newest.items()),
                     mode=0o600, durable=False)
        _KEPT_READ[path] = newest
        del _KEPT_NEW[path]
