"""Name -> (typed config class, factory) registries for tasks, models and reproductions.

The pattern follows timm's ``create_model``: one registration per name, a config dataclass
holding every field with its default, and a factory. A *preset* is the same factory under
another name with other defaults (e.g. ``ndr`` = the Transformer classifier with geometric
attention, copy gate and shared layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

from recombine.errors import UserError, choices_hint

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry:
    name: str
    config_class: type
    factory: Callable[..., Any]
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)

    def default_config(self) -> Any:
        """The config dataclass instance with this entry's preset defaults applied."""
        return self.config_class(**self.defaults)

    def field_names(self) -> list[str]:
        return [f.name for f in fields(self.config_class)]


class Registry(Generic[F]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, config_class: type, description: str, **defaults: Any) -> Callable[[F], F]:
        def decorator(factory: F) -> F:
            self.add(name, config_class, factory, description, **defaults)
            return factory

        return decorator

    def add(
        self, name: str, config_class: type, factory: Callable[..., Any], description: str, **defaults: Any
    ) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        known = {f.name for f in fields(config_class)}
        unknown = set(defaults) - known
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: defaults for unknown fields {sorted(unknown)}")
        self._entries[name] = Entry(name, config_class, factory, description, dict(defaults))

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(f"unknown {self.kind} {name!r}; {choices_hint(name, self._entries)}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]
