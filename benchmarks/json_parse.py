"""Parsing JSON lines in DuckDB: its JSON reader against the file read as raw lines.

The changelog of ``product.py`` (JSON lines: entry, ts, op, before, after = {"value": x}) is
parsed by each way below, one DuckDB thread, into a table; the figure is the process CPU of
that statement (user + sys), the least of ``--repeat`` runs, per 10^6 lines.

  reader          ``read_json`` with the columns dpcr stages (entry, ts, seq, op as text,
                  before and after as JSON): what a first run reads today
  lines           ``read_csv`` with one column and a delimiter no line holds: the lines alone
  lines+regexp    the lines and ``regexp_full_match`` of the common form (integer entry and
                  ts, a known op, before and after as null or {"value": number}), without
                  taking anything out of the line
  lines+split     the lines split at ``,"`` and the fields cut out of the pieces (entry, ts,
                  op, before, after as JSON), the form not checked: the floor of a reader that
                  takes the common form apart with string functions
  lines+extract   the lines and one ``json_extract`` of the six fields' paths (a list)

``lines+split`` is checked to give the reader's entry, ts, op, before and after on every line
of the file (which has the common form throughout).

Usage: python benchmarks/json_parse.py [--n 1e6] [--workdir DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product import write_files

_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_ROW = r'\{"value":(?:' + _NUMBER + r"|null)\}"
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
#: The common form of a line (each field once, in this order, no blanks).
_FORM = (
    r'\{"entry":' + _INTEGER + r',"ts":' + _INTEGER + r',"op":"(?:insert|update|delete)"'
    r'(?:,"before":(?:null|' + _ROW + r'))?(?:,"after":(?:null|' + _ROW + r"))?\}"
)
_PATHS = "['$.\"entry\"', '$.\"ts\"', '$.\"seq\"', '$.\"op\"', '$.\"before\"', '$.\"after\"']"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ways(path: str) -> dict[str, str]:
    """The SELECT of each way (module docstring) over the JSON-lines file ``path``."""
    lines = (
        f"read_csv('{path}', columns = {{'line': 'VARCHAR'}}, header = false, "
        "auto_detect = false, delim = chr(1), quote = '', escape = '', strict_mode = false)"
    )
    columns = "{'entry': 'VARCHAR', 'ts': 'VARCHAR', 'seq': 'VARCHAR', 'op': 'VARCHAR', " \
        "'before': 'JSON', 'after': 'JSON'}"  # fmt: skip
    split = (
        "SELECT p[1][10:] AS entry, p[2][5:] AS ts, p[3][6:11] AS op, "
        "CASE WHEN len(p) = 5 AND NOT starts_with(p[4], 'before\":n') THEN p[4][9:]::JSON END "
        "AS before, CASE WHEN starts_with(p[-1], 'after\":{') THEN p[-1][8:-2]::JSON END AS after "
        f"FROM (SELECT string_split(line, ',\"') AS p FROM {lines})"
    )
    return {
        "reader": f"SELECT * FROM read_json('{path}', format = 'newline_delimited', "
        f"columns = {columns})",
        "lines": f"SELECT line FROM {lines}",
        "lines+regexp": f"SELECT regexp_full_match(line, '{_FORM}') AS ok FROM {lines}",
        "lines+split": split,
        "lines+extract": f"SELECT json_extract(line, {_PATHS}) AS l FROM {lines}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the generated files here and reuse them"
    )
    args = parser.parse_args()
    import duckdb

    with tempfile.TemporaryDirectory(prefix="dpcr-json-parse-") as tmp:
        folder = args.workdir if args.workdir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = str(write_files(int(args.n), args.seed, folder)["jsonl"])
        con = duckdb.connect()
        con.execute("SET threads = 1")
        per = 1e6 / int(args.n)
        print("| way | CPU s per 10^6 lines (least of the runs) |")
        print("|---|---|")
        for name, sql in ways(path).items():
            best = float("inf")
            for _ in range(args.repeat):
                con.execute("DROP TABLE IF EXISTS t")
                start = _cpu()
                con.execute(f"CREATE TEMP TABLE t AS {sql}")
                best = min(best, _cpu() - start)
            print(f"| {name} | {best * per:.3f} |", flush=True)
            if name in ("reader", "lines+split"):
                con.execute(f"CREATE OR REPLACE TEMP TABLE {name.replace('+', '_')} AS "
                            "SELECT entry, ts, op, before::VARCHAR AS b, after::VARCHAR AS a "
                            "FROM t")  # fmt: skip
        differ = con.execute(
            "SELECT count(*) FROM (SELECT * FROM reader EXCEPT ALL SELECT * FROM lines_split)"
        ).fetchall()[0][0]
        print(f"\nlines+split against the reader: {differ} of the lines differ")
        if differ:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
