"""A session's step from memory reads lines of the common form (``entry``, ``ts``, ``op``,
``before``, ``after`` in this order, numbers or null) without decoding them as JSON objects
(dpcr.engines.memory_batch._compact), and those of the compact form by array operations
(dpcr.engines._lines): each must give what the JSON decoder's path gives, or refuse what it
refuses, for every chunk of lines."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpcr
import dpcr.engines._lines as vector
import dpcr.engines.memory_batch as reading
from dpcr.release._engine import engine_request
from dpcr.timeutil import format_timestamp

T0 = 1_735_689_600_000_000


def _request(queries: list[Any]) -> Any:
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=Path("/nonexistent/log.jsonl")),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start=format_timestamp(T0), period="1d"),
        queries=queries,
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=Path("/nonexistent/out"),
    )
    return engine_request(release)


def _number(rng: random.Random) -> str:
    return rng.choice([
        "0", "-0", "7", "-12", "0.5", "-2.5", "10.5", "1e3", "1E-2", "2.50e+1", "123456789012345",
        "9007199254740992", "9007199254740993", "-9007199254740993", "1e400", "-1e400",
        "0.1000000000000000055511151231257827", "4.9e-324", "012", "1.", ".5", "+1", "NaN",
        "null", "true", '"3"',
    ] + [repr(round(rng.uniform(-50, 150), rng.randint(0, 6))) for _ in range(20)])  # fmt: skip


def _object(rng: random.Random, columns: list[str]) -> str:
    roll = rng.random()
    if roll < 0.04:
        return "{}"
    if roll < 0.08:
        return '{"' + columns[0] + '": 1, "x": 2}'
    if roll < 0.1:
        return '{"' + columns[0] + '":1,"' + columns[0] + '":2}'
    parts = [f'"{c}":{_number(rng) if rng.random() < 0.5 else rng.randint(0, 99)}'
             for c in columns]  # fmt: skip
    if len(columns) > 1 and rng.random() < 0.05:
        parts.reverse()
    return "{" + ",".join(parts) + "}"


def _line(rng: random.Random, columns: list[str]) -> str:
    entry = rng.choice([str(rng.randint(0, 500)), f'"e{rng.randint(0, 50)}"', "-0", '" e"',
                        '"\\u0041"', '""', "1.0", "99999999999999999", '"é"', '"a\\"b"'] +
                       [str(rng.randint(0, 300))] * 12)  # fmt: skip
    ts = rng.choice([str(T0 + rng.randrange(10**9))] * 10 + ["1.5e15", "-1", '"5"'])
    op = rng.choice(["insert", "update", "delete"] * 5 + ["upsert"])
    fields = [f'"entry":{entry}', f'"ts":{ts}', f'"op":"{op}"']
    for name in ("before", "after"):
        roll = rng.random()
        if roll < 0.15:
            continue  # (no such field)
        fields.append(f'"{name}":' + ("null" if roll < 0.45 else _object(rng, columns)))
    if rng.random() < 0.02:
        fields.append('"seq":1')
    if rng.random() < 0.03:
        rng.shuffle(fields)
    blank = rng.choice(["", "", "", " ", "\t", "  "])
    text = "{" + f",{blank}".join(fields) + "}"
    return text.replace('":', '":' + blank) if blank else text


def _reference(data: bytes, request: Any, monkeypatch: pytest.MonkeyPatch, *,
               pattern: bool = False) -> Any:  # fmt: skip
    """The JSON decoder's outcome (``pattern``: the line pattern's, without array reads)."""
    with monkeypatch.context() as m:
        m.setattr(vector, "read", lambda *args: None)
        if not pattern:
            m.setattr(reading, "_compact", lambda *args: None)
        return _outcome(data, request)


def _outcome(data: bytes, request: Any) -> Any:
    try:
        b = reading.parse(data, request, 1)
    except reading._Refused:
        return "refused"
    entries = b.entries if isinstance(b.entries, list) else list(map(str, b.entries.tolist()))
    return (entries, b.ts.tolist(), b.op.tolist(), b.f.tolist(), b.nn.tolist())


@pytest.mark.parametrize("columns", [["value"], ["v", "w"]])
def test_common_lines_read_as_json_reads_them(
    columns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(len(columns))
    queries: list[Any] = [dpcr.Count(name="n")] + [
        dpcr.Sum(name=f"s{c}", column=c, lower=-5, upper=60) for c in columns
    ]  # fmt: skip
    request = _request(queries)
    taken = equal = arrays = 0
    for _ in range(2500):
        odd = rng.random() < 0.3  # a chunk with lines of other forms
        lines = [_line(rng, columns) if odd and rng.random() < 0.3 else _plain(rng, columns)
                 for _ in range(rng.randint(1, 12))]  # fmt: skip
        data = "".join(x + "\n" for x in lines).encode()
        got = _outcome(data, request)
        want = _reference(data, request, monkeypatch)
        assert got == want, data
        assert _reference(data, request, monkeypatch, pattern=True) == want, data
        fast = reading._compact(data, request, 1, len(lines)) if got != "refused" else None
        taken += fast is not None
        arrays += vector.read(data, tuple(columns)) is not None
        equal += got != "refused"
    # (each path reads many chunks)
    assert taken > 800 and equal > taken and arrays > 30, (taken, equal, arrays)


@pytest.mark.parametrize("columns", [["value"], ["v", "w"], ["v1", "w-2"]])
def test_compact_lines_read_as_arrays_read_as_json(
    columns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines without blanks, numbers of every kind: the array read gives the JSON decoder's
    batch, or leaves the chunk to the other paths (which give it)."""
    rng = random.Random(7 + len(columns))
    queries: list[Any] = [dpcr.Count(name="n")] + [
        dpcr.Sum(name=f"s{c}", column=c, lower=-5, upper=60) for c in columns
    ]  # fmt: skip
    request = _request(queries)
    arrays = 0
    for _ in range(1500):
        lines = [_plain(rng, columns, compact=True) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.2:  # a line of another form among them
            lines.insert(rng.randrange(len(lines) + 1), _line(rng, columns))
        data = "".join(x + "\n" for x in lines).encode()
        got = _outcome(data, request)
        assert got == _reference(data, request, monkeypatch), data
        arrays += vector.read(data, tuple(columns)) is not None
    assert arrays > 100, arrays


#: Numbers as JSON may write them (valid ones), besides random floats and integers.
_VALID = ["0", "-0", "-0.0", "7", "-12", "0.5", "-2.5", "10.5", "1e3", "1E-2", "2.50e+1",
          "123456789012345", "9007199254740992", "9007199254740993", "1e400", "4.9e-324",
          "0.1000000000000000055511151231257827", "null"]  # fmt: skip


def _plain(rng: random.Random, columns: list[str], *, compact: bool = False) -> str:
    """A line of the common form (valid for any history but for its numbers; ``compact``:
    without blanks)."""
    op = rng.choice(["insert", "update", "delete"])
    sep, colon = rng.choice([(",", ":")] if compact else [(",", ":"), (", ", ": "), (",", ": ")])

    def number() -> str:
        roll = rng.random()
        if roll < 0.1:
            return rng.choice(_VALID)
        return str(rng.randint(0, 99)) if roll < 0.5 else repr(round(rng.uniform(-5, 99), 2))

    def obj() -> str:
        return "{" + sep.join(f'"{c}"{colon}{number()}' for c in columns) + "}"

    entry = rng.choice([str(rng.randint(0, 300)), f'"e{rng.randint(0, 9)}"', "-0",
                        "12345678901234567"] + [str(rng.randint(0, 300))] * 20)  # fmt: skip
    fields = [f'"entry"{colon}{entry}', f'"ts"{colon}{T0 + rng.randrange(10**9)}',
              f'"op"{colon}"{op}"']  # fmt: skip
    if op != "insert" or rng.random() < 0.02:
        if rng.random() < 0.9:
            fields.append(f'"before"{colon}{obj() if rng.random() < 0.8 else "null"}')
    elif rng.random() < 0.5:
        fields.append(f'"before"{colon}null')
    if op != "delete" or rng.random() < 0.02:
        fields.append(f'"after"{colon}{obj()}')
    elif rng.random() < 0.5:
        fields.append(f'"after"{colon}null')
    return "{" + sep.join(fields) + "}"


def test_a_day_of_the_benchmark_reads_without_json_objects() -> None:
    """The form DuckDB writes (benchmarks/daily.py's lines) takes the pattern."""
    lines = [
        '{"entry":7271,"ts":1735689621657804,"op":"insert","before":null,"after":{"value":46.34}}',
        '{"entry":4643,"ts":1736786683404220,"op":"delete","before":{"value":70.44},"after":null}',
        '{"entry":12,"ts":1736786683404221,"op":"update","before":{"value":70},"after":{"value":null}}',
    ]  # fmt: skip
    data = "".join(x + "\n" for x in lines).encode()
    request = _request([dpcr.Count(name="n"), dpcr.Sum(name="s", column="value", lower=0,
                                                       upper=100)])  # fmt: skip
    batch = reading._compact(data, request, 1, 3)
    assert batch is not None
    assert batch.entries == ["7271", "4643", "12"] and batch.op.tolist() == [0, 2, 1]
    assert np.array_equal(batch.f, [[1, 0, 1], [46, 0, 0]])
    assert batch.nn.tolist() == [[False] * 3, [False, False, True]]


@pytest.mark.parametrize("columns", [("value",), ("v1",)])
def test_a_number_character_outside_a_number_is_not_read(columns: tuple[str, ...]) -> None:
    """A digit, point or minus in a name or a text (where the form has none) is refused, not
    skipped: the lines' skeletons are compared whole."""
    c = columns[0]
    good = f'{{"entry":1,"ts":{T0},"op":"update","before":{{"{c}":2}},"after":{{"{c}":3.5}}}}'
    assert vector.read((good + "\n").encode(), columns) is not None
    bad = [good.replace('"update"', '"up1date"'), good.replace('"after"', '"af-ter"'),
           good.replace(f'"{c}":3.5', f'"{c}9":3.5'), good.replace('"ts"', '"t.s"'),
           good.replace('"before"', '"be7fore"').replace(":2}", ":}")]  # fmt: skip
    for line in bad:
        assert vector.read((good + "\n" + line + "\n").encode(), columns) is None, line


def test_array_read_numbers_as_text_reads_them() -> None:
    """Values of up to 15 digits, the point anywhere: each the float its text reads as."""
    rng = random.Random(3)
    texts = []
    for _ in range(20000):
        digits = str(rng.randrange(10 ** rng.randint(1, 15)))
        point = rng.randint(0, len(digits) - 1)
        text = digits if point == 0 else digits[:-point].lstrip("0").rjust(1, "0") + "." + \
            digits[-point:]
        texts.append(("-" if rng.random() < 0.3 else "") + text)
    texts += ["0", "-0", "-0.0", "0.1", "123456789012345", "99999999999999.9", "0.00000000000001"]
    data = "".join(f'{{"entry":{i},"ts":{T0 + i},"op":"insert","after":{{"value":{t}}}}}\n'
                   for i, t in enumerate(texts)).encode()  # fmt: skip
    got = vector.read(data, ("value",))
    assert got is not None
    want = np.array([float(t) for t in texts])
    assert np.array_equal(got.values["value"], want)
    assert np.array_equal(np.signbit(got.values["value"]), np.signbit(want))
    assert got.entries.tolist() == list(range(len(texts)))
    assert got.ts.tolist() == [T0 + i for i in range(len(texts))]
    for odd in ("1e3", "0.1234567890123456", "01", "1.", ".5", "--1", "1-2", "1.2.3"):
        line = f'{{"entry":1,"ts":{T0},"op":"insert","after":{{"value":{odd}}}}}\n'
        assert vector.read(data + line.encode(), ("value",)) is None, odd


def test_array_read_of_damaged_lines_reads_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compact lines with bytes replaced, inserted or removed (number characters, separators,
    quotes), numbers longer than the form's, a number at the very start or end of the chunk:
    the array read gives the JSON decoder's batch or leaves the chunk to the other paths."""
    rng = random.Random(19)
    columns = ["value"]
    request = _request([dpcr.Count(name="n"),
                        dpcr.Sum(name="s", column="value", lower=-5, upper=60)])  # fmt: skip
    arrays = 0
    long_numbers = ["1" * 18, "1" * 19, "-" + "1" * 18, "1" * 25, "1." + "5" * 17, "1.2345"]
    for _ in range(1500):
        lines = [_plain(rng, columns, compact=True) for _ in range(rng.randint(1, 6))]
        data = "".join(x + "\n" for x in lines).encode()
        roll = rng.random()
        if roll < 0.25:
            data = data.replace(b'"value":', b'"value":' + rng.choice(long_numbers).encode(), 1)
        elif roll < 0.75:
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                at, byte = rng.randrange(len(b) - 1), rng.choice(b'0123456789.-:,}{" \n')
                if rng.random() < 0.5:
                    b[at] = byte
                else:
                    b.insert(at, byte)
            data = bytes(b).replace(b"\n\n", b"\n").lstrip(b"\n")
        elif roll < 0.85:
            data = data[:-2] + b"\n"  # (the last line's number runs to the end of the chunk)
        if not data.strip():
            continue
        got = _outcome(data, request)
        assert got == _reference(data, request, monkeypatch), data
        arrays += vector.read(data, tuple(columns)) is not None
    assert arrays > 100, arrays


def test_array_read_integers_of_any_width_read_as_written() -> None:
    """The integers of spans of every width up to 18 digits, wide and narrow ones together
    (the narrow ones' characters before them not read as digits), as Python reads them."""
    rng = random.Random(23)
    for trial in range(200):
        texts = [str(rng.randrange(10 ** rng.randint(1, 18))) for _ in range(rng.randint(1, 40))]
        if trial % 3 == 0:
            texts = [t.rjust(len(max(texts, key=len)), "7")[:18] for t in texts]  # (as wide)
        data = ("-9:" + ",:".join(texts) + ",").encode()
        buf = np.frombuffer(data, dtype=np.uint8)
        colon = np.flatnonzero(buf == ord(":")) + 1
        ends = np.flatnonzero(buf == ord(","))
        got = vector._integers(vector._rows(buf), colon, ends)
        assert got.tolist() == [int(t) for t in texts], texts
    assert vector._integers(vector._rows(np.zeros(3, np.uint8)), np.zeros(0, np.int64),
                            np.zeros(0, np.int64)).tolist() == []  # fmt: skip


def test_new_lines_are_the_bytes_after_a_consumed_line_end(tmp_path: Path) -> None:
    """The bytes ``consumed .. size`` of the file, or None when the consumed bytes do not end
    a line (the byte before them is not a line end)."""
    from dpcr.engines.duckdb_memory import new_lines

    text = b'{"a":1}\n{"b":22}\n\n{"c":3}\n{"d"'
    path = tmp_path / "log.jsonl"
    path.write_bytes(text)
    for consumed in range(len(text) + 2):
        for size in range(consumed, len(text) + 2):
            want = text[consumed:size] if not consumed or text[consumed - 1:consumed] == b"\n" \
                else None  # fmt: skip
            assert new_lines(path, consumed, size) == want, (consumed, size)


def _same_lines(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return all(np.array_equal(getattr(a, f), getattr(b, f)) and getattr(a, f).dtype ==
               getattr(b, f).dtype for f in ("entries", "ts", "op")) and list(a.values) == \
        list(b.values) and all(np.array_equal(a.values[c], b.values[c], equal_nan=True) and
                               np.array_equal(np.signbit(a.values[c]), np.signbit(b.values[c]))
                               for c in a.values)  # fmt: skip


@pytest.mark.parametrize("columns", [["value"], ["a", "b"]])
def test_lines_read_in_pieces_read_as_at_once(
    columns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines read :data:`~dpcr.engines._lines.CHUNK` bytes at a time (pieces of whole lines;
    a longer line alone) give what reading them at once gives, or None as it does: valid
    lines, lines of another form, damaged bytes, lines longer than a piece."""
    rng = random.Random(29 + len(columns))
    read = 0
    for _ in range(600):
        lines = [_plain(rng, columns, compact=True) if rng.random() < 0.97 else
                 _line(rng, columns) for _ in range(rng.randint(1, 12))]  # fmt: skip
        data = bytearray("".join(x + "\n" for x in lines).encode())
        if rng.random() < 0.2:
            at = rng.randrange(len(data) - 1)
            data[at:at] = bytes([rng.choice(b'0123456789.-:,}{"#')])
        monkeypatch.setattr(vector, "CHUNK", rng.choice([1, 20, 60, 150, 400, 1 << 19]))
        got = vector.read(bytes(data), tuple(columns))
        assert _same_lines(got, vector._read(bytes(data), tuple(columns))), bytes(data)
        read += got is not None
    assert read > 100, read
