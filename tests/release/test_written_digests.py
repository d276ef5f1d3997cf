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


def test_a_growing_file_is_hashed_from_where_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write's digest is the SHA-256 of its bytes, whether the file grew at its end (a
    release table: only the new bytes and the last few are hashed), changed before them,
    shrank or was written alike; a rewrite hashes few bytes once the file is long."""
    import hashlib
    import random

    monkeypatch.setattr(outputs, "_HASH_TAIL", 64)
    path = tmp_path / "public" / "releases.json"
    hashed: list[int] = []
    real = hashlib.sha256

    class Counting:
        def __init__(self, data: bytes = b"") -> None:
            hashed.append(len(data))
            self._h = real(data)

        def update(self, data: object) -> None:
            hashed.append(len(memoryview(data)))  # type: ignore[arg-type]
            self._h.update(data)  # type: ignore[arg-type]

        def copy(self) -> Counting:
            out = Counting()
            out._h = self._h.copy()
            return out

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr(outputs.hashlib, "sha256", Counting)
    rng = random.Random(3)
    text = "[\n]"
    for step in range(200):
        r = rng.random()
        if r < 0.7:  # rows appended before the last bytes, as the release tables grow
            text = text[:-2] + "".join(rng.choice("abc{}\n ,") for _ in range(rng.randint(1, 90))) \
                + "\n]"  # fmt: skip
        elif r < 0.8 and len(text) > 3:  # a byte changed anywhere
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice("xyz") + text[i + 1:]
        elif r < 0.9:
            text = text[: rng.randint(0, len(text))] + "\n]"
        hashed.clear()
        digest = outputs.write_public(path, text, simulation=False)
        assert digest == real(text.encode()).hexdigest() == real(path.read_bytes()).hexdigest()
        if r < 0.7 and len(text) > 1000 and step:
            assert sum(hashed) < 250, (step, sum(hashed))  # not the whole file again
