"""Flags grouped by concern, as kube's ``pkg/server/options`` groups them: a group is a frozen dataclass
whose fields are named as its flags' destinations, with ``add_flags`` and ``validate``; a set of
groups adds, reads and validates them all in ``--help``'s order. The server's groups and the
reconciler's are both built on this, so the reading of parsed flags is written once."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, ClassVar, Self, TypeVar

__all__ = ["OptionSet", "group_from_args"]

G = TypeVar("G")


def group_from_args(group: type[G], args: argparse.Namespace) -> G:
    """A group's dataclass from the parsed flags: its fields are named as its flags' destinations."""
    return group(**{f.name: getattr(args, f.name) for f in fields(group)})  # type: ignore[arg-type]


class OptionSet:
    """Groups (``GROUPS``: field name -> group class, in ``--help``'s order) held as the subclass's
    dataclass fields of the same names."""

    GROUPS: ClassVar[dict[str, Any]] = {}

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        for group in cls.GROUPS.values():
            group.add_flags(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        return cls(**{name: group_from_args(group, args) for name, group in cls.GROUPS.items()})

    def validate(self) -> list[str]:
        """Every group's errors, in ``--help``'s order (each a line of the one message the process exits with)."""
        return [e for name in self.GROUPS for e in getattr(self, name).validate()]
