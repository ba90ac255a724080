"""One way to choose an implementation by its config name.

A class that lists `Registry` among its bases is a root with a registry of its own; each subclass
declared with a name (`class Dot(Attention, name="dot")`) registers there, so a config value
picks a class without an if/else chain, and adding one is a subclass and nothing else. A root
declared with a `kind` (`class Attention(Registry, nn.Module, kind="attention")`) is one a user's
plugin may add to (`nmt.plugins`): the config reads its names through `names(kind)`, without
importing the module (and torch) that defines it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from nmt.errors import NMTError

_KINDS: dict[str, dict[str, type]] = {}  # kind -> its root's registry


class Registry:
    registry: ClassVar[dict[str, type]]

    def __init_subclass__(cls, name: str | None = None, kind: str | None = None, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if Registry in cls.__bases__:
            cls.registry = {}
            if kind:
                _KINDS[kind] = cls.registry
        if name:
            held = cls.registry.get(name)
            if held is not None and held.__module__ != cls.__module__:
                raise NMTError(
                    f"{cls.__module__}.{cls.__qualname__}: the name {name!r} is taken by "
                    f"{held.__module__}.{held.__qualname__}; register it under another name"
                )
            cls.registry[name] = cls

    @classmethod
    def build(cls, name: str, *args: Any, **kwargs: Any):
        """An instance of the subclass registered as `name`."""
        return cls.registry[name](*args, **kwargs)


def names(kind: str) -> dict[str, type]:
    """The classes registered so far under a root of `kind` (empty until its module is imported)."""
    return _KINDS.get(kind, {})


def forget(module: str) -> None:
    """Unregister every class of `module` (a plugin whose import failed half way)."""
    for registry in _KINDS.values():
        for name in [name for name, cls in registry.items() if cls.__module__ == module]:
            del registry[name]
