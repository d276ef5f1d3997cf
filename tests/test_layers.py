"""The layering of the package (pyproject.toml, [tool.importlinter]) is checked on every run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    proc = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize("package", ["release", "plans"])
def test_every_module_of_a_layered_package_has_its_layer(package: str) -> None:
    """A module left out of a package's layers contract is checked by nothing (import-linter
    constrains only the modules it names)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c.get("containers") == [f"dpcr.{package}"])
    named = {m.strip() for layer in layers for m in layer.split("|")}
    modules = {p.stem for p in (ROOT / "src" / "dpcr" / package).glob("*.py")} - {"__init__"}
    assert modules <= named, sorted(modules - named)


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "src" / "dpcr").rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}



def _private_imports(src: Path) -> list[str]:
    """Imports of a private name (a module or a name starting with ``_``) of another package
    under ``src/dpcr``: ``dpcr.a._m`` imported from outside ``dpcr.a``."""
    import ast

    found = []
    for path in sorted((src / "dpcr").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        package = ".".join(parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                pieces = name.split(".")
                private = next((i for i, p in enumerate(pieces) if i and p.startswith("_")
                                and not p.startswith("__")), None)  # fmt: skip
                if private is None or pieces[0] != "dpcr":
                    continue
                owner = ".".join(pieces[:private])
                if owner != package and not package.startswith(owner + "."):
                    found.append(f"{path.relative_to(src)}:{node.lineno} imports {name}")
                    break  # (one finding per import statement)
    return found


def test_no_package_imports_another_packages_private_names() -> None:
    assert _private_imports(ROOT / "src") == []


def test_the_private_import_check_can_fail(tmp_path: Path) -> None:
    """The check sees a private module or name imported across packages, not within one."""
    for name, text in {
        "dpcr/a/_m.py": "def f(): ...\n",
        "dpcr/a/sub/y.py": "from dpcr.a._m import f\n",  # a subpackage of its owner: allowed
        "dpcr/a/z.py": "import dpcr.a._m\n",
        "dpcr/b/x.py": "from dpcr.a._m import f\nfrom dpcr.a import _m\nfrom dpcr.a.z import _g\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _private_imports(tmp_path) == [
        "dpcr/b/x.py:1 imports dpcr.a._m",
        "dpcr/b/x.py:2 imports dpcr.a._m",
        "dpcr/b/x.py:3 imports dpcr.a.z._g",
    ]


#: Functions over the house limits (about 120 lines, 8 parameters), with their size when the
#: limit was set: each may shrink (then lower or drop its entry) and none may grow; a function not
#: named here must keep to the limits. ``self``/``cls`` are not counted.
OVERSIZE = {
    "cdc/follow.py:Follower.__init__": (9, 41),
    "changelog/_increment.py:load_increment": (11, 110),
    "changelog/_increment.py:_kept": (9, 31),
    "changelog/_increment.py:_create_p1": (9, 25),
    "changelog/_load.py:load": (17, 316),
    "changelog/_load.py:_clean_load": (12, 28),
    "changelog/_stage.py:_stage_jsonl": (8, 123),
    "changelog/_stage.py:stage": (11, 91),
    "engines/duckdb.py:aggregate": (14, 149),
    "engines/duckdb_incremental.py:incremental_step.attempt": (2, 122),
    "engines/duckdb_incremental.py:incremental_step": (2, 159),
    "engines/incremental.py:seeded_aggregate": (12, 54),
    "engines/incremental.py:settle": (9, 23),
    "engines/incremental.py:_settle": (9, 74),
    "local/_planner.py:plan_protocols": (12, 62),
    "mechanisms/_mutation_stats.py:release_first_k_stats": (12, 24),
    "release/_engine.py:load_and_aggregate": (10, 25),
    "release/_open.py:draw_open": (9, 34),
    "release/_open.py:select_keys": (9, 37),
    "release/_open.py:open_step": (10, 47),
    "report/write.py:write_reports": (10, 45),
    "store/_store.py:Store.commit_release": (10, 58),
}
MAX_PARAMS, MAX_LINES = 8, 120


def _function_sizes(src: Path) -> dict[str, tuple[int, int]]:
    """``{"pkg/module.py:Qualified.name": (parameters, lines)}`` for every function over the
    limits under ``src`` (``self``/``cls`` not counted; nested functions named by their path)."""
    import ast

    found: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, path, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                params = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if params > MAX_PARAMS or lines > MAX_LINES:
                    found[f"{path}:{prefix}{child.name}"] = (params, lines)
                visit(child, path, f"{prefix}{child.name}.")
            else:
                visit(child, path, prefix)

    for file in sorted(src.rglob("*.py")):
        visit(ast.parse(file.read_text(encoding="utf-8")), file.relative_to(src).as_posix(), "")
    return found


def test_no_function_grows_past_the_limits() -> None:
    found = _function_sizes(ROOT / "src" / "dpcr")
    new = {k: v for k, v in found.items() if k not in OVERSIZE}
    grown = {k: (OVERSIZE[k], v) for k, v in found.items()
             if k in OVERSIZE and (v[0] > OVERSIZE[k][0] or v[1] > OVERSIZE[k][1])}  # fmt: skip
    stale = {k: v for k, v in OVERSIZE.items() if found.get(k) != v and k not in grown}
    assert new == {}, f"over {MAX_PARAMS} parameters or {MAX_LINES} lines: split them"
    assert grown == {}, "grown past their recorded size (recorded, now): split them"
    assert stale == {}, "shrunk or gone: lower or drop their OVERSIZE entries"


def test_the_function_size_check_can_fail(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(
        "class C:\n"
        "    def ok(self, a, b, c, d, e, f, g, h):\n        pass\n"
        "    def wide(self, a, b, c, d, e, f, g, h, i):\n        pass\n"
        f"def long():\n{body}\n"
        "    def inner(*, a, b, c, d, e, f, g, h, i):\n        pass\n"
    )
    assert _function_sizes(tmp_path) == {
        "m.py:C.wide": (9, 2),
        "m.py:long": (0, MAX_LINES + 3),
        "m.py:long.inner": (9, 2),
    }
