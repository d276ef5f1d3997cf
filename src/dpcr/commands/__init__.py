"""Subcommands of ``dpcr`` beyond plan/run, one module each.

Each module defines ``register(subparsers) -> None``, which adds its parser(s) and sets
``func`` (a function of the parsed ``argparse.Namespace`` returning the exit status). Modules
are found automatically; their heavy imports belong inside the command function.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING

from dpcr._lazy import exports

if TYPE_CHECKING:
    from dpcr.commands._feedback import Feedback

#: ``Feedback`` (what a command prints as it goes) is imported when first used.
__getattr__, __dir__ = exports("dpcr.commands", {"dpcr.commands._feedback": ["Feedback"]})

__all__ = ["Feedback", "register_all"]


def register_all(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    import pkgutil  # (a run, which imports Feedback, registers no command)

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(subparsers)
