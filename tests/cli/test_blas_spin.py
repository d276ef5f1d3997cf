"""``dpcr`` shortens how long numpy's idle OpenBLAS threads spin (OPENBLAS_THREAD_TIMEOUT)
unless the environment sets it: OpenBLAS reads it when it is loaded, so the command line must
set it before anything it imports loads numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpcr import cli


def test_the_command_line_module_loads_no_numpy() -> None:
    code = "import sys, dpcr.cli; print(sorted({'numpy', 'duckdb'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ)  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_the_spin_is_set_unless_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == cli.BLAS_SPIN
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "28")
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "28"


def test_a_run_s_process_loads_numpy_after_the_spin_is_set() -> None:
    """``python -m dpcr.cli`` (and the ``dpcr`` script) set it in :func:`~dpcr.cli.main`,
    which runs before any command imports numpy."""
    code = ("import os, sys, runpy\n"
            "os.environ.pop('OPENBLAS_THREAD_TIMEOUT', None)\n"
            "import dpcr.cli\n"
            "real = dpcr.cli.build_parser\n"
            "def parser(*a, **k):\n"
            "    assert 'numpy' not in sys.modules\n"
            "    print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))\n"
            "    return real(*a, **k)\n"
            "dpcr.cli.build_parser = parser\n"
            "dpcr.cli.main(['--version'])\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ)  # fmt: skip
    assert out.stdout.splitlines()[0] == cli.BLAS_SPIN, out.stderr
