"""Names a package exports, imported from their modules when first used (PEP 562).

``import dpcr`` (which the command line does) and ``from dpcr.release import ContinualRelease``
then cost only the modules they need: a run that releases nothing new never imports DuckDB,
and no command imports the planner, the report or a source format it does not read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, where: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, which exports each name of ``where[module]``
    from ``module`` (a module's own name exports the module itself). A name is looked up once;
    the module's namespace keeps it."""
    source = {name: module for module, names in where.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = source.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if module.rpartition(".")[2] == name else getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(source))

    return __getattr__, __dir__
