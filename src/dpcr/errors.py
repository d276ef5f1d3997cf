"""Exceptions raised by dpcr.

Hierarchy::

    DpcrError
    ├── ConfigError (ValueError)         a configuration or parameter is invalid; names the fix
    ├── ChangelogError (ValueError)      a malformed mutation record; names record, field, fix
    ├── PrivacyError                     a privacy claim cannot be proven, so nothing is released
    │   ├── BudgetExhaustedError         a release would cross the configured budget
    │   ├── UnsupportedEventError        an accountant cannot compose this event
    │   └── InsecureRandomnessError      a seeded generator offered where a real release is made
    ├── StoreError                       the store is missing, corrupt or bound to another plan
    │   └── RewrittenError               what earlier runs consumed or published no longer matches
    │                                    (a rewritten source, an edited store, public files the
    │                                    store cannot account for)
    ├── OutputError                      dpcr cannot write where it writes (a symbolic link there,
    │                                    a folder it cannot create, an unreadable public file)
    ├── DiskFullError                    the disk filled while dpcr wrote; says what is intact
    └── MissingExtraError (ImportError)  an optional dependency is not installed; names the extra
"""

from __future__ import annotations


class DpcrError(Exception):
    """Base class of every error dpcr raises on purpose."""


class ConfigError(DpcrError, ValueError):
    """A configuration value or parameter is invalid."""


class ChangelogError(DpcrError, ValueError):
    """A changelog record is malformed or inconsistent.

    ``record`` is the 1-based line/record number in the source (or ``None``), ``field`` the
    offending field, ``reason`` a short machine-readable code (e.g. ``"unknown_op"``).
    """

    def __init__(
        self,
        message: str,
        *,
        record: int | None = None,
        field: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.record = record
        self.field = field
        self.reason = reason


class PrivacyError(DpcrError):
    """A privacy guarantee cannot be established; dpcr refuses to release."""


class BudgetExhaustedError(PrivacyError):
    """A release would make the guarantee exceed the configured budget."""


class UnsupportedEventError(PrivacyError, TypeError):
    """An accountant was given an event it cannot compose."""


class InsecureRandomnessError(PrivacyError):
    """A seeded (simulation) generator was used where a real release is made."""


class StoreError(DpcrError):
    """The release store cannot be used (missing, corrupt, or bound to a different plan)."""


class RewrittenError(StoreError):
    """What earlier runs consumed, released or published no longer matches what they recorded:
    the source's consumed records changed, the store was edited, or public outputs show what
    the store cannot account for. ``dpcr verify`` exits with status 1 for it."""


class OutputError(DpcrError):
    """An output file or folder cannot be written safely where dpcr writes it."""


class DiskFullError(DpcrError):
    """The disk (or quota) filled while dpcr wrote; the message says what is intact and to free
    space and run again (never to restore a backup)."""


class MissingExtraError(DpcrError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    @classmethod
    def for_module(cls, module: str, extra: str) -> MissingExtraError:
        return cls(
            f"{module!r} is not installed; install the optional extra with "
            f"`pip install 'dpcr[{extra}]'`"
        )
