"""A session's position (dpcr.changelog.position.HeldPosition) compares the last, partial
block of the consumed bytes with the bytes it read there instead of hashing them again: it
hashes only the new bytes, gives the positions a separate check gives, and refuses what the
hash would refuse (the partial block rewritten, even to bytes of the same length; a last line
without a line end extended)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import dpcr.changelog.position as position
from dpcr.changelog.position import BLOCK, HeldPosition, SourceRewritten, advance

_LINE = b"x" * 499 + b"\n"


def _hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes the position module hashes, one entry a call."""
    log: list[int] = []
    real = hashlib.sha256

    class Counting:
        def __init__(self, data: bytes = b"") -> None:
            self._h = real(data)
            log.append(len(data))

        def update(self, data: Any) -> None:
            log.append(len(data))
            self._h.update(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._h, name)

    monkeypatch.setattr(position.hashlib, "sha256", Counting)
    return log


def _grow(path: Path, data: bytes) -> int:
    with path.open("ab") as f:
        f.write(data)
    return path.stat().st_size


def test_the_held_tail_is_compared_not_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(_LINE * 2500)  # a full block and a partial one
    held = HeldPosition()
    pos = held.advance(path, path.stat().st_size, check=None, token="")
    for step in range(1, 2700, 300):  # (a block boundary crossed on the way)
        size = _grow(path, _LINE * step)
        log = _hashed(monkeypatch)
        new = held.advance(path, size, check=pos, token=pos.token)
        monkeypatch.undo()
        assert sum(log) <= size - pos.size + BLOCK * (size // BLOCK > pos.size // BLOCK)
        assert new == advance(path, size, check=None)  # (a separate process's, from scratch)
        pos = new


@pytest.mark.parametrize("how", ["same length", "shorter line", "extended"])
def test_what_the_hash_refuses_the_comparison_refuses(tmp_path: Path, how: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(_LINE * 2500 + (b"half" if how == "extended" else b""))
    held = HeldPosition()
    pos = held.advance(path, path.stat().st_size, check=None, token="")
    pos = held.advance(path, _grow(path, b"" if how == "extended" else _LINE), check=pos,
                       token=pos.token)  # fmt: skip
    data = path.read_bytes()
    if how == "same length":  # (a byte of the partial block changed)
        data = data[:-100] + b"y" + data[-99:]
    elif how == "shorter line":
        data = data[:-10] + b"\n"
    else:  # (the last consumed line, without its end, continued)
        data = data + b" more\n"
    path.write_bytes(data + _LINE)
    with pytest.raises(SourceRewritten, match=r"changed|extended"):
        held.advance(path, len(data) + len(_LINE), check=pos, token=pos.token)
    with pytest.raises(SourceRewritten, match=r"changed|extended"):  # (as a separate check)
        advance(path, len(data) + len(_LINE), check=pos)
