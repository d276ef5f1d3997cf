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
