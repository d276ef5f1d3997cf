"""The digests of the public files a process wrote are reused when it reads them back, however
their path is spelt (dpcr.release._outputs._WRITTEN, keyed by the folder's inode and the name)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpcr.release._outputs as outputs


def test_a_file_written_is_not_hashed_again_under_another_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out" / "b").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "out")
    path = tmp_path / "out" / "public" / "summary.json"
    digest = outputs.write_public(path, '{"a": 1}', simulation=False)
    hashed: list[bytes] = []
    real = outputs._sha256

    def counting(data: bytes) -> str:
        hashed.append(data)
        return real(data)

    monkeypatch.setattr(outputs, "_sha256", counting)
    for spelt in (path, tmp_path / "link" / "public" / "summary.json",
                  tmp_path / "out" / "b" / ".." / "public" / "summary.json"):  # fmt: skip
        assert outputs._content(spelt) == (digest, b'{"a": 1}')
    assert hashed == []
    path.write_text('{"a": 2}')  # (changed: hashed)
    assert outputs._content(tmp_path / "link" / "public" / "summary.json")[0] == real(
        b'{"a": 2}')  # fmt: skip
    assert hashed == [b'{"a": 2}']
