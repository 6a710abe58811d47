"""One registry shape for everything selected by name: samplers, tasks, metrics, network kinds and
reference methods.

A `Registry` maps names to entries of one type. Entries are registered where they are defined,
by one call beside the definition (`registry.register(name, entry)`) or as a decorator
(`@registry.register(name)`); a plugin module registers its own the same way when
`posteriorjax.plugins.load` imports it. Every registry answers the same questions the same way:
`get(name)` (a `ValueError` naming the registry, the known names and the name given),
`names()` (registration order), `name in registry`, `registry[name]` (as `get`), `values()` and
`items()` (registration order). A duplicate name, or an entry that is not of the registry's type, is a
`ValueError` / `TypeError` naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_MISSING = object()


class Registry(Generic[T]):
    """Named entries of one type, in registration order.

    Args:
      what: what an entry is, as error messages say it (e.g. ``"sampler"``, ``"network kind"``).
      kind: the entries' type (a class, or a tuple of classes); ``callable`` for any callable.
    """

    def __init__(self, what: str, kind: type | tuple[type, ...] | Callable = object):
        self.what = what
        self.kind = kind
        self._entries: dict[str, T] = {}

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.names()})"

    def _check(self, name: str, entry) -> None:
        if self.kind is callable:
            ok, expected = callable(entry), "a callable"
        else:
            ok = isinstance(entry, self.kind)
            types = self.kind if isinstance(self.kind, tuple) else (self.kind,)
            expected = " or ".join(t.__name__ for t in types)
        if not ok:
            raise TypeError(
                f"{self.what} {name!r}: expected {expected}, got {type(entry).__name__} {entry!r:.80}"
            )
        if not (isinstance(name, str) and name):
            raise ValueError(f"name: expected a non-empty string naming the {self.what}, got {name!r}")
        if name in self._entries:
            raise ValueError(f"name: {self.what} {name!r} is already registered")

    def register(self, name: str, entry=_MISSING):
        """Add `entry` under `name` and return it; without `entry`, a decorator doing the same."""
        if entry is _MISSING:

            def decorator(value: T) -> T:
                return self.register(name, value)

            return decorator
        self._check(name, entry)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove the entry `name` (a plugin unloaded; no-op if absent)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry `name` (ValueError naming the registered ones otherwise)."""
        if name not in self._entries:
            raise ValueError(f"name: unknown {self.what} {name!r}; expected one of {self.names()}")
        return self._entries[name]

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._entries)

    def values(self) -> list[T]:
        """The entries, in registration order."""
        return list(self._entries.values())

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) pairs, in registration order."""
        return list(self._entries.items())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
