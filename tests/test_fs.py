"""dpcr._fs.write_atomic: text, its UTF-8 bytes and a function writing text give the same
bytes; what a killed run left at the temporary name (a file, a link) is removed, never written
through; a link at the target is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

import pytest

from dpcr._fs import write_atomic
from dpcr.errors import OutputError

TEXT = 'a "é" line\r\nand \u2028 another\n\n'


@pytest.mark.parametrize("durable", [True, False])
def test_text_bytes_and_a_writer_give_the_same_file(tmp_path: Path, durable: bool) -> None:
    def writer(fh: TextIO) -> None:
        fh.write(TEXT)

    got = []
    for i, content in enumerate([TEXT, TEXT.encode("utf-8"), writer]):
        path = tmp_path / f"f{i}.json"
        write_atomic(path, content, mode=0o640, durable=durable)
        got.append(path.read_bytes())
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert got[0] == got[1] == got[2] == TEXT.encode("utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f0.json", "f1.json", "f2.json"]


@pytest.mark.parametrize("left", ["file", "link"])
def test_what_a_killed_run_left_is_replaced(tmp_path: Path, left: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path = tmp_path / "out.json"
    path.write_bytes(b"old")
    tmp = tmp_path / "out.json.tmp"
    if left == "file":
        tmp.write_bytes(b"half a write")
    else:
        tmp.symlink_to(victim)
    write_atomic(path, b"new", mode=0o644, durable=False)
    assert path.read_bytes() == b"new" and not path.is_symlink()
    assert victim.read_bytes() == b"keep"
    assert not os.path.lexists(tmp)


def test_a_link_at_the_target_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "out.json").symlink_to(victim)
    with pytest.raises(OutputError):
        write_atomic(tmp_path / "out.json", b"new", mode=0o644)
    assert victim.read_bytes() == b"keep"
