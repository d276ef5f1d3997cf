"""SQL building blocks shared by the sources: quoting, timestamp parsing, Debezium decimals.

All expressions are plain DuckDB SQL over text columns, so a million records parse in about a
second. Expressions reference their input more than once, so callers pass *column names* (never
expensive expressions) to avoid evaluating the input repeatedly.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpcr._sql import lit

# Bounds of a timestamp dpcr accepts: years 0001 through 9999, in microseconds since the epoch.
MIN_US = -62_135_596_800_000_000
MAX_US = 253_402_300_799_999_999

_INT = r"\s*[+-]?[0-9]+\s*"
_DECIMAL = r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*"
# An explicit zone after the time: Z, UTC, +01, -05:30, +0530, or a zone name after a space.
_ZONE = r"[0-9](\s*(Z|z|UTC|GMT|[+-][0-9]{2}(:?[0-9]{2})?)|\s+[A-Za-z][A-Za-z0-9_/+-]*)\s*$"
# A numeric UTC offset outside what exists (hours above 14, minutes above 59) is not a time.
_BAD_OFFSET = r"[0-9]\s*[+-]((1[5-9]|[2-9][0-9])(:?[0-9]{2})?|[0-9]{2}:?[6-9][0-9])\s*$"


def ts_expr(col: str, factor: int) -> str:
    """Microseconds since the epoch from the text column ``col``, or NULL when unparseable.

    Integers and decimals (``1735689600``, ``1735689600.25``, ``1.7e9``) are epoch numbers,
    multiplied by ``factor`` (1_000_000 for seconds). Anything else is ISO 8601 (``T`` or a space
    between date and time; fractions of seconds; ``Z``, ``+01:00`` or a zone name). A time without
    zone, or a date alone, is UTC -- independent of the connection's TimeZone setting, because
    zone-less text is cast to TIMESTAMP (which has no zone), and only text with an explicit zone is
    cast to TIMESTAMPTZ (whose offset then fixes the instant).
    """
    c = col
    in_range = f"BETWEEN {MIN_US} AND {MAX_US}"
    # An integer written as BIGINT prints it (no blanks, sign or leading zeros: most epoch
    # numbers) matches _INT and needs no regular expression (nor is it text that ends in Z).
    exact = f"TRY_CAST({c} AS BIGINT)"
    zoned = _within(f"epoch_us(TRY_CAST({c} AS TIMESTAMPTZ))", in_range)
    # (the range of the integer itself, which needs no wider type: MIN_US <= x * factor
    # <= MAX_US exactly when ceil(MIN_US / factor) <= x <= floor(MAX_US / factor))
    integer = (
        f"(CASE WHEN {exact} BETWEEN {-(-MIN_US // factor)} AND {MAX_US // factor} "
        f"THEN {exact} * {factor} END)"
    )
    # Such an integer first, in a CASE of its own: DuckDB then evaluates the other branches
    # for the other texts alone (half the cost of the same test as a branch among them).
    return (
        f"CASE WHEN {exact}::VARCHAR = {c} THEN {integer} ELSE "
        f"CASE WHEN {c} IS NULL THEN NULL "
        # Text with a colon that ends in a digit and Z (2025-01-01T05:03:05.925Z) skips the
        # tests below: it is no number, matches _ZONE and not _BAD_OFFSET, so the branch with
        # an explicit zone would give this same value.
        f"WHEN suffix({c}, 'Z') AND contains({c}, ':') "
        f"AND substring({c}, length({c}) - 1, 1) BETWEEN '0' AND '9' THEN {zoned} "
        f"WHEN regexp_full_match({c}, {lit(_INT)}) THEN (CASE WHEN "
        f"TRY_CAST(trim({c}) AS HUGEINT) * {factor} {in_range} "
        f"THEN (TRY_CAST(trim({c}) AS HUGEINT) * {factor})::BIGINT END) "
        f"WHEN regexp_full_match({c}, {lit(_DECIMAL)}) THEN (CASE WHEN "
        f"round(TRY_CAST(trim({c}) AS DOUBLE) * {factor}) {in_range} "
        f"THEN round(TRY_CAST(trim({c}) AS DOUBLE) * {factor})::BIGINT END) "
        f"WHEN contains({c}, ':') AND regexp_matches({c}, {lit(_ZONE)}) "
        f"THEN (CASE WHEN regexp_matches({c}, {lit(_BAD_OFFSET)}) THEN NULL "
        f"ELSE {zoned} END) "
        f"ELSE {_within(f'epoch_us(TRY_CAST({c} AS TIMESTAMP))', in_range)} END END"
    )


def _within(expr: str, in_range: str) -> str:
    """``expr`` when it lies in years 1 to 9999 (what dpcr can print and compute with), else
    NULL: such a timestamp is a ``bad_timestamp``."""
    return f"(CASE WHEN {expr} {in_range} THEN {expr} END)"


def seq_expr(col: str, record: str = "record") -> str:
    """The sequence number: an integer from ``col``, the record number when ``col`` is NULL,
    and NULL (an error) when ``col`` holds something else."""
    return (
        f"CASE WHEN {col} IS NULL THEN {record} "
        f"WHEN regexp_full_match({col}, {lit(_INT)}) THEN TRY_CAST(trim({col}) AS BIGINT) END"
    )


# -- Debezium decimals --------------------------------------------------------------------------
# Debezium writes a NUMERIC value as {"scale": s, "value": base64 of the unscaled integer in
# big-endian two's complement}. In minified JSON text such an object cannot occur inside a string
# (quotes inside strings are escaped), so a regular expression finds them safely; the text between
# matches is kept, each match is replaced by the decimal number it encodes.
DECIMAL_OBJECT = (
    r'\{"scale":(-?[0-9]+),"value":"([^"\\]*)"\}'
    r'|\{"value":"([^"\\]*)","scale":(-?[0-9]+)\}'
)

# Each lambda stage binds its input once (a macro would re-evaluate its argument per use):
#   match -> (scale, hex of the bytes) -> (scale, unscaled HUGEINT) -> (scale, sign, digits) -> text
# Negative numbers: for bytes b with the top bit set, value = -(~b) - 1, where ~b (the bitwise
# complement, via hex digit translation) is non-negative and fits a HUGEINT for up to 16 bytes.
_DECODE_MATCHES = (
    "list_transform(list_transform(list_transform(list_transform("
    f"regexp_extract_all({{col}}, {lit(DECIMAL_OBJECT)}), "
    "lambda m: {'s': TRY_CAST(regexp_extract(m, '\"scale\":(-?[0-9]+)', 1) AS INTEGER), "
    '\'h\': hex(try(from_base64(regexp_extract(m, \'"value":"([^"]*)"\', 1))))}), '
    "lambda x: {'s': x.s, 'u': CASE WHEN x.h IS NULL THEN NULL WHEN x.h = '' THEN 0::HUGEINT "
    "WHEN left(x.h, 1) >= '8' THEN -TRY_CAST('0x' || translate(x.h, '0123456789ABCDEF', "
    "'FEDCBA9876543210') AS HUGEINT) - 1 "
    "ELSE TRY_CAST('0x' || x.h AS HUGEINT) END}), "
    "lambda x: {'s': x.s, 'neg': x.u < 0, 'd': ltrim(x.u::VARCHAR, '-')}), "
    "lambda x: CASE WHEN x.s IS NULL OR x.d IS NULL THEN NULL "
    "WHEN x.d = '0' THEN '0' "
    "WHEN x.s <= 0 THEN (CASE WHEN x.neg THEN '-' ELSE '' END) || x.d "
    "|| repeat('0', (-x.s)::INTEGER) "
    "ELSE (CASE WHEN x.neg THEN '-' ELSE '' END) "
    "|| left(lpad(x.d, greatest(length(x.d), x.s + 1)::INTEGER, '0'), (-x.s)::INTEGER) || '.' "
    "|| right(lpad(x.d, greatest(length(x.d), x.s + 1)::INTEGER, '0'), x.s::INTEGER) END)"
)


def debezium_decode_expr(col: str) -> str:
    """Text of the JSON ``col`` (minified) with every Debezium decimal replaced by its number.

    NULL when a decimal cannot be decoded (bad base64, more than 16 bytes), so the record is
    reported as ``bad_json`` rather than passed on with an object where a number belongs.
    """
    matches = _DECODE_MATCHES.replace("{col}", col)
    return (
        f"CASE WHEN {col} IS NULL OR NOT contains({col}, '\"scale\":') THEN {col} "
        f"ELSE list_reduce(list_zip(regexp_split_to_array({col}, {lit(DECIMAL_OBJECT)}), "
        f"list_append({matches}, '')), lambda acc, p: acc || p[1] || p[2], '') END"
    )


def record_digest(record: str, raw: str) -> str:
    """SQL for the digest of one source record (see :func:`dpcr.changelog.raw_digest`):
    ``md5_number_lower(record || ':' || raw)``, the record number and the record as read.

    ``md5_number_lower`` is bytes 9-16 of the MD5 digest read as a little-endian integer,
    which is the high half of ``md5_number`` (the whole digest read little-endian); DuckDB
    computes ``md5_number`` in half the time, so that is what runs.
    """
    return f"(md5_number({record}::VARCHAR || ':' || {raw}::VARCHAR) >> 64)::UBIGINT"


def log_record_digest(record: str, fields: Sequence[str]) -> str:
    """SQL for the ``raw2`` digest of one record of a SQLite log (its text columns ``fields``):
    ``md5_number(x) >> 64`` (see :func:`record_digest`) of

        x = record number ':' len_1 ',' ... ',' len_n ':' field_1 ... field_n

    where ``len_i`` is the length of field i in bytes, or -1 when it is NULL, and a NULL field
    adds no bytes. The lengths say where each field ends, so two records give the same x only
    when they have the same number and the same fields (NULL and an empty text differ). It
    digests the bytes of the record once, without building its JSON text (``raw1``), in about
    half the time.
    """
    lengths = ", ',', ".join(f"coalesce(strlen({f}), -1)" for f in fields)
    return (
        f"(md5_number(concat({record}, ':', {lengths}, ':', {', '.join(fields)})) >> 64)::UBIGINT"
    )
